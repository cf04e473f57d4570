"""Where the rendered files go and how the config names them: the config dir (the shared config volume), the data
dir (the PVC), and the files beside config.yml."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from berth_api.pod import CONFIG_DIR, DATA_DIR, OUTBOX_PORT, TLS_CERT_KEY, TLS_KEY_KEY
from berth_supervise.protocol import S3_CREDENTIALS_NAME

# Beside config.yml, by name relative to the config dir.
HTPASSWD_FILE = "htpasswd"
TLS_CERT_FILE = f"tls/{TLS_CERT_KEY}"
TLS_KEY_FILE = f"tls/{TLS_KEY_KEY}"
TOKEN_BUNDLE_FILE = "token/rootcertbundle.pem"  # auth.token.rootcertbundle
TOKEN_JWKS_FILE = "token/jwks.json"  # auth.token.jwks (Distribution 3)
GCS_KEY_FILE = "gcs/key.json"  # storage.gcs keyfile: the service account's JSON key, as the Secret holds it
# Not a file: Rendered.origins' key for where the S3 key came from (the pre-flight names it when it refuses).
S3_KEYS_ORIGIN = "storage.s3 keys"
S3_CA_FILE = "s3-ca/ca.crt"  # storage.s3.ca, in berth_api.pod.S3_CA_DIR (the registry's SSL_CERT_DIR)
# Temporary S3 credentials: the s3 driver has no session token parameter (2.8.2 s3.go:342, 3.1.1 s3.go:326 pass
# ""), so the key, its secret and the token go to an AWS shared credentials file that berth-supervise names in the
# registry's AWS_SHARED_CREDENTIALS_FILE (a file of the protocol between the two).
S3_CREDENTIALS_FILE = S3_CREDENTIALS_NAME
# The notification endpoints the pod's outbox delivers to (outbox/), header values included: read by the
# agent's outbox, never by the registry, whose one endpoint is the outbox. A change here restarts no registry.
OUTBOX_FILE = "outbox.json"


@dataclass(frozen=True)
class RenderPaths:
    config_dir: Path = Path(CONFIG_DIR)  # config.yml, htpasswd and tls/ (the shared config volume)
    data_dir: Path = Path(DATA_DIR)  # filesystem rootdirectory (the PVC)
    # The registry container's CA bundle: Distribution 3.1 verifies a TLS redis against `redis.tls.rootcas` only
    # (no system roots without it). The official registry:3 image installs Alpine's ca-certificates here.
    ca_bundle: Path = Path("/etc/ssl/certs/ca-certificates.crt")
    outbox_url: str = f"http://127.0.0.1:{OUTBOX_PORT}/events"  # the agent's relay (--outbox-addr)


__all__ = ["GCS_KEY_FILE", "HTPASSWD_FILE", "OUTBOX_FILE", "S3_CA_FILE", "S3_CREDENTIALS_FILE", "S3_KEYS_ORIGIN",
           "TLS_CERT_FILE", "TLS_KEY_FILE", "TOKEN_BUNDLE_FILE", "TOKEN_JWKS_FILE", "RenderPaths"]
