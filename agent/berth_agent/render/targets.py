"""What a rendered config points the registry at: its listen address, its redis, its S3 bucket.

Read from the parsed document (Rendered.document), never from the YAML text again: pre-flight checks them before
a restart, the applier restarts on the address, garbage collection clears the redis cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from berth_supervise.protocol import split_addr


@dataclass(frozen=True, repr=False)
class RedisTarget:
    host: str
    port: int
    username: str | None
    password: str | None
    db: int
    tls: bool
    rootcas: tuple[str, ...] = ()  # CA files the registry trusts for redis (3.1: redis.tls.rootcas); () = system

    @property
    def addr(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"RedisTarget(addr={self.addr!r}, db={self.db}, tls={self.tls}, credentials=<hidden>)"


def redis_target(config: dict[str, Any]) -> RedisTarget | None:
    """The redis a rendered config uses (2.8 `addr`, 3 `addrs`), or None."""
    section = config.get("redis")
    if not isinstance(section, dict):
        return None
    addr = section.get("addr") or (section.get("addrs") or [None])[0]
    if not addr:
        return None
    host, port = split_addr(str(addr))
    tls = section.get("tls") if isinstance(section.get("tls"), dict) else {}
    # 3.1 turns TLS on with rootcas (or a client certificate), and has no `enabled` (render/config.py); `enabled` is
    # still read, so a config that asks for TLS in any of these ways is checked over TLS.
    rootcas = tuple(str(path) for path in tls.get("rootcas") or ())
    return RedisTarget(host=host, port=port, username=section.get("username"), password=section.get("password"),
                       db=int(section.get("db") or 0),
                       tls=bool(tls.get("enabled") or rootcas or tls.get("certificate")), rootcas=rootcas)


@dataclass(frozen=True, repr=False)
class S3Target:
    bucket: str
    region: str
    access_key: str
    secret_key: str
    endpoint: str | None  # scheme://host[:port]; None means AWS
    secure: bool = True
    path_style: bool = True
    ca: bytes | None = None  # storage.s3.ca, trusted besides the system roots
    skip_verify: bool = False
    session_token: str = ""  # temporary credentials: signed into X-Amz-Security-Token

    def __repr__(self) -> str:
        return f"S3Target(bucket={self.bucket!r}, region={self.region!r}, endpoint={self.endpoint!r}, keys=<hidden>)"


def s3_target(config: dict[str, Any], ca: bytes | None = None, credentials: bytes | None = None) -> S3Target | None:
    """The S3 bucket and key a rendered config uses, or None for other storage; `ca`: the file the registry
    trusts for it (render/paths.py S3_CA_FILE); `credentials`: the shared credentials file that holds the key
    instead of the config when it comes with a session token (S3_CREDENTIALS_FILE)."""
    s3 = (config.get("storage") or {}).get("s3")
    if not isinstance(s3, dict):
        return None
    endpoint = s3.get("regionendpoint")
    secure = bool(s3.get("secure", True))
    # 2.8 uses path style whenever regionendpoint is set; 3 only with forcepathstyle (docs/upstream.md#dist-v3-config).
    path_style = bool(endpoint) and s3.get("forcepathstyle", True) is not False
    shared = _shared_credentials(credentials) if credentials else {}
    return S3Target(
        bucket=str(s3.get("bucket", "")),
        region=str(s3.get("region") or "us-east-1"),
        access_key=str(s3.get("accesskey", "")) or shared.get("aws_access_key_id", ""),
        secret_key=str(s3.get("secretkey", "")) or shared.get("aws_secret_access_key", ""),
        endpoint=str(endpoint) if endpoint else None,
        secure=secure,
        path_style=path_style,
        ca=ca,
        skip_verify=bool(s3.get("skipverify", False)),
        session_token=shared.get("aws_session_token", ""),
    )


def _shared_credentials(data: bytes) -> dict[str, str]:
    """`name = value` lines of an AWS shared credentials file's [default] profile (the one the renderer writes)."""
    values = {}
    for line in data.decode("utf-8", "replace").splitlines():
        name, sep, value = line.partition("=")
        if sep:
            values[name.strip()] = value.strip()
    return values




@dataclass(frozen=True, repr=False)
class ProxyTarget:
    """The upstream of a pull-through cache: what the registry asks at start (proxy.remoteurl) and with which
    credentials (None for an anonymous upstream)."""

    remote_url: str
    username: str | None
    password: str | None

    def __repr__(self) -> str:
        return f"ProxyTarget(remote_url={self.remote_url!r}, credentials=<hidden>)"


def proxy_target(config: dict[str, Any]) -> ProxyTarget | None:
    """The proxy section of a rendered config, or None when the registry is no pull-through cache."""
    section = config.get("proxy")
    if not isinstance(section, dict) or not section.get("remoteurl"):
        return None
    username, password = section.get("username"), section.get("password")
    return ProxyTarget(str(section["remoteurl"]), None if username is None else str(username),
                       None if password is None else str(password))


__all__ = ["ProxyTarget", "RedisTarget", "S3Target", "proxy_target", "redis_target", "s3_target", "split_addr"]
