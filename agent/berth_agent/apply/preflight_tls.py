"""Pre-flight of the HTTPS pair: the certificate and key load together, and the certificate is not expired.

The registry loads them once at start (docs/upstream.md#dist-read-once); a pair it refuses (`tls: private key does
not match public key`) made it exit at start and cost seconds of failed requests before the rollback.
OpenSSL's load_cert_chain checks what Go's tls.LoadX509KeyPair checks: both parse, and the key belongs to the first
certificate. It reads files only, so the pair is written for a moment into a private directory (mode 0700, files
0600) on the memory-backed config volume and removed at once.
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from pathlib import Path

from ..core.errors import PreflightError

# The field a message names when the caller does not say where the pair came from (Rendered.origins holds it:
# spec.http.tls.secretName with its Secret, or spec.http.tls.issuerRef with the Certificate and Secret Berth made).
WHERE = "spec.http.tls.secretName"
EXPIRY_WARNING = datetime.timedelta(days=7)

_REASONS = {
    "KEY_VALUES_MISMATCH": "the private key in tls.key does not match the certificate in tls.crt",
    "NO_START_LINE": "tls.crt or tls.key holds no PEM block OpenSSL can read",
    "BAD_DECRYPT": "tls.key is encrypted; the registry needs an unencrypted key",
}


def check_pair(cert: bytes, key: bytes, *, scratch_dir: Path | None = None,
               now: datetime.datetime | None = None, where: str = WHERE) -> list[str]:
    """Raise PreflightError when the pair does not load or the certificate has expired; return warnings (a
    certificate that expires within 7 days). Messages start with `where`: the pair's origin."""
    if b"ENCRYPTED" in key:  # PKCS#8 "ENCRYPTED PRIVATE KEY" or a legacy "Proc-Type: 4,ENCRYPTED" header
        raise PreflightError(f"{where}: {_REASONS['BAD_DECRYPT']}")
    _load_together(cert, key, scratch_dir, where)
    not_after = leaf_not_after(cert, where)
    now = now or datetime.datetime.now(datetime.UTC)
    stamp = not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
    if not_after <= now:
        raise PreflightError(f"{where}: the certificate in tls.crt expired at {stamp}")
    if not_after - now <= EXPIRY_WARNING:
        days = (not_after - now).total_seconds() / 86400
        return [f"{where}: the certificate in tls.crt expires at {stamp} (in {days:.1f} days)"]
    return []


def _load_together(cert: bytes, key: bytes, scratch_dir: Path | None, where: str) -> None:
    with tempfile.TemporaryDirectory(prefix=".preflight-", dir=scratch_dir) as directory:
        cert_path, key_path = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            # A password callback that gives nothing: an encrypted key fails here instead of prompting on a TTY.
            context.load_cert_chain(cert_path, key_path, password=lambda: b"")
        except ssl.SSLError as exc:
            # OpenSSL's reason is a fixed name (KEY_VALUES_MISMATCH, ...), never file content.
            reason = str(exc.reason or "unreadable PEM")
            raise PreflightError(f"{where}: {_REASONS.get(reason, f'the pair does not load ({reason})')}") from None
        except (OSError, ValueError) as exc:
            raise PreflightError(f"{where}: the pair does not load ({type(exc).__name__})") from None


def leaf_not_after(cert_pem: bytes, where: str = WHERE) -> datetime.datetime:
    """notAfter of the first certificate in a PEM bundle (the one the registry serves)."""
    try:
        der = ssl.PEM_cert_to_DER_cert(_first_pem(cert_pem))
        return der_not_after(der)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise PreflightError(f"{where}: the certificate in tls.crt cannot be read ({type(exc).__name__})") from None


def _first_pem(bundle: bytes) -> str:
    text = bundle.decode("ascii")
    begin = text.index("-----BEGIN CERTIFICATE-----")
    end = text.index("-----END CERTIFICATE-----", begin) + len("-----END CERTIFICATE-----")
    return text[begin:end]


def _tlv(data: bytes, offset: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at offset."""
    tag, length = data[offset], data[offset + 1]
    offset += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[offset:offset + count], "big")
        offset += count
    if offset + length > len(data):
        raise ValueError("truncated DER")
    return tag, offset, offset + length


def der_not_after(der: bytes) -> datetime.datetime:
    # Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber, signature,
    # issuer, validity SEQUENCE { notBefore, notAfter }, ... }, ... } (RFC 5280 §4.1)
    _, cert_start, _ = _tlv(der, 0)
    _, tbs_start, _ = _tlv(der, cert_start)
    offset = tbs_start
    tag, _, end = _tlv(der, offset)
    if tag == 0xA0:  # explicit version
        offset = end
    for _ in range(3):  # serialNumber, signature, issuer
        offset = _tlv(der, offset)[2]
    _, validity_start, _ = _tlv(der, offset)
    not_before_end = _tlv(der, validity_start)[2]
    tag, start, end = _tlv(der, not_before_end)
    text = der[start:end].decode("ascii")
    if tag == 0x17:  # UTCTime YYMMDDHHMMSSZ: years 50-99 are 19xx (RFC 5280 §4.1.2.5.1)
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif tag != 0x18:  # GeneralizedTime YYYYMMDDHHMMSSZ
        raise ValueError("notAfter is not a time")
    return datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=datetime.UTC)
