"""Registry spec + mounted inputs -> the Distribution config.yml (docs/design.md §4.1).

A pure function: no I/O, no clock, no randomness. The same inputs give the same bytes, so a sha256 over them
(Rendered.identity) names the state. Keys are emitted in a fixed order; sections the spec leaves at their defaults
are still written where the registry's own default differs or matters (draintimeout, the whole maintenance block).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import yaml

from berth_api import RegistrySpec
from berth_api.auth import TokenAuth
from berth_api.s3 import S3_PATH
from berth_api.types import duration_seconds

from ..core.errors import InputError
from ..mounted.mounts import MountedInputs, trust_origin
from .paths import (
    HTPASSWD_FILE,
    OUTBOX_FILE,
    S3_KEYS_ORIGIN,
    TLS_CERT_FILE,
    TLS_KEY_FILE,
    TOKEN_BUNDLE_FILE,
    TOKEN_JWKS_FILE,
    RenderPaths,
)
from .rendered import Rendered
from .storage import storage_section

Distribution = Literal["2", "3"]
# The htpasswd realm is only shown to clients in the WWW-Authenticate header.
HTPASSWD_REALM = "berth"
DEFAULT_PATHS = RenderPaths()  # the pod's (berth_api.pod)
OUTBOX_ENDPOINT = "berth-outbox"  # the registry's one notification endpoint: its registry_notifications_* label


def render(
    spec: RegistrySpec,
    inputs: MountedInputs,
    *,
    distribution: Distribution | None = None,
    paths: RenderPaths = DEFAULT_PATHS,
    registry: str | None = None,
) -> Rendered:
    """Render the config for `distribution` (default: the spec's, derived from its image). Raises InputError.
    `registry`: the Registry's name, for messages naming the objects Berth made for it (None: `<registry>`)."""
    major = distribution or spec.distribution_major
    if major not in ("2", "3"):
        raise InputError("spec.distribution", f"must be 2 or 3, not {major!r}")
    files: dict[str, bytes] = {}
    config: dict[str, Any] = {"version": "0.1", "log": {"level": spec.config.log.level}}
    config["storage"] = storage_section(spec, inputs, major, paths, files)

    auth_path, auth = spec.config.auth_in_use
    if auth.htpasswd is not None:
        if inputs.htpasswd is None:
            raise InputError(f"{auth_path}.htpasswd", "is set but no htpasswd file was read")
        files[HTPASSWD_FILE] = inputs.htpasswd
        config["auth"] = {"htpasswd": {"realm": HTPASSWD_REALM, "path": str(paths.config_dir / HTPASSWD_FILE)}}
    origins: dict[str, str] = {}
    if auth.token is not None:
        config["auth"] = {"token": _token(auth.token, f"{auth_path}.token", inputs, major, paths, files, origins)}
    if auth.silly is not None:
        config["auth"] = {"silly": {"realm": auth.silly.realm, "service": auth.silly.service}}

    if spec.config.proxy is not None:
        config["proxy"] = _proxy(spec, inputs, major)
    if spec.config.notifications is not None:
        section = _notifications(spec, inputs, major, paths, files)
        if section is not None:
            config["notifications"] = section
    config["http"] = _http(spec, inputs, major, paths, files, origins, registry)
    storage = spec.config.storage
    if storage.s3 is not None or storage.object_storage is not None:  # for the pre-flight's refusal of a key
        origins[S3_KEYS_ORIGIN] = (f"{S3_PATH}.credentials" if storage.s3 is not None
                                   else "spec.config.storage.objectStorage (the BucketAccess's Secret)")
    if spec.redis is not None:
        config["redis"] = _redis(spec, inputs, major, paths)
    health = _health(spec)
    if health:
        config["health"] = health
    urls = spec.validation.manifests.urls
    if urls.allow or urls.deny:
        url_rules = {k: list(v) for k, v in (("allow", urls.allow), ("deny", urls.deny)) if v}
        config["validation"] = {"manifests": {"urls": url_rules}}

    data = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, allow_unicode=False, width=1000)
    config_bytes = data.encode("utf-8")
    # parsed: the document just dumped, so nobody parses it again
    return Rendered(config=config_bytes, files=files, parsed=config, origins=origins)


def _refuse_v3_fields(major: Distribution, where: str, fields: list[str]) -> None:
    """The model refuses Distribution-3-only fields for the spec's own distribution; --distribution may say 2."""
    if major == "2":
        for field in fields:
            raise InputError(f"{where}.{field}", "needs Distribution 3; this registry runs Distribution 2")


def _token(token: TokenAuth, where: str, inputs: MountedInputs, major: Distribution, paths: RenderPaths,
           files: dict[str, bytes], origins: dict[str, str]) -> dict[str, Any]:
    """auth.token (`where`: its field path); the bundle and the JWKS are copied beside config.yml (the registry
    reads them once, at start)."""
    _refuse_v3_fields(major, where, token.v3_fields_set())
    section: dict[str, Any] = {"realm": token.realm, "service": token.service, "issuer": token.issuer}
    for ref, data, name, key, field in ((token.root_cert_bundle, inputs.token_bundle, TOKEN_BUNDLE_FILE,
                                         "rootcertbundle", "rootCertBundle"),
                                        (token.jwks, inputs.token_jwks, TOKEN_JWKS_FILE, "jwks", "jwks")):
        if ref is None:
            continue
        if data is None:
            raise InputError(f"{where}.{field}", "is set but nothing was read")
        files[name] = data
        origins[name] = f"{where}.{field} ({trust_origin(ref)})"
        section[key] = str(paths.config_dir / name)
    section["autoredirect"] = token.auto_redirect
    if token.signing_algorithms is not None:
        section["signingalgorithms"] = list(token.signing_algorithms)
    if token.auto_redirect_path is not None:
        section["autoredirectpath"] = token.auto_redirect_path
    return section


def _proxy(spec: RegistrySpec, inputs: MountedInputs, major: Distribution) -> dict[str, Any]:
    """proxy: the upstream and its credentials (read by the registry once, at start: a change restarts it)."""
    proxy = spec.config.proxy
    assert proxy is not None
    _refuse_v3_fields(major, "spec.config.proxy", proxy.v3_fields_set())
    section: dict[str, Any] = {"remoteurl": proxy.remote_url}
    if proxy.credentials is not None:
        if inputs.proxy_username is None or inputs.proxy_password is None:
            raise InputError("spec.config.proxy.credentials.secretName", "is set but no credentials were read")
        section["username"], section["password"] = inputs.proxy_username, inputs.proxy_password
    if proxy.ttl is not None:
        section["ttl"] = proxy.ttl
    if proxy.cache_write_timeout is not None:
        section["cachewritetimeout"] = proxy.cache_write_timeout
    return section


def _notifications(spec: RegistrySpec, inputs: MountedInputs, major: Distribution, paths: RenderPaths,
                   files: dict[str, bytes]) -> dict[str, Any] | None:
    """notifications: the registry's one endpoint is the pod's outbox (outbox/,
    docs/decisions/0002-a-notification-outbox-in-the-agent.md), which keeps each event before it answers and delivers it
    to the endpoints in OUTBOX_FILE, their header values included. So a new endpoint or a rotated header restarts no
    registry, and an old registry's queue empties within milliseconds. None when every endpoint is disabled: the
    registry then makes no events at all."""
    notifications = spec.config.notifications
    assert notifications is not None
    _refuse_v3_fields(major, "spec.config.notifications", notifications.v3_fields_set())
    endpoints = []
    for endpoint in notifications.endpoints:
        if endpoint.disabled:
            continue
        headers: dict[str, list[str]] = {}
        for header in endpoint.headers:
            if header.secret_key is not None:
                value = (inputs.notification_headers or {}).get(header.secret_key)
                if value is None:
                    raise InputError("spec.config.notifications.secretName",
                                     f"key {header.secret_key} was not read")
            else:
                value = header.value or ""
            headers.setdefault(header.name, []).append(value)
        ignore = endpoint.ignore
        endpoints.append({
            "name": endpoint.name, "url": endpoint.url, "headers": headers,
            "timeout": duration_seconds(endpoint.timeout), "threshold": endpoint.threshold,
            "backoff": duration_seconds(endpoint.backoff),
            "ignoredMediaTypes": sorted(set(endpoint.ignored_media_types) | set(ignore.media_types if ignore else [])),
            "ignoredActions": sorted(ignore.actions) if ignore else [],
        })
    files[OUTBOX_FILE] = json.dumps({"endpoints": endpoints}, sort_keys=True, indent=1).encode() + b"\n"
    if not endpoints:
        return None
    # What no endpoint wants, the registry need not send: the endpoints' common ignores (3.x has `ignore`).
    common_types = set.intersection(*(set(e["ignoredMediaTypes"]) for e in endpoints))
    common_actions = set.intersection(*(set(e["ignoredActions"]) for e in endpoints))
    relay: dict[str, Any] = {"name": OUTBOX_ENDPOINT, "disabled": False, "url": paths.outbox_url,
                             "timeout": "5s", "threshold": 3, "backoff": "100ms"}
    if common_types:
        relay["ignoredmediatypes"] = sorted(common_types)
    if major == "3" and common_actions:
        relay["ignore"] = {"mediatypes": [], "actions": sorted(common_actions)}
    result: dict[str, Any] = {"endpoints": [relay]}
    if notifications.events is not None:
        result["events"] = {"includereferences": notifications.events.include_references}
    return result


def _http(spec: RegistrySpec, inputs: MountedInputs, major: Distribution, paths: RenderPaths,
          files: dict[str, bytes], origins: dict[str, str], registry: str | None) -> dict[str, Any]:
    http = spec.http
    section: dict[str, Any] = {"addr": http.addr}
    if http.host:
        section["host"] = http.host
    if http.secret is not None and inputs.http_secret is None:
        raise InputError("spec.http.secret", "is set but no http secret was read")
    if inputs.http_secret is not None:
        section["secret"] = inputs.http_secret
    section["relativeurls"] = http.relative_urls
    section["draintimeout"] = http.drain_timeout
    if http.tls is not None:
        if inputs.tls_cert is None or inputs.tls_key is None:
            raise InputError(http.tls.field,
                             f"is set but no certificate and key were read ({http.tls.objects(registry)})")
        files[TLS_CERT_FILE], files[TLS_KEY_FILE] = inputs.tls_cert, inputs.tls_key
        origins[TLS_CERT_FILE] = origins[TLS_KEY_FILE] = http.tls.origin(registry)
        section["tls"] = {
            "certificate": str(paths.config_dir / TLS_CERT_FILE),
            "key": str(paths.config_dir / TLS_KEY_FILE),
        }
    section["http2"] = {"disabled": http.http2.disabled}
    if major == "3":  # h2c appeared in Distribution 3; 2.8 has no such key (docs/upstream.md#dist-v3-config)
        section["h2c"] = {"enabled": http.h2c.enabled}
    return section


def _redis(spec: RegistrySpec, inputs: MountedInputs, major: Distribution, paths: RenderPaths) -> dict[str, Any]:
    redis = spec.redis
    assert redis is not None
    address = inputs.redis
    if address is None:
        raise InputError("spec.redis.secret", "is set but no redis URL was read")
    where = address.source
    if address.db is not None and redis.db not in (0, address.db):
        raise InputError("spec.redis.db", f"disagrees with the database number in the URL in {where}")
    db = address.db if address.db is not None else redis.db
    tls = redis.tls.enabled or address.tls
    timeouts = {k: v for k, v in (("dialtimeout", redis.dialtimeout), ("readtimeout", redis.readtimeout),
                                  ("writetimeout", redis.writetimeout)) if v is not None}
    pool = redis.pool
    section: dict[str, Any]
    if major == "2":
        # 2.8: one addr, a password only, a nested pool (configuration.go v2.8).
        if address.username and address.username != "default":
            raise InputError(where, "names a redis user, which Distribution 2 cannot use (it sends only a "
                             "password); use Distribution 3 or a URL without a user")
        if tls:
            # Debian's 2.8.2 ignores redis.tls and connects in clear text (seen against a TLS-only
            # redis-server), which would send the password unencrypted: refuse instead.
            source = "spec.redis.tls.enabled" if redis.tls.enabled else where
            raise InputError(source, "asks for TLS to redis, which Distribution 2 cannot do (it would send the "
                             "password in clear text); use a Distribution 3 image or a redis:// URL")
        section = {"addr": address.addr}
        if address.password:
            section["password"] = address.password
        section["db"] = db
        section.update(timeouts)
        pool_section = {k: v for k, v in (("maxidle", pool.maxidle), ("maxactive", pool.maxactive),
                                          ("idletimeout", pool.idletimeout)) if v is not None}
        if pool_section:
            section["pool"] = pool_section
    else:
        if tls and _is_distribution_3_0(spec.image):
            # 3.0 turns TLS to redis on only with a client certificate and key (redis.tls.certificate/key,
            # registry/handlers/app.go v3.0.0); without them it connects in clear text.
            source = "spec.redis.tls.enabled" if redis.tls.enabled else where
            raise InputError(source, "asks for TLS to redis, which Distribution 3.0 does only with a client "
                             "certificate (it would send the password in clear text); use 3.1 or newer")
        # 3.x: go-redis UniversalOptions inline: addrs list, flat pool fields (configuration.md v3); the pool
        # keys reach go-redis as PoolSize, MaxIdleConns, ConnMaxIdleTime (tests/agent/render/test_real_redis.py).
        section = {"addrs": [address.addr]}
        if address.username:
            section["username"] = address.username
        if address.password:
            section["password"] = address.password
        section["db"] = db
        section.update(timeouts)
        for key, value in (("maxidleconns", pool.maxidle), ("poolsize", pool.maxactive),
                           ("connmaxidletime", pool.idletimeout)):
            if value is not None:
                section[key] = value
    if tls:
        # 3.1 has no redis.tls.enabled (its configuration.md example shows one, but the parser ignores it and the
        # registry connects in clear text: tests/agent/render/test_real_redis.py). TLS is on when `rootcas` is
        # given, and the server's certificate is checked against exactly those CAs.
        section["tls"] = {"rootcas": [str(paths.ca_bundle)]}
    return section


def _is_distribution_3_0(image: str) -> bool:
    """The image's tag names 3.0 (`registry:3.0.0`, `:v3.0`); `registry:3` and digests are taken as 3.1+."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return re.match(r"^v?3\.0(\.|-|$)", tag) is not None


def _health(spec: RegistrySpec) -> dict[str, Any]:
    health = spec.health
    section: dict[str, Any] = {}
    check = health.storagedriver
    if check.enabled:
        section["storagedriver"] = {"enabled": True, "interval": check.interval, "threshold": check.threshold}
    if health.tcp:
        section["tcp"] = [
            {"addr": t.addr, "timeout": t.timeout, "interval": t.interval, "threshold": t.threshold}
            for t in health.tcp
        ]
    return section
