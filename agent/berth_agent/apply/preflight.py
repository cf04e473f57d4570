"""Checks run before the registry is restarted on a new config: what can be checked without the registry.

`check_render` checks what the registry reads or reaches at start, each only when it changes: the HTTPS pair
(preflight_tls), a new listen port and the redis it will use (preflight_net), Azure Blob and GCS credentials
(preflight_azure, preflight_gcs). `check_config` checks the
object storage, below.

For object storage: the credentials the new config carries must open the bucket (a rotated key may not be
live yet, or may be for another bucket). A restart onto keys the bucket refuses would leave the registry
answering 503 until a person notices (docs/upstream.md#parts-moto).

The check is one signed ListObjectsV2 (max-keys=1) request made with the standard library: a minimal AWS
Signature Version 4 signer instead of botocore, which would add about 20 MB to the agent's resident memory for
a single call (the agent's memory budget: docs/decisions/0037-agent-memory.md). It reads the rendered config, so it
checks exactly the endpoint, region, bucket and key the registry will use.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from ..core.errors import PreflightError
from ..render.config import TLS_CERT_FILE, TLS_KEY_FILE, Rendered
from ..render.paths import S3_KEYS_ORIGIN, TOKEN_BUNDLE_FILE, TOKEN_JWKS_FILE
from ..render.targets import RedisTarget, S3Target, split_addr
from . import preflight_http
from .preflight_azure import azure_target, check_container
from .preflight_gcs import check_bucket as check_gcs_bucket
from .preflight_gcs import gcs_target
from .preflight_net import REDIS_TIMEOUT_SECONDS, check_bindable, check_redis
from .preflight_proxy import UpstreamRefused, check_upstream, distribution_of, publish
from .preflight_tls import WHERE as TLS_WHERE
from .preflight_tls import check_pair
from .preflight_token import check_bundle, check_jwks

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
SILLY_WARNING = ("auth.silly (spec.config.auth.silly or spec.config.storage.auth.silly) lets in any request that "
                 "carries an Authorization header, whatever it holds: for tests only, never in production")
TIMEOUT_SECONDS = 5.0
S3_CA_FIELD = "spec.config.storage.s3.ca"


@dataclass(frozen=True)
class PreflightWarning:
    reason: str  # the Event reason: CertificateExpiresSoon, RedisUnavailable, SillyAuthInUse
    message: str  # names the field, never a secret


def check_render(rendered: Rendered, previous: Rendered | None, *, scratch_dir: Path | None = None,
                 redis_timeout: float = REDIS_TIMEOUT_SECONDS,
                 now: datetime.datetime | None = None) -> list[PreflightWarning]:
    """Raise PreflightError when the registry would refuse `rendered` at start, or could not use its redis;
    return warnings. `previous` is what runs (None: nothing yet).

    Each check runs only when its input changed, so an edit elsewhere never depends on redis being up or on a
    certificate that already serves: a new HTTPS pair; a new listen port (the running registry holds the
    current one, and frees it when it restarts); a new redis address, credentials, database or TLS setting.
    With nothing running yet, a redis that does not answer is a warning, not a refusal: both registry versions
    connect to redis lazily and serve without their cache, which beats not serving at all.
    """
    warnings: list[PreflightWarning] = []
    if rendered.serves_tls:
        pair = (rendered.files.get(TLS_CERT_FILE, b""), rendered.files.get(TLS_KEY_FILE, b""))
        old_pair = (previous.files.get(TLS_CERT_FILE), previous.files.get(TLS_KEY_FILE)) if previous else None
        if previous is None or not previous.serves_tls or pair != old_pair:
            warnings += [PreflightWarning("CertificateExpiresSoon", text)
                         for text in check_pair(*pair, scratch_dir=scratch_dir, now=now,
                                                where=rendered.origins.get(TLS_CERT_FILE, TLS_WHERE))]
    warnings += _check_token(rendered, previous, now)
    warnings += _check_proxy(rendered, previous)
    _check_cloud_storage(rendered, previous)
    if "silly" in (rendered.document.get("auth") or {}) and (
            previous is None or "silly" not in (previous.document.get("auth") or {})):
        warnings.append(PreflightWarning("SillyAuthInUse", SILLY_WARNING))
    addr = rendered.listen_addr
    if previous is None or split_addr(addr)[1] != split_addr(previous.listen_addr)[1]:
        check_bindable(addr)
    target = rendered.redis
    if target is not None and _redis_fields(target) != _redis_fields(previous.redis if previous else None):
        try:
            check_redis(target, timeout=redis_timeout)
        except PreflightError as exc:
            if previous is not None:
                raise
            warnings.append(PreflightWarning(
                "RedisUnavailable", f"{exc}; starting without it (a failing cache lookup falls back to storage)"))
    return warnings


def _check_token(rendered: Rendered, previous: Rendered | None,
                 now: datetime.datetime | None) -> list[PreflightWarning]:
    """The token trust files, each when it is new or changed (the registry reads them once, at start)."""
    warnings: list[PreflightWarning] = []
    token = (rendered.document.get("auth") or {}).get("token") or {}
    for name in (TOKEN_BUNDLE_FILE, TOKEN_JWKS_FILE):
        data = rendered.files.get(name)
        if data is None or (previous is not None and previous.files.get(name) == data):
            continue
        where = rendered.origins.get(name, name)
        if name == TOKEN_BUNDLE_FILE:
            warnings += [PreflightWarning("CertificateExpiresSoon", text)
                         for text in check_bundle(data, where, now=now)]
        else:
            check_jwks(data, where, token.get("signingalgorithms"))
    return warnings


def _check_proxy(rendered: Rendered, previous: Rendered | None) -> list[PreflightWarning]:
    """A pull-through cache's upstream (apply/preflight_proxy): before any restart its /v2/ must answer (the
    registry panics at start otherwise), and new credentials or a new remoteURL must authenticate. With nothing
    running yet, a refusal is a warning and the registry starts: refused credentials still let it serve what its
    storage holds, while an unreachable upstream makes it panic at start, 2.8 and 3.x alike, so it serves nothing
    until the upstream answers and the supervisor's next start succeeds (docs/upstream.md#dist-proxy-start)."""
    target = rendered.proxy
    if target is None:
        return []
    old = previous.proxy if previous is not None else None
    try:
        check = check_upstream(target.remote_url, target.username, target.password,
                               major=distribution_of(rendered), reachability_only=old == target)
    except UpstreamRefused as exc:
        publish(exc.check)
        if previous is not None:
            raise
        said = str(exc).replace("; keeping the running config", "")
        if not exc.check.reachable:
            return [PreflightWarning("UpstreamUnreachable", f"{said}; starting anyway, but the registry cannot start "
                                     "while its upstream does not answer (it panics, and serves nothing, its cache "
                                     "included): it comes up once the upstream answers; fix remoteURL or the network")]
        return [PreflightWarning("UpstreamAuthFailed", f"{said}; starting anyway (the registry serves what it has "
                                 "cached)")]
    publish(check)
    return []


def _check_cloud_storage(rendered: Rendered, previous: Rendered | None) -> None:
    """Azure Blob or GCS (preflight_azure, preflight_gcs): new credentials, or a new container or bucket, must open
    it before the restart; an edit elsewhere never depends on the service being up."""
    azure = azure_target(rendered.document)
    if azure is not None and (previous is None or azure_target(previous.document) != azure):
        check_container(azure)
    gcs = gcs_target(rendered.document, rendered.files)
    if gcs is not None and (previous is None or gcs_target(previous.document, previous.files) != gcs):
        check_gcs_bucket(gcs)


def _redis_fields(target: RedisTarget | None) -> tuple:
    if target is None:
        return ()
    return (target.host, target.port, target.username, target.password, target.db, target.tls)


def check_config(rendered: Rendered, *, timeout: float = TIMEOUT_SECONDS) -> None:
    """Raise PreflightError when the rendered config's storage cannot be reached with its credentials."""
    target = rendered.s3
    if target is not None and (target.access_key or target.secret_key):
        # Without a key the registry uses the pod's identity, which only its SDK resolves: nothing to sign with.
        check_bucket(target, timeout=timeout, origin=rendered.origins.get(S3_KEYS_ORIGIN))


def check_bucket(target: S3Target, *, timeout: float = TIMEOUT_SECONDS,
                 now: datetime.datetime | None = None, origin: str | None = None) -> None:
    """One signed ListObjectsV2 on the bucket: 200 passes, anything else raises PreflightError."""
    where = "storage.s3"
    if not target.access_key or not target.secret_key:
        raise PreflightError(f"{where}: the credentials have no access key")
    scheme, host = _base(target)
    path = f"/{quote(target.bucket, safe='')}" if target.path_style else "/"
    if not target.path_style:
        host = f"{target.bucket}.{host}"
    query = {"list-type": "2", "max-keys": "1"}
    headers = sign_v4("GET", host, path, query, target.region, target.access_key, target.secret_key, now=now,
                      session_token=target.session_token)
    trust = preflight_http.Trust(target.ca, target.skip_verify, S3_CA_FIELD)
    answer = preflight_http.request("GET", f"{scheme}://{host}{path}?{_canonical_query(query)}", headers, None,
                                    timeout=timeout, where=where, what="the object store", trust=trust)
    status, body = answer.status, answer.body
    if status == 200:
        return
    code = _error_code(body)
    raise PreflightError(
        f"{where}: the bucket {target.bucket!r} refused the new credentials "
        f"(HTTP {status}{', ' + code if code else ''}){' from ' + origin if origin else ''}; keeping the running config"
    )


def _base(target: S3Target) -> tuple[str, str]:
    if target.endpoint:
        parts = urlsplit(target.endpoint if "://" in target.endpoint else f"//{target.endpoint}")
        scheme = parts.scheme or ("https" if target.secure else "http")
        return scheme, parts.netloc
    return "https", f"s3.{target.region}.amazonaws.com"


def _error_code(body: bytes) -> str:
    # S3 error codes (AccessDenied, InvalidAccessKeyId, NoSuchBucket...) are names, never secrets.
    match = re.search(rb"<Code>([A-Za-z0-9.]{1,64})</Code>", body)
    return match.group(1).decode() if match else ""


def _canonical_query(query: dict[str, str]) -> str:
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).digest()


def sign_v4(method: str, host: str, path: str, query: dict[str, str], region: str, access_key: str,
            secret_key: str, *, service: str = "s3", payload_hash: str = EMPTY_SHA256,
            now: datetime.datetime | None = None, session_token: str = "") -> dict[str, str]:
    """Headers (Host, X-Amz-Date, X-Amz-Content-Sha256, Authorization, and X-Amz-Security-Token with temporary
    credentials) for an AWS SigV4-signed request."""
    now = now or datetime.datetime.now(datetime.UTC)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    date = amz_date[:8]
    headers = {"host": host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    if session_token:
        headers["x-amz-security-token"] = session_token
    signed_headers = ";".join(sorted(headers))
    canonical_headers = "".join(f"{name}:{headers[name].strip()}\n" for name in sorted(headers))
    canonical_request = "\n".join(
        [method, path, _canonical_query(query), canonical_headers, signed_headers, payload_hash]
    )
    scope = f"{date}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()]
    )
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), date), region), service), "aws4_request")
    signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    return {
        "Host": host,
        "X-Amz-Date": amz_date,
        "X-Amz-Content-Sha256": payload_hash,
        **({"X-Amz-Security-Token": session_token} if session_token else {}),
        "Authorization": (
            f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed_headers}, Signature={signature}"
        ),
    }
