"""Reading what the registry pod mounts: one Secret volume per source under the mount root (docs/design.md §3).

Only the sources the spec needs are read. Each file may be a kubelet AtomicWriter symlink (`key -> ..data/key`);
reading through the link gives the current payload. Every problem raises InputError naming the source directory
and key (never the value).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from berth_api import RegistrySpec
from berth_api.auth import TrustKeyRef
from berth_api.pod import (
    AZURE_VOLUME,
    GCS_VOLUME,
    HTTP_SECRET_KEY,
    MOUNT_ROOT,
    NOTIFICATIONS_VOLUME,
    PROXY_PASSWORD_KEY,
    PROXY_USERNAME_KEY,
    PROXY_VOLUME,
    S3_CA_VOLUME,
    S3_VOLUME,
    TLS_CERT_KEY,
    TLS_KEY_KEY,
    TOKEN_BUNDLE_VOLUME,
    TOKEN_JWKS_VOLUME,
)
from berth_api.s3 import S3_PATH, S3Storage

from ..core.errors import InputError
from .cosi import S3Credentials, read_cosi
from .secret_volume import DOCUMENT_LIMIT, HTPASSWD_LIMIT, TRUST_LIMIT, read_key, read_text

__all__ = ["DEFAULT_MOUNT_ROOT", "GcsKey", "MountedInputs", "RedisAddress", "S3Credentials", "parse_gcs_key",
           "parse_redis_url", "read_inputs", "trust_origin"]

# The Secret volumes' names (subdirectories of the mount root) and keys are the pod contract, berth_api.pod.
DEFAULT_MOUNT_ROOT = Path(MOUNT_ROOT)
# Distribution 2.8 and 3 accept only bcrypt entries in htpasswd files.
_HTPASSWD_LINE = re.compile(rb"^[^:\s]+:\$2[aby]?\$[0-9]{2}\$[./A-Za-z0-9]{53}$")


def _hidden(value: object) -> str:
    return "<unset>" if value is None else "<hidden>"


@dataclass(frozen=True, repr=False)
class MountedInputs:
    """The values read from the mounted Secrets; None where the spec does not use that source."""

    s3: S3Credentials | None = None
    htpasswd: bytes | None = None
    http_secret: str | None = None
    redis: RedisAddress | None = None  # the redis URL, parsed where it was read
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    token_bundle: bytes | None = None  # auth.token.rootCertBundle (PEM certificates)
    token_jwks: bytes | None = None  # auth.token.jwks (a JSON Web Key Set)
    proxy_username: str | None = None  # proxy.credentials: the upstream's user name and password
    proxy_password: str | None = None
    notification_headers: dict[str, str] | None = None  # notifications.secretName: header value by key
    azure_secret: str | None = None  # storage.azure.credentials.secret: the account key or the client secret
    gcs_key: GcsKey | None = None  # storage.gcs.credentials.secret: the service account's JSON key
    s3_ca: bytes | None = None  # storage.s3.ca: the S3 endpoint's CA certificate (PEM)

    def __repr__(self) -> str:
        parts = [f"s3={self.s3!r}"]
        for field in dataclasses.fields(self)[1:]:
            parts.append(f"{field.name}={_hidden(getattr(self, field.name))}")
        return f"MountedInputs({', '.join(parts)})"

    __str__ = __repr__


@dataclass(frozen=True, repr=False)
class RedisAddress:
    """A parsed redis URL: redis[s]://[user[:password]@]host[:port][/db]."""

    host: str
    port: int
    username: str | None
    password: str | None
    db: int | None
    tls: bool
    source: str = "redis"  # where it was read ("redis/<key>"), for messages that must not quote the URL

    @property
    def addr(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __repr__(self) -> str:
        return f"RedisAddress(addr={self.addr!r}, db={self.db!r}, tls={self.tls!r}, credentials=<hidden>)"


def parse_redis_url(url: str, where: str) -> RedisAddress:
    """Parse the redis URL held by the redis Secret; errors name `where` (the file and key), never the URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InputError(where,
                         "is not a valid redis URL (expected redis[s]://[user:password@]host:port[/db])") from None
    if parts.scheme not in ("redis", "rediss"):
        raise InputError(where, "must start with redis:// or rediss://")
    if not parts.hostname:
        raise InputError(where, "has no host (expected redis[s]://[user:password@]host:port[/db])")
    if parts.query or parts.fragment:
        raise InputError(where, "must not carry a query or fragment; set timeouts and pool in spec.redis")
    db_text = parts.path.strip("/")
    if db_text and not db_text.isdigit():
        raise InputError(where, "has a database path that is not a number (expected /0, /1, ...)")
    return RedisAddress(
        host=parts.hostname,
        port=port or 6379,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        db=int(db_text) if db_text else None,
        tls=parts.scheme == "rediss",
        source=where,
    )


def _check_htpasswd(data: bytes, where: str) -> None:
    for number, line in enumerate(data.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(b"#"):
            continue
        if not _HTPASSWD_LINE.match(line):
            raise InputError(where, f"line {number} is not a bcrypt htpasswd entry (user:$2y$...); "
                             "the registry accepts only bcrypt")


def _check_pem(data: bytes, where: str, marker: bytes, what: str) -> None:
    if b"-----BEGIN " not in data or marker not in data:
        raise InputError(where, f"does not hold a PEM {what}")


def read_inputs(spec: RegistrySpec, mount_root: Path = DEFAULT_MOUNT_ROOT,
                roots: Mapping[str, Path] | None = None, *, registry: str | None = None) -> MountedInputs:
    """Read every source the spec needs from the mount root; raises InputError on the first problem.

    `roots` reads some sources from another root laid out the same way (`<root>/<source>/<key>`): the agent's
    copy of a Secret read over the API (sources/api_secrets.py), so it gets exactly the parsing and checks below.
    `registry`: the Registry's name, for messages naming the objects Berth made for it (None: `<registry>`).
    """
    mount_root = Path(mount_root)

    def root(source: str) -> Path:
        return Path(roots[source]) if roots and source in roots else mount_root

    values: dict[str, object] = {}
    for read in (_storage_inputs, _auth_inputs, _http_inputs, _proxy_inputs, _notification_inputs):
        values.update(read(spec, root, registry))
    values.update(_cloud_storage(spec, root))
    return MountedInputs(**values)


Root = Callable[[str], Path]  # a source's name -> the root it is read under


def _storage_inputs(spec: RegistrySpec, root: Root, _registry: str | None) -> dict[str, object]:
    """S3 credentials (COSI's Secret or storage.s3's) and the S3 endpoint's CA."""
    storage = spec.config.storage
    values: dict[str, object] = {}
    if storage.object_storage is not None:
        values["s3"] = read_cosi(root("cosi") / "cosi")
    if storage.s3 is not None:
        values["s3"] = read_s3(storage.s3, root(S3_VOLUME))
        if storage.s3.ca is not None:
            ca = storage.s3.ca
            data = read_key(root(S3_CA_VOLUME), S3_CA_VOLUME, ca.ref.field, limit=TRUST_LIMIT,
                            why=f"{S3_PATH}.ca, {trust_origin(ca)}")
            _check_pem(data, f"{S3_CA_VOLUME}/{ca.ref.field}", b"CERTIFICATE-----", "certificate")
            values["s3_ca"] = data
    return values


def _auth_inputs(spec: RegistrySpec, root: Root, _registry: str | None) -> dict[str, object]:
    """The htpasswd file, and token auth's root certificate bundle and JWKS."""
    auth_path, auth = spec.config.auth_in_use
    values: dict[str, object] = {}
    if auth.htpasswd is not None:
        key = auth.htpasswd.secret.field
        data = read_key(root("htpasswd"), "htpasswd", key, why=f"{auth_path}.htpasswd.secret",
                        limit=HTPASSWD_LIMIT)
        _check_htpasswd(data, f"htpasswd/{key}")
        values["htpasswd"] = data
    token = auth.token
    if token is not None:
        for volume, ref, field, name in ((TOKEN_BUNDLE_VOLUME, token.root_cert_bundle, "rootCertBundle",
                                          "token_bundle"), (TOKEN_JWKS_VOLUME, token.jwks, "jwks", "token_jwks")):
            if ref is not None:
                values[name] = read_key(root(volume), volume, ref.ref.field, limit=TRUST_LIMIT,
                                        why=f"{auth_path}.token.{field}, {trust_origin(ref)}")
    return values


def _http_inputs(spec: RegistrySpec, root: Root, registry: str | None) -> dict[str, object]:
    """The http secret (the user's, else the operator-generated one), the redis URL and the TLS pair."""
    values: dict[str, object] = {}
    if spec.http.secret is not None:
        values["http_secret"] = read_text(root("http-secret"), "http-secret", spec.http.secret.field,
                                          why="spec.http.secret")
    elif os.path.lexists(root("http-secret") / "http-secret" / HTTP_SECRET_KEY):
        values["http_secret"] = read_text(
            root("http-secret"), "http-secret", HTTP_SECRET_KEY, why="the operator-generated http secret"
        )
    if spec.redis is not None:
        key = spec.redis.secret.field
        url = read_text(root("redis"), "redis", key, why="spec.redis.secret")
        values["redis"] = parse_redis_url(url, f"redis/{key}")
    if spec.http.tls is not None:
        why = spec.http.tls.origin(registry)  # the field the user wrote: secretName, or the issuerRef's Certificate
        cert = read_key(root("tls"), "tls", TLS_CERT_KEY, why=why, limit=DOCUMENT_LIMIT)
        key = read_key(root("tls"), "tls", TLS_KEY_KEY, why=why, limit=DOCUMENT_LIMIT)
        _check_pem(cert, f"tls/{TLS_CERT_KEY}", b"CERTIFICATE-----", "certificate")
        _check_pem(key, f"tls/{TLS_KEY_KEY}", b"PRIVATE KEY-----", "private key")
        values["tls_cert"], values["tls_key"] = cert, key
    return values


def _proxy_inputs(spec: RegistrySpec, root: Root, _registry: str | None) -> dict[str, object]:
    """The pull-through cache's upstream credentials."""
    proxy = spec.config.proxy
    values: dict[str, object] = {}
    if proxy is not None and proxy.credentials is not None:
        why = "spec.config.proxy.credentials.secretName"
        for key, name in ((PROXY_USERNAME_KEY, "proxy_username"), (PROXY_PASSWORD_KEY, "proxy_password")):
            values[name] = read_text(root(PROXY_VOLUME), PROXY_VOLUME, key, why=why)
            if not values[name]:
                raise InputError(f"{PROXY_VOLUME}/{key}", f"is empty (asked for by {why})")
    return values


def _notification_inputs(spec: RegistrySpec, root: Root, _registry: str | None) -> dict[str, object]:
    """Header values for the notification endpoints, from their Secret."""
    notifications = spec.config.notifications
    if notifications is None or notifications.secret_name is None:
        return {}
    why = "spec.config.notifications.secretName"
    headers = {}
    for key in notifications.secret_keys():
        value = read_text(root(NOTIFICATIONS_VOLUME), NOTIFICATIONS_VOLUME, key, why=why)
        if not value:
            raise InputError(f"{NOTIFICATIONS_VOLUME}/{key}", f"is empty (asked for by {why})")
        if "\r" in value or "\n" in value or "\0" in value:
            raise InputError(f"{NOTIFICATIONS_VOLUME}/{key}",
                             f"holds a line break or NUL, which no header value may (asked for by {why})")
        headers[key] = value
    return {"notification_headers": headers}


def read_s3(s3: S3Storage, mount_root: Path) -> S3Credentials:
    """storage.s3 as the same credentials a COSI Secret gives: the bucket from the spec, the key from its Secret
    (none: the pod's identity), so the render and the pre-flight are COSI's."""
    access_key_id = secret_access_key = session_token = ""
    if s3.credentials is not None:
        why = f"{S3_PATH}.credentials"
        keys = [s3.credentials.access_key_id_key, s3.credentials.secret_access_key_key]
        if s3.credentials.session_token_key is not None:
            keys.append(s3.credentials.session_token_key)
        values = []
        for key in keys:
            value = read_text(mount_root, S3_VOLUME, key, why=why)
            if not value:
                raise InputError(f"{S3_VOLUME}/{key}", f"is empty (asked for by {why})")
            if any(c.isspace() for c in value):  # one line of the registry's credentials file each
                raise InputError(f"{S3_VOLUME}/{key}", f"holds white space, which no AWS key does (asked for by {why})")
            values.append(value)
        access_key_id, secret_access_key, *token = values
        session_token = token[0] if token else ""
    return S3Credentials(bucket=s3.bucket, endpoint=s3.region_endpoint.rstrip("/") if s3.region_endpoint else None,
                         region=s3.region, access_key_id=access_key_id, secret_access_key=secret_access_key,
                         addressing_style="path" if s3.path_style else "virtual", session_token=session_token)


def _cloud_storage(spec: RegistrySpec, root: Root) -> dict[str, object]:
    """The azure or gcs driver's credentials from their Secret volume; nothing for default credentials."""
    storage = spec.config.storage
    if storage.azure is not None and storage.azure.credentials.secret is not None:
        ref = storage.azure.credentials.secret
        why = "spec.config.storage.azure.credentials.secret"
        value = read_text(root(AZURE_VOLUME), AZURE_VOLUME, ref.field, why=why)
        if not value:
            raise InputError(f"{AZURE_VOLUME}/{ref.field}", f"is empty (asked for by {why})")
        return {"azure_secret": value}
    if storage.gcs is not None and storage.gcs.credentials.secret is not None:
        ref = storage.gcs.credentials.secret
        data = read_key(root(GCS_VOLUME), GCS_VOLUME, ref.field, why="spec.config.storage.gcs.credentials.secret",
                        limit=DOCUMENT_LIMIT)
        return {"gcs_key": parse_gcs_key(data, f"{GCS_VOLUME}/{ref.field}")}
    return {}


GCS_KEY_FIELDS = ("client_email", "private_key", "private_key_id", "token_uri")


@dataclass(frozen=True, repr=False)
class GcsKey:
    """A service account's JSON key: the file as read (the driver's keyfile) and the fields pre-flight signs with."""

    data: bytes
    client_email: str
    private_key_id: str
    private_key: str
    token_uri: str
    source: str  # gcs/<key>, for messages

    def __repr__(self) -> str:
        return f"GcsKey(client_email={self.client_email!r}, source={self.source!r}, key=<hidden>)"


def parse_gcs_key(data: bytes, where: str) -> GcsKey:
    """The parsed service-account key; InputError naming `where` (never a value) if it is not one."""
    try:
        key = json.loads(data)
    except ValueError:
        raise InputError(where, "is not JSON (expected a service account key file)") from None
    if not isinstance(key, dict) or key.get("type") != "service_account":
        raise InputError(where, 'is not a service account key (expected "type": "service_account")')
    for name in GCS_KEY_FIELDS:
        if not isinstance(key.get(name), str) or not key[name]:
            raise InputError(where, f"has no {name} (a service account key file has it)")
    if "PRIVATE KEY-----" not in key["private_key"]:
        raise InputError(where, "has a private_key that is not a PEM private key")
    return GcsKey(data, key["client_email"], key["private_key_id"], key["private_key"], key["token_uri"], where)


def trust_origin(ref: TrustKeyRef) -> str:
    """`ConfigMap NAME key KEY`: which object a trust file comes from, for messages (never its content)."""
    return f"{ref.kind} {ref.ref.name} key {ref.ref.field}"
