"""Mount roots for rendering tests: every Secret a Registry needs, laid out as the kubelet lays them out.

Every secret value written is remembered in `Mounts.secret_values`, so tests can assert that none of them
leaks into an error, stderr or a log.
"""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
import yaml

from berth_api import Registry, RegistrySpec
from support.registries.secretdir import write_secret_dir
from support.services.certs import self_signed_pair

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
COSI_FORMATS = ("v1alpha1", "v1alpha2-cosi", "v1alpha2-kep")


@dataclass(frozen=True)
class S3Target:
    """Where the test's S3 (moto) is and the key the registry gets."""

    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str
    region: str = "us-east-1"


@dataclass
class Mounts:
    root: Path
    user: tuple[str, str] | None = None  # htpasswd user and password
    tls_cert: bytes | None = None
    secret_values: list[str] = field(default_factory=list)


def load_example(name: str) -> Registry:
    return Registry.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))


def example_names() -> list[str]:
    return sorted(path.name for path in EXAMPLES.glob("*.yaml"))


def htpasswd_entry(user: str, password: str) -> bytes:
    # Cost 4, the minimum: the registry checks every authenticated request against it.
    return user.encode() + b":" + bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4))


def cosi_secret(target: S3Target, form: str = "v1alpha1", *, addressing_style: str | None = None) -> dict[str, str]:
    """The BucketAccess credentials Secret's data in one of the three formats
    (docs/upstream.md#cosi-v1alpha1-secret, docs/upstream.md#cosi-v1alpha2-secret)."""
    if form == "v1alpha1":
        info = {
            "metadata": {"name": "bc-0b5e6c1e-0000-4000-8000-000000000001", "creationTimestamp": None},
            "spec": {
                "bucketName": target.bucket,
                "authenticationType": "Key",
                "secretS3": {"endpoint": target.endpoint, "region": target.region,
                             "accessKeyID": target.access_key_id, "accessSecretKey": target.secret_access_key},
                "secretAzure": None,
                "protocols": ["S3"],
            },
        }
        return {"BucketInfo": json.dumps(info)}
    if form == "v1alpha2-cosi":
        data = {"COSI_S3_BUCKET_ID": target.bucket, "COSI_S3_ENDPOINT": target.endpoint,
                "COSI_S3_REGION": target.region, "COSI_S3_ACCESS_KEY_ID": target.access_key_id,
                "COSI_S3_ACCESS_SECRET_KEY": target.secret_access_key}
        if addressing_style:
            data["COSI_S3_ADDRESSING_STYLE"] = addressing_style
        return data
    if form == "v1alpha2-kep":
        return {"BUCKET_NAME": target.bucket, "AWS_ENDPOINT_URL": target.endpoint,
                "AWS_DEFAULT_REGION": target.region, "AWS_ACCESS_KEY_ID": target.access_key_id,
                "AWS_SECRET_ACCESS_KEY": target.secret_access_key}
    raise ValueError(form)


def write_mounts_for(spec: RegistrySpec, root: Path, *, s3: S3Target | None = None, cosi_format: str = "v1alpha1",
                     redis_url: str | None = None, http_secret: str | None = None) -> Mounts:
    """Write every Secret volume `spec` needs under `root`, with fresh random secret values."""
    mounts = Mounts(root=Path(root))
    root.mkdir(parents=True, exist_ok=True)
    storage = spec.config.storage
    if storage.object_storage is not None:
        if s3 is None:
            raise ValueError("an objectStorage Registry needs an S3Target")
        write_secret_dir(root / "cosi", cosi_secret(s3, cosi_format))
        mounts.secret_values += [s3.access_key_id, s3.secret_access_key]
    if storage.s3 is not None and storage.s3.credentials is not None:
        if s3 is None:
            raise ValueError("an s3 Registry with credentials needs an S3Target (its keys)")
        creds = storage.s3.credentials
        write_secret_dir(root / "s3", {creds.access_key_id_key: s3.access_key_id,
                                       creds.secret_access_key_key: s3.secret_access_key})
        mounts.secret_values += [s3.access_key_id, s3.secret_access_key]
    if storage.auth.htpasswd is not None:
        user = ("pusher", secrets.token_urlsafe(12))
        write_secret_dir(root / "htpasswd", {storage.auth.htpasswd.secret.field: htpasswd_entry(*user) + b"\n"})
        mounts.user = user
        mounts.secret_values.append(user[1])
    http_secret = http_secret or secrets.token_urlsafe(24)
    key = spec.http.secret.field if spec.http.secret is not None else "secret"
    write_secret_dir(root / "http-secret", {key: http_secret})
    mounts.secret_values.append(http_secret)
    if spec.redis is not None:
        password = secrets.token_urlsafe(16)
        url = redis_url or f"redis://:{password}@127.0.0.1:6379/0"
        write_secret_dir(root / "redis", {spec.redis.secret.field: url + "\n"})
        mounts.secret_values += [password, url]
    if spec.http.tls is not None:
        cert, key_pem = self_signed_pair()
        write_secret_dir(root / "tls", {"tls.crt": cert, "tls.key": key_pem})
        mounts.tls_cert = cert
        mounts.secret_values.append(key_pem.decode())
    notifications = spec.config.notifications
    if notifications is not None and notifications.secret_name is not None:
        values = {key: f"Bearer {secrets.token_urlsafe(18)}" for key in notifications.secret_keys()}
        write_secret_dir(root / "notifications", values)
        # Not in secret_values: the registry itself prints each endpoint's headers at start, and these tests run
        # it without berth-supervise, which cuts that line (tests/agent/e2e/test_e2e_notifications.py checks it).
    if storage.azure is not None and storage.azure.credentials.secret is not None:
        key = base64.b64encode(secrets.token_bytes(64)).decode()
        write_secret_dir(root / "azure", {storage.azure.credentials.secret.field: key})
        mounts.secret_values.append(key)
    if storage.gcs is not None and storage.gcs.credentials.secret is not None:
        private = secrets.token_urlsafe(24)  # the renderer only copies the key file (pre-flight signs with it)
        key_file = json.dumps({"type": "service_account", "client_email": "r@p.iam.gserviceaccount.com",
                               "private_key_id": "k1", "token_uri": "https://oauth2.googleapis.com/token",
                               "private_key": f"-----BEGIN PRIVATE KEY-----\n{private}\n-----END PRIVATE KEY-----\n"})
        write_secret_dir(root / "gcs", {storage.gcs.credentials.secret.field: key_file})
    return mounts
