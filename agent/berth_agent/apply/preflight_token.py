"""Pre-flight of token auth's trust (docs/decisions/0015-pre-flight-before-a-restart.md): the bundle and the JWKS the
registry will read once, at start (docs/upstream.md#dist-read-once), checked before any restart onto them.

- The root certificate bundle: PEM blocks, every one a CERTIFICATE that parses as DER X.509 far enough to read
  its notAfter; at least one; none expired; one that expires within 7 days is a warning (as for TLS).
- The JWKS: a JSON object with a `keys` list holding at least one key the registry may use: a signing key
  (`use` absent or `sig`) of a type and curve that one of the allowed algorithms (`signingalgorithms`, default
  all) verifies, and, when it names its `alg`, an allowed one.

Messages name the spec field, the object and the key the file came from (Rendered.origins), never content.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from collections.abc import Iterable

from berth_api.auth import SIGNING_ALGORITHMS

from ..core.errors import PreflightError
from .preflight_tls import EXPIRY_WARNING, der_not_after

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)
JWKS_MAX_DEPTH = 8  # a JWKS nests 3 levels; counted before parsing, as for COSI's JSON
# Which algorithms verify which key (kty, crv): RFC 7518 §3, RFC 8037.
_FAMILIES = {
    ("RSA", None): {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"},
    ("EC", "P-256"): {"ES256"},
    ("EC", "P-384"): {"ES384"},
    ("EC", "P-521"): {"ES512"},
    ("OKP", "Ed25519"): {"EdDSA"},
    ("oct", None): {"HS256", "HS384", "HS512"},
}


def check_bundle(data: bytes, where: str, *, now: datetime.datetime | None = None) -> list[str]:
    """Raise PreflightError unless `data` holds PEM certificates only, at least one, none expired; return
    warnings for those expiring within 7 days."""
    now = now or datetime.datetime.now(datetime.UTC)
    blocks = _PEM_BLOCK.findall(data)
    if not blocks:
        raise PreflightError(f"{where}: holds no PEM certificate")
    warnings = []
    for number, (label, body) in enumerate(blocks, start=1):
        if label != b"CERTIFICATE":
            raise PreflightError(f"{where}: PEM block {number} is not a CERTIFICATE")
        try:
            not_after = der_not_after(base64.b64decode(b"".join(body.split()), validate=True))
        except (binascii.Error, ValueError, IndexError, UnicodeDecodeError):
            raise PreflightError(f"{where}: certificate {number} cannot be read") from None
        stamp = not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
        if not_after <= now:
            raise PreflightError(f"{where}: certificate {number} expired at {stamp}")
        if not_after - now <= EXPIRY_WARNING:
            days = (not_after - now).total_seconds() / 86400
            warnings.append(f"{where}: certificate {number} expires at {stamp} (in {days:.1f} days)")
    return warnings


def check_jwks(data: bytes, where: str, algorithms: Iterable[str] | None = None) -> None:
    """Raise PreflightError unless `data` is a JWKS with at least one key the allowed algorithms verify."""
    allowed = set(algorithms or SIGNING_ALGORITHMS)
    depth = deepest = 0
    for byte in data:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    if deepest > JWKS_MAX_DEPTH:
        raise PreflightError(f"{where}: is not a JWKS (nested deeper than {JWKS_MAX_DEPTH} levels)")
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise PreflightError(f"{where}: is not JSON") from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list) or not keys:
        raise PreflightError(f"{where}: is not a JWKS (no \"keys\" list, or an empty one)")
    if not any(_usable(key, allowed) for key in keys):
        raise PreflightError(f"{where}: holds no signing key that the allowed algorithms "
                             f"({', '.join(sorted(allowed))}) verify")


def _usable(key: object, allowed: set[str]) -> bool:
    if not isinstance(key, dict) or key.get("use", "sig") != "sig":
        return False
    kty, crv = key.get("kty"), key.get("crv")
    family = _FAMILIES.get((kty, None if kty in ("RSA", "oct") else crv), set())
    needed = {"RSA": ("n", "e"), "EC": ("x", "y"), "OKP": ("x",), "oct": ("k",)}.get(str(kty), ())
    if not all(isinstance(key.get(name), str) and key.get(name) for name in needed):
        return False
    usable = family & allowed
    if "alg" in key:
        return key["alg"] in usable
    return bool(usable)


__all__ = ["check_bundle", "check_jwks"]
