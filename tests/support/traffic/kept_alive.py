"""A client that keeps one connection alive and never retries: Python's http.client, `GET /v2/` and a monolithic
blob upload (`POST /v2/REPO/blobs/uploads/`, then `PUT LOCATION?digest=` with the body) in turn, each on the one
connection it opened first. Every request that does not get its expected status, or meets a closed or reset
connection, is a failure (with what happened): a registry stopped under a kept-alive client shows here.

    with KeptAliveClient(host, port) as client:
        ...
    client.stats.requests, client.stats.failures
"""

from __future__ import annotations

import hashlib
import http.client
import os
import threading
from dataclasses import dataclass, field


@dataclass
class KeptAliveStats:
    requests: int = 0
    connections: int = 0
    failures: list[str] = field(default_factory=list)


class KeptAliveClient(threading.Thread):
    def __init__(self, host: str, port: int, *, repo: str = "demo/kept", pause: float = 0.02) -> None:
        super().__init__(name="kept-alive", daemon=True)
        self.host, self.port, self.repo, self.pause = host, port, repo, pause
        self.stats = KeptAliveStats()
        self._halt = threading.Event()

    def __enter__(self) -> KeptAliveClient:
        self.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()

    def stop(self) -> KeptAliveStats:
        self._halt.set()
        self.join(30)
        return self.stats

    def _ask(self, conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None,
             expected: tuple[int, ...]) -> http.client.HTTPResponse:
        self.stats.requests += 1
        conn.request(method, path, body=body, headers={"Content-Length": str(len(body or b""))} if body is not None
                     else {})
        response = conn.getresponse()
        response.read()
        if response.status not in expected:
            raise RuntimeError(f"{method} {path.split('?')[0]}: HTTP {response.status}")
        return response

    def run(self) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        self.stats.connections = 1
        while not self._halt.is_set():
            try:
                self._ask(conn, "GET", "/v2/", None, (200, 401))
                started = self._ask(conn, "POST", f"/v2/{self.repo}/blobs/uploads/", b"", (202,))
                location = started.getheader("Location") or ""
                if location.startswith("http"):
                    location = "/" + location.split("/", 3)[3]
                data = os.urandom(4096)
                digest = "sha256:" + hashlib.sha256(data).hexdigest()
                joiner = "&" if "?" in location else "?"
                self._ask(conn, "PUT", f"{location}{joiner}digest={digest}", data, (201,))
            except (OSError, http.client.HTTPException, RuntimeError) as exc:
                self.stats.failures.append(f"{type(exc).__name__}: {exc}")
                conn.close()  # a new connection, counted: the failure above is what a client without retry saw
                conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                self.stats.connections += 1
            self._halt.wait(self.pause)
        conn.close()


__all__ = ["KeptAliveClient", "KeptAliveStats"]
