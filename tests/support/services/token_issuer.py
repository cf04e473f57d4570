"""A token issuer for the distribution token protocol, on 127.0.0.1, and a client that follows the challenge.

    ca = TestCA("issuer-ca")                         # RSA (or "ec") CA: its certificate goes into rootcertbundle
    old = ca.issue("RS256")                          # a signing key and its certificate, issued by the CA
    with TokenIssuer(old, issuer="berth-test-issuer", users={"alice": "pw"}) as issuer:
        issuer.realm                                 # http://127.0.0.1:PORT/token
        issuer.use(ca.issue("ES256"))                # switch the signing key (a key rotation)
        issuer.mint("registry", "repository:demo/app:pull")   # a token without the HTTP round trip

`GET /token?service=S&scope=repository:NAME:pull,push` with HTTP basic auth answers `{"token", "access_token",
"expires_in", "issued_at"}`; without valid credentials, 401. Every scope asked for is granted. The JWT is
RS256 or ES256, signed with `cryptography` (base64url and the JWS signing input by hand: no JWT library).
Its header carries `x5c` (the signing certificate, then the CA's: what rootcertbundle verifies,
docs/upstream.md#dist-token-auth) or, with `header="kid"`, only `kid` (a key of a JWKS, Distribution 3).
"""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import re
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

Algorithm = Literal["RS256", "ES256"]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_b64url(value: int, length: int | None = None) -> str:
    return b64url(value.to_bytes(length or (value.bit_length() + 7) // 8, "big"))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass
class SigningKey:
    alg: Algorithm
    private_key: Any
    cert: x509.Certificate
    chain: list[x509.Certificate]  # the signing certificate, then its issuer's
    kid: str

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def sign(self, data: bytes) -> bytes:
        if self.alg == "RS256":
            return self.private_key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        r, s = decode_dss_signature(self.private_key.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")  # JWS ES256: r || s (RFC 7518 §3.4)

    def jwk(self) -> dict[str, str]:
        public = self.private_key.public_key().public_numbers()
        if self.alg == "RS256":
            return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256", "n": _int_b64url(public.n),
                    "e": _int_b64url(public.e)}
        return {"kty": "EC", "kid": self.kid, "use": "sig", "alg": "ES256", "crv": "P-256",
                "x": _int_b64url(public.x, 32), "y": _int_b64url(public.y, 32)}


def jwks(*keys: SigningKey) -> bytes:
    """A JSON Web Key Set of the keys' public halves."""
    return json.dumps({"keys": [key.jwk() for key in keys]}).encode()


class TestCA:
    """A CA whose certificate goes into the registry's rootcertbundle; it issues the issuer's signing certs."""

    __test__ = False  # not a pytest test class

    def __init__(self, common_name: str = "berth-token-ca", *, kind: Literal["rsa", "ec"] = "rsa",
                 valid_for: datetime.timedelta = datetime.timedelta(days=30),
                 not_before: datetime.datetime | None = None) -> None:
        self.key = rsa.generate_private_key(65537, 2048) if kind == "rsa" else ec.generate_private_key(ec.SECP256R1())
        start = not_before or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        self.cert = (
            x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + valid_for)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, alg: Algorithm = "RS256", *, common_name: str | None = None) -> SigningKey:
        key = rsa.generate_private_key(65537, 2048) if alg == "RS256" else ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        kid = f"key-{secrets.token_hex(4)}"
        cert = (
            x509.CertificateBuilder().subject_name(_name(common_name or kid)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        return SigningKey(alg, key, cert, [cert, self.cert], kid)


def bundle(*cas: TestCA) -> bytes:
    """A rootcertbundle: the CAs' certificates, PEM, one after another."""
    return b"".join(ca.cert_pem for ca in cas)


class TokenIssuer:
    def __init__(self, key: SigningKey, *, issuer: str = "berth-test-issuer",
                 users: Mapping[str, str] | None = None, expires_in: int = 300,
                 header: Literal["x5c", "kid"] = "x5c") -> None:
        self.key, self.issuer, self.expires_in, self.header = key, issuer, expires_in, header
        self.users = dict(users if users is not None else {"alice": "alice-password"})
        self.issued = 0  # tokens handed out over HTTP
        self.refused = 0  # token requests refused (bad or missing credentials)
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="token-issuer", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def realm(self) -> str:
        return f"{self.url}/token"

    def start(self) -> TokenIssuer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> TokenIssuer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def use(self, key: SigningKey) -> None:
        """Sign with `key` from now on (the issuer's switch in a key rotation)."""
        with self._lock:
            self.key = key

    def mint(self, service: str, *scopes: str, subject: str = "alice", key: SigningKey | None = None,
             expires_in: int | None = None) -> str:
        """A signed token for `service` granting `scopes` (`repository:NAME:ACTIONS`)."""
        with self._lock:
            key = key or self.key
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": subject, "aud": service, "iat": now, "nbf": now - 5,
                  "exp": now + (expires_in or self.expires_in), "jti": secrets.token_hex(8),
                  "access": [access for scope in scopes if (access := _access(scope))]}
        header: dict[str, Any] = {"typ": "JWT", "alg": key.alg}
        if self.header == "x5c":
            header["x5c"] = [base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode() for c in key.chain]
        else:
            header["kid"] = key.kid
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}".encode()
        return f"{signing_input.decode()}.{b64url(key.sign(signing_input))}"

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                parts = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(parts.query)
                if parts.path != "/token":
                    return self._answer(404, {"error": "not found"})
                if not issuer._authorized(self.headers.get("Authorization", "")):
                    with issuer._lock:
                        issuer.refused += 1
                    return self._answer(401, {"error": "unauthorized"})
                token = issuer.mint((query.get("service") or [""])[0], *query.get("scope", []),
                                    subject=(query.get("account") or ["alice"])[0])
                with issuer._lock:
                    issuer.issued += 1
                self._answer(200, {"token": token, "access_token": token, "expires_in": issuer.expires_in,
                                   "issued_at": datetime.datetime.now(datetime.UTC).isoformat()})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _authorized(self, header: str) -> bool:
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        return user in self.users and secrets.compare_digest(self.users[user], password)


def _access(scope: str) -> dict[str, Any] | None:
    """`repository:demo/app:pull,push` -> {"type": "repository", "name": "demo/app", "actions": [...]}."""
    kind, _, rest = scope.partition(":")
    name, _, actions = rest.rpartition(":")
    if not kind or not name:
        return None
    return {"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]}


# ---- the client side: what docker and skopeo do on a 401 -------------------------------------------------------

_PARAM = re.compile(r'(\w+)="([^"]*)"')


def parse_challenge(header: str) -> dict[str, str]:
    """`Bearer realm="...",service="...",scope="..."` -> {"realm": ..., "service": ..., "scope": ...}."""
    scheme, _, params = header.partition(" ")
    if scheme.lower() != "bearer":
        raise ValueError(f"not a Bearer challenge: {scheme!r}")
    return dict(_PARAM.findall(params))


def fetch_token(challenge: Mapping[str, str], creds: tuple[str, str]) -> str:
    query = urllib.parse.urlencode({k: v for k, v in challenge.items() if k in ("service", "scope")})
    request = urllib.request.Request(f"{challenge['realm']}?{query}")
    request.add_header("Authorization", "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["token"]


def _get(url: str, bearer: str | None, timeout: float) -> tuple[int, bytes, str]:
    request = urllib.request.Request(url)
    if bearer:
        request.add_header("Authorization", f"Bearer {bearer}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read(), ""
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read(), exc.headers.get("WWW-Authenticate", "")


def challenged_get(url: str, creds: tuple[str, str], *, token: str | None = None,
                   timeout: float = 10.0) -> tuple[int, bytes, str | None]:
    """GET `url` as a registry client does: with `token` if given, else without; on a 401 Bearer challenge, ask
    the realm for a token (basic auth) and try once more. Returns (status, body, the token used last)."""
    status, body, challenge = _get(url, token, timeout)
    if status == 401 and challenge:
        token = fetch_token(parse_challenge(challenge), creds)
        status, body, _ = _get(url, token, timeout)
    return status, body, token


def bearer_status(url: str, token: str, *, timeout: float = 10.0) -> int:
    """The status of GET `url` with exactly this token (no challenge following)."""
    return _get(url, token, timeout)[0]
