"""The pod contract between the operator and the agent (docs/design.md §3): where each container finds what
the other wrote, the volumes that carry it, and the keys of the Secrets mounted there.

The operator's pod builder lays the pod out with these; the agent's defaults and its reading of the mounts
use the same names, so neither program keeps a copy of the other's.
"""

from __future__ import annotations

# Paths inside the pod's containers.
MOUNT_ROOT = "/var/run/berth"  # one read-only directory per Secret volume below
CONFIG_DIR = "/etc/berth"  # the agent writes config.yml and the secret files; the registry reads
STATE_DIR = "/tmp/berth"  # on the tmp volume both containers mount: berth-supervise writes, the agent reads
DATA_DIR = "/var/lib/registry"  # the filesystem storage root (the PVC)
TMP_DIR = "/tmp"
CONFIG_NAME = "config.yml"  # in CONFIG_DIR: the registry's configuration
AGENT_HEALTH_PORT = 8081  # /startupz /readyz /livez /metrics
REGISTRY_METRICS_PORT = 8082  # the registry's own /metrics, served by the agent (stable across reloads)
# The pod's notification outbox (docs/decisions/0002-a-notification-outbox-in-the-agent.md): the registry's only
# endpoint, the agent's relay on the loopback; it keeps each event in OUTBOX_DIR (on the tmp volume) before it answers,
# then delivers it to every endpoint.
OUTBOX_PORT = 8083
OUTBOX_DIR = f"{STATE_DIR}/outbox"
OUTBOX_MAX_BYTES = 16 << 20  # the events the outbox keeps at most (the tmp volume's sizeLimit is 64Mi)

# Volumes.
CONFIG_VOLUME = "config"
TMP_VOLUME = "tmp"
DATA_VOLUME = "data"
TOKEN_VOLUME = "agent-token"
# The Secret volumes, each mounted at MOUNT_ROOT/<name> when the spec needs it.
COSI_VOLUME = "cosi"
HTPASSWD_VOLUME = "htpasswd"
HTTP_SECRET_VOLUME = "http-secret"
REDIS_VOLUME = "redis"
TLS_VOLUME = "tls"
PROXY_VOLUME = "proxy"  # spec.config.proxy.credentials.secretName: the upstream's username and password
NOTIFICATIONS_VOLUME = "notifications"  # spec.config.notifications.secretName: header values (Authorization tokens)
AZURE_VOLUME = "azure"  # spec.config.storage.azure.credentials.secret: the account key or the client secret
GCS_VOLUME = "gcs"  # spec.config.storage.gcs.credentials.secret: the service account's JSON key
S3_VOLUME = "s3"  # spec.config.storage.s3.credentials.secretName: the access key (COSI's keys are at cosi/)
SECRET_VOLUMES = (COSI_VOLUME, HTPASSWD_VOLUME, HTTP_SECRET_VOLUME, REDIS_VOLUME, TLS_VOLUME, PROXY_VOLUME,
                  NOTIFICATIONS_VOLUME, AZURE_VOLUME, GCS_VOLUME, S3_VOLUME)
# The token auth trust volumes, each a Secret or a ConfigMap (spec.config.auth.token.rootCertBundle and
# .jwks), mounted whole at MOUNT_ROOT/<name> like the Secrets.
TOKEN_BUNDLE_VOLUME = "token-bundle"
TOKEN_JWKS_VOLUME = "token-jwks"
S3_CA_VOLUME = "s3-ca"  # spec.config.storage.s3.ca: the S3 endpoint's CA certificate
TRUST_VOLUMES = (TOKEN_BUNDLE_VOLUME, TOKEN_JWKS_VOLUME, S3_CA_VOLUME)
# Where the registry finds the S3 endpoint's CA: a directory of the config volume (the agent writes the CA there,
# render/paths.py S3_CA_FILE), given to the registry as SSL_CERT_DIR before the system's
# (docs/decisions/0035-s3-credentials-and-ca.md). AWS_CA_BUNDLE is never given to it: 2.8 panics with it, 3.1.1 trusts
# nothing else.
S3_CA_DIR = f"{CONFIG_DIR}/s3-ca"
SYSTEM_CERT_DIRS = ("/etc/ssl/certs", "/etc/pki/tls/certs")
INPUT_VOLUMES = SECRET_VOLUMES + TRUST_VOLUMES  # every mounted input volume

# Keys of the Secrets.
HTTP_SECRET_KEY = "secret"  # of the HTTP secret the operator generates when spec.http.secret is absent
TLS_CERT_KEY = "tls.crt"  # of a kubernetes.io/tls Secret
TLS_KEY_KEY = "tls.key"
PROXY_USERNAME_KEY = "username"  # of the proxy credentials Secret (the kubernetes.io/basic-auth keys)
PROXY_PASSWORD_KEY = "password"

# The agent's copies of the registry's egress proxy variables (spec.env's HTTP_PROXY, HTTPS_PROXY, NO_PROXY, either
# case), which its pre-flights read: under their own names the official Kubernetes client would send the agent's
# API calls through the proxy too.
PREFLIGHT_ENV_PREFIX = "BERTH_PREFLIGHT_"

__all__ = [
    "AGENT_HEALTH_PORT", "AZURE_VOLUME", "CONFIG_DIR", "CONFIG_NAME", "CONFIG_VOLUME", "COSI_VOLUME", "DATA_DIR",
    "DATA_VOLUME", "GCS_VOLUME", "HTPASSWD_VOLUME", "HTTP_SECRET_KEY", "HTTP_SECRET_VOLUME", "INPUT_VOLUMES",
    "MOUNT_ROOT", "NOTIFICATIONS_VOLUME", "OUTBOX_DIR", "OUTBOX_MAX_BYTES", "OUTBOX_PORT", "PREFLIGHT_ENV_PREFIX",
    "S3_CA_DIR", "S3_CA_VOLUME", "S3_VOLUME",
    "SYSTEM_CERT_DIRS",
    "PROXY_PASSWORD_KEY", "REGISTRY_METRICS_PORT",
    "PROXY_USERNAME_KEY", "PROXY_VOLUME", "REDIS_VOLUME",
    "SECRET_VOLUMES",
    "STATE_DIR", "TLS_CERT_KEY", "TLS_KEY_KEY", "TLS_VOLUME", "TMP_DIR", "TMP_VOLUME",
    "TOKEN_BUNDLE_VOLUME", "TOKEN_JWKS_VOLUME", "TOKEN_VOLUME", "TRUST_VOLUMES",
]
