"""Pre-flight of Google Cloud Storage (spec.config.storage.gcs): a new service-account key must get a
token and open the bucket before the registry restarts onto it.

The registry's gcs driver (Distribution 3.1.1, `registry/storage/driver/gcs/gcs.go`) reads the keyfile at start,
signs a JWT with it (golang.org/x/oauth2/jwt) and exchanges it at the key's `token_uri` for the uploads, and builds
its storage client from the same key (`storage.NewClient`, which goes to STORAGE_EMULATOR_HOST when that is set);
it checks nothing at start, so a deleted key or a missing bucket shows only as failed pushes and pulls. So before
a restart: the same exchange (an RS256 JWT assertion for the devstorage.full_control scope, the driver's
`storage.ScopeFullControl`), then one object listing of the bucket (`maxResults=1`, what the driver needs anyway)
with the token. A refusal raises PreflightError quoting the service's HTTP status and its error code
(`invalid_grant`, `403 forbidden`, `404 notFound`...), never the key. default_credentials come from the pod's
identity, not from the config, and are not checked here.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from ..core.errors import PreflightError
from ..render.paths import GCS_KEY_FILE
from . import preflight_http

TIMEOUT_SECONDS = 5.0
WHERE = "spec.config.storage.gcs"
SCOPE = "https://www.googleapis.com/auth/devstorage.full_control"
JSON_API = "https://storage.googleapis.com"
_CODE = re.compile(r"^[A-Za-z0-9_.]{1,64}$")


@dataclass(frozen=True, repr=False)
class GcsTarget:
    bucket: str
    key: dict[str, Any] | None  # the service account's key, parsed; None for default credentials

    def __repr__(self) -> str:
        email = self.key.get("client_email") if self.key else None
        return f"GcsTarget(bucket={self.bucket!r}, client_email={email!r}, key=<hidden>)"


def gcs_target(document: dict[str, Any], files: dict[str, bytes]) -> GcsTarget | None:
    """The bucket and key a rendered config uses (the keyfile beside it), or None for other storage."""
    section = (document.get("storage") or {}).get("gcs")
    if not isinstance(section, dict):
        return None
    data = files.get(GCS_KEY_FILE) if section.get("keyfile") else None
    try:
        key = json.loads(data) if data is not None else None
    except ValueError:
        raise PreflightError(f"{WHERE}.credentials.secret: the key is not JSON") from None
    return GcsTarget(bucket=str(section.get("bucket", "")), key=key if isinstance(key, dict) else None)


def check_bucket(target: GcsTarget, *, timeout: float = TIMEOUT_SECONDS) -> None:
    """Exchange the key for a token and list one object of the bucket; raise PreflightError on a refusal."""
    if target.key is None:
        return
    token = _token(target.key, timeout=timeout)
    base = os.environ.get("STORAGE_EMULATOR_HOST") or JSON_API
    if "://" not in base:
        base = f"http://{base}"
    url = f"{base.rstrip('/')}/storage/v1/b/{quote(target.bucket, safe='')}/o?maxResults=1&fields=kind"
    answer = preflight_http.request("GET", url, {"Authorization": f"Bearer {token}"}, None, timeout=timeout,
                                    where=WHERE, what="Cloud Storage")
    status, body = answer.status, answer.body
    if status == 200:
        return
    raise PreflightError(f"{WHERE}: the bucket {target.bucket!r} refused the new key "
                         f"(HTTP {status}{_error_code(body)}); keeping the running config")


def _token(key: dict[str, Any], *, timeout: float) -> str:
    email, token_uri = str(key.get("client_email", "")), str(key.get("token_uri", ""))
    now = int(time.time())
    header = {"alg": "RS256", "typ": "JWT", "kid": str(key.get("private_key_id", ""))}
    claims = {"iss": email, "scope": SCOPE, "aud": token_uri, "iat": now, "exp": now + 3600}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    assertion = f"{signing_input}.{_b64(_sign(str(key.get('private_key', '')), signing_input.encode()))}"
    form = urlencode({"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion}).encode()
    reply = preflight_http.request("POST", token_uri, {"Content-Type": "application/x-www-form-urlencoded"}, form,
                                   timeout=timeout, where=WHERE, what="the key's token_uri")
    status, body = reply.status, reply.body
    try:
        answer = json.loads(body)
    except ValueError:
        answer = {}
    if status == 200 and isinstance(answer, dict) and isinstance(answer.get("access_token"), str):
        return answer["access_token"]
    error = str(answer.get("error", "")) if isinstance(answer, dict) else ""
    raise PreflightError(f"{WHERE}.credentials.secret: the token endpoint refused the key of {email} "
                         f"(HTTP {status}{', ' + error if _CODE.match(error) else ''}); keeping the running config")


def _sign(private_key_pem: str, data: bytes) -> bytes:
    """RS256 (RSASSA-PKCS1-v1_5, SHA-256) with the key's private key: what oauth2/jwt signs the assertion with."""
    from cryptography.hazmat.primitives import hashes, serialization  # only where a gcs key is checked
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    try:
        private = serialization.load_pem_private_key(private_key_pem.encode(), password=None)
    except (ValueError, TypeError):
        raise PreflightError(f"{WHERE}.credentials.secret: the key's private_key cannot be read") from None
    if not isinstance(private, rsa.RSAPrivateKey):
        raise PreflightError(f"{WHERE}.credentials.secret: the key's private_key is not an RSA key")
    return private.sign(data, padding.PKCS1v15(), hashes.SHA256())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _error_code(body: bytes) -> str:
    """`, 403 forbidden` from Google's JSON error ({"error": {"code": 403, "errors": [{"reason": ...}]}})."""
    try:
        error = json.loads(body).get("error") or {}
        reason = str((error.get("errors") or [{}])[0].get("reason", ""))
    except (ValueError, AttributeError, IndexError, TypeError):
        return ""
    return f", {reason}" if _CODE.match(reason) else ""
