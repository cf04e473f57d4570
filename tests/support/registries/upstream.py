"""An upstream for a pull-through cache: a second real registry on 127.0.0.1, with htpasswd (basic auth) or token
auth, whose requests are counted.

    with htpasswd_upstream(tmp_path, {"mirror": "pw"}, binary=REGISTRY3_BINARY) as up:
        push_image(image, up.registry, "lib/app:1", creds=("mirror", "pw"))
        up.requests()                       # [(method, path, status), ...] from its access log
    with token_upstream(tmp_path, {"mirror": {"old-pw"}}) as up:   # one user, a set of live passwords
        up.url                              # the front: /token (the issuer) and /v2/ (the registry) on ONE port
        up.front.passwords["mirror"].add("new-pw"); up.front.passwords["mirror"].discard("old-pw")   # rotate, revoke
        up.front.log                        # every request: (time, method, path, status, password label or None)

Distribution 3.1 sends a proxy's credentials only to a token realm on the upstream's host:port (or its domain;
never to another port of 127.0.0.1: `realmAllowed`,
docs/decisions/0020-pull-through-cache-restarts.md), as Docker Hub's realm is under
docker.io. So the token upstream is a front on one port that serves `/token` itself (minting with
support.services.token_issuer, which the registry trusts) and forwards everything else to the registry. The front tells
which password got each token (its label), so a test can show that nothing is pulled with a revoked password.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import http.server
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import yaml

from support.common.ports import free_port
from support.registries.registry import REGISTRY_BINARY, RegistryProcess, start_registry
from support.services.token_issuer import TestCA, TokenIssuer, bundle

SERVICE = "berth-upstream"
_ACCESS = re.compile(r'"(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+) HTTP/[0-9.]+" (\d{3})')


def htpasswd(users: dict[str, str]) -> bytes:
    return b"".join(f"{u}:".encode() + bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=4)) + b"\n"
                    for u, p in users.items())


def _config(root: Path, auth: dict | None) -> bytes:
    config = {"version": "0.1", "log": {"level": "info", "accesslog": {"disabled": False}},
              "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}},
              "http": {"addr": f"127.0.0.1:{free_port()}"}}
    if auth:
        config["auth"] = auth
    return yaml.safe_dump(config, sort_keys=False).encode()


@dataclass
class Upstream:
    registry: RegistryProcess
    root: Path
    binary: str
    front: TokenFront | None = None
    stopped: bool = False

    @property
    def url(self) -> str:
        """What a proxy's remoteURL names: the front for a token upstream, else the registry."""
        return self.front.url if self.front else self.registry.url

    @property
    def host(self) -> str:
        return self.registry.host

    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of every request the registry served, from its access log (one line each)."""
        text = "".join(p.read_text(errors="replace") for p in sorted(self.root.glob("run-*/registry.log")))
        return [(m, path, int(s)) for m, path, s in _ACCESS.findall(text)]

    def content_requests(self, kind: str = "blobs", method: str = "GET") -> list[str]:
        """Paths of successful content requests (`blobs` or `manifests`) with `method`."""
        return [p for m, p, s in self.requests() if m == method and f"/{kind}/" in p and s in (200, 307)]

    def stop(self) -> None:
        """The upstream goes away: the registry stops, and a token upstream's front closes its port too."""
        if not self.stopped:
            self.registry.stop()
            if self.front is not None:
                self.front.stop()
            self.stopped = True

    def start_again(self) -> None:
        """The same upstream (same ports, data and front log) back after stop()."""
        runs = len(list(self.root.glob("run-*")))
        self.registry = start_registry(self.registry.config_path, self.root / f"run-{runs}", binary=self.binary)
        if self.front is not None:
            self.front.start()
        self.stopped = False


@contextlib.contextmanager
def htpasswd_upstream(root: Path, users: dict[str, str], *, binary: str = REGISTRY_BINARY) -> Iterator[Upstream]:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "htpasswd").write_bytes(htpasswd(users))
    config = root / "config.yml"
    config.write_bytes(_config(root, {"htpasswd": {"realm": "upstream", "path": str(root / "htpasswd")}}))
    upstream = Upstream(start_registry(config, root / "run-0", binary=binary), root, binary)
    try:
        yield upstream
    finally:
        upstream.stop()


def set_htpasswd(upstream: Upstream, users: dict[str, str]) -> None:
    """Replace the upstream's users (the registry re-reads htpasswd by mtime,
    docs/upstream.md#dist-htpasswd-live)."""
    path = upstream.root / "htpasswd"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(htpasswd(users))
    tmp.replace(path)


@dataclass
class FrontEntry:
    at: float
    method: str
    path: str
    status: int
    password: str | None  # the label of the password whose token the request carried; None without one


class TokenFront:
    """`/token` (the distribution token protocol, basic auth against `passwords`) and a forwarder to the
    registry, on one port. `passwords[user]` is a set: a rotation adds the new one, then revokes the old."""

    def __init__(self, issuer: TokenIssuer, passwords: dict[str, set[str]], backend: str) -> None:
        self.issuer, self.passwords, self.backend = issuer, passwords, backend
        self.log: list[FrontEntry] = []
        self.token_log: list[FrontEntry] = []  # /token requests: status 200 (issued) or 401 (refused)
        self._labels: dict[str, str] = {}  # jti -> the password it was issued for
        self._lock = threading.Lock()
        self.port = 0
        self._server: http.server.ThreadingHTTPServer | None = None
        self.start()

    def start(self) -> None:
        """Listen (again, on the same port after stop())."""
        self._server = _QuietServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="token-front", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def realm(self) -> str:
        return f"{self.url}/token"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def after(self, moment: float) -> list[FrontEntry]:
        with self._lock:
            return [entry for entry in self.log if entry.at >= moment]

    def _password_of(self, header: str) -> str | None:
        if not header.startswith("Bearer "):
            return None
        try:
            payload = header[7:].split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (IndexError, ValueError):
            return None
        with self._lock:
            return self._labels.get(claims.get("jti", ""))

    def _token(self, handler: http.server.BaseHTTPRequestHandler, query: dict) -> None:
        header = handler.headers.get("Authorization", "")
        user = password = None
        if header.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                user = None
        with self._lock:
            granted = user is not None and password in self.passwords.get(user, set())
        if not granted:
            self._record(self.token_log, "GET", "/token", 401, password)
            return _answer(handler, 401, {"details": "incorrect username or password"})
        token = self.issuer.mint((query.get("service") or [""])[0], *query.get("scope", []), subject=user)
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        with self._lock:
            self._labels[claims["jti"]] = password
        self._record(self.token_log, "GET", "/token", 200, password)
        _answer(handler, 200, {"token": token, "access_token": token, "expires_in": self.issuer.expires_in})

    def _record(self, log: list, method: str, path: str, status: int, password: str | None) -> None:
        with self._lock:
            log.append(FrontEntry(time.monotonic(), method, path, status, password))

    def _forward(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        connection = http.client.HTTPConnection(self.backend, timeout=60)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        try:
            # Header by header: a client sends several Accept headers (a dict would keep one, and a registry
            # answers 404 for an OCI manifest asked for without its media type).
            connection.putrequest(handler.command, handler.path, skip_accept_encoding=True)
            for key, value in handler.headers.items():
                if key.lower() not in ("host", "connection", "content-length"):
                    connection.putheader(key, value)
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body or None)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        self._record(self.log, handler.command, handler.path, response.status,
                     self._password_of(handler.headers.get("Authorization", "")))
        handler.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("content-length", "connection", "transfer-encoding"):
                handler.send_header(key, value)
        # A HEAD's Content-Length is the size of what a GET would send (a proxy reads blob sizes from it).
        size = response.getheader("Content-Length") if handler.command == "HEAD" else None
        handler.send_header("Content-Length", size or str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                if parts.path == "/token":
                    return front._token(self, urllib.parse.parse_qs(parts.query))
                try:
                    front._forward(self)
                except OSError:  # the registry is stopped: the upstream is down
                    front._record(front.log, self.command, self.path, 502, None)
                    self.close_connection = True
                    self.send_response(502)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any  # noqa: N815 (the stdlib's names)

        return Handler


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:  # a registry killed mid-request resets: not news
        pass


def _answer(handler: http.server.BaseHTTPRequestHandler, status: int, body: dict) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@contextlib.contextmanager
def token_upstream(root: Path, passwords: dict[str, set[str]], *,
                   binary: str = REGISTRY_BINARY) -> Iterator[Upstream]:
    """A registry with token auth behind a TokenFront (the realm on the front's port)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    ca = TestCA("upstream-ca")
    issuer = TokenIssuer(ca.issue("RS256"), issuer="berth-upstream-issuer")  # used to mint only: never started
    (root / "bundle.pem").write_bytes(bundle(ca))
    addr = f"127.0.0.1:{free_port()}"
    front = TokenFront(issuer, passwords, addr)
    config = root / "config.yml"
    config.write_bytes(_config(root, {"token": {"realm": front.realm, "service": SERVICE,
                                                "issuer": "berth-upstream-issuer",
                                                "rootcertbundle": str(root / "bundle.pem")}}))
    document = yaml.safe_load(config.read_bytes())
    document["http"]["addr"] = addr
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    try:
        upstream = Upstream(start_registry(config, root / "run-0", binary=binary), root, binary, front)
    except BaseException:
        front.stop()
        raise
    try:
        yield upstream
    finally:
        upstream.stop()
        front.stop()
        issuer._server.server_close()


def token_for(upstream: Upstream, user: str, password: str, scope: str) -> str:
    """A token from the front, as a client gets one (for pushing the test content to the upstream)."""
    query = urllib.parse.urlencode({"service": SERVICE, "scope": scope})
    connection = http.client.HTTPConnection(urllib.parse.urlsplit(upstream.url).netloc, timeout=10)
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
    connection.request("GET", f"/token?{query}", headers={"Authorization": f"Basic {credentials}"})
    return json.loads(connection.getresponse().read())["token"]


__all__ = ["SERVICE", "FrontEntry", "TokenFront", "Upstream", "htpasswd", "htpasswd_upstream", "set_htpasswd",
           "token_for", "token_upstream"]
