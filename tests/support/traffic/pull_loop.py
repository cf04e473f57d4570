"""A client pulling one blob over and over through a registry restart, counting what a user would see.

A request that never reached the registry is retried, and counted: a refused connection (no listener for the
few milliseconds between the old registry's drain and the new one's start), and a connection reset before any
response byte (the kernel resets connections still waiting in the old listener's accept queue when the
draining registry closes it; the registry never read them). Every other outcome counts: 200 with the right
bytes is a success, anything else (another status, wrong bytes, a connection cut after the response began,
retries lasting over `retry_seconds`) is a failure.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class PullStats:
    requests: int = 0
    successes: int = 0
    refused_retries: int = 0
    reset_retries: int = 0
    failures: list[str] = field(default_factory=list)


class PullLoop(threading.Thread):
    def __init__(self, url: str, expected: bytes, *, auth: tuple[str, str] | None = None,
                 authorization: Callable[[], str] | None = None,
                 retry_seconds: float = 5.0, pause: float = 0.0, max_requests: int = 100_000):
        """`auth`: basic auth; `authorization`: called for each request's Authorization header instead (e.g.
        a bearer token from a token issuer, fetched as a client does)."""
        super().__init__(name="pull-loop", daemon=True)
        self.url, self.expected, self.auth, self.authorization = url, expected, auth, authorization
        self.retry_seconds, self.pause, self.max_requests = retry_seconds, pause, max_requests
        self.stats = PullStats()
        self._stop_event = threading.Event()

    def stop(self) -> PullStats:
        self._stop_event.set()
        self.join(30)
        return self.stats

    def _open(self):
        request = urllib.request.Request(self.url)
        if self.auth:
            token = b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            request.add_header("Authorization", "Basic " + token)
        if self.authorization is not None:
            request.add_header("Authorization", self.authorization())
        try:
            return urllib.request.urlopen(request, timeout=30)
        except urllib.error.HTTPError as exc:
            return exc

    def one_request(self) -> None:
        deadline = time.monotonic() + self.retry_seconds
        self.stats.requests += 1
        while True:
            try:
                response = self._open()  # returns once the status line arrived
            except (urllib.error.URLError, ConnectionError) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                if time.monotonic() < deadline and isinstance(reason, (ConnectionRefusedError, ConnectionResetError)):
                    if isinstance(reason, ConnectionRefusedError):
                        self.stats.refused_retries += 1
                    else:
                        self.stats.reset_retries += 1
                    time.sleep(0.005)
                    continue
                self.stats.failures.append(f"{type(reason).__name__}: {reason}")
                return
            except (http.client.HTTPException, OSError) as exc:
                self.stats.failures.append(f"{type(exc).__name__}: {exc}")
                return
            try:
                with response:
                    status = response.status if hasattr(response, "status") else response.code
                    body = response.read()
            except (http.client.HTTPException, OSError) as exc:  # cut after the response began: a real failure
                self.stats.failures.append(f"{type(exc).__name__} while reading the body: {exc}")
                return
            if status == 200 and body == self.expected:
                self.stats.successes += 1
            else:
                self.stats.failures.append(f"HTTP {status}, {len(body)} bytes")
            return

    def run(self) -> None:
        while not self._stop_event.is_set() and self.stats.requests < self.max_requests:
            self.one_request()
            if self.pause:
                time.sleep(self.pause)


class KeptAlivePullLoop(PullLoop):
    """The same pulls on one kept-alive connection, as containerd and Go clients keep theirs: a requests.Session
    (urllib3's pool notices a connection the server closed while idle before it reuses it, and opens a new one).

    Retried and counted, as Go's transport does for a GET (RFC 9112 §9.3.1: a request on a reused connection that
    closed before any response byte): `reset_retries`; and a refused connection (no listener for a moment, 2.8 with
    one replica): `refused_retries`. Anything else (another status, other bytes, a body cut short) is a failure."""

    def __init__(self, url: str, expected: bytes, **kwargs) -> None:
        super().__init__(url, expected, **kwargs)
        import requests  # the kubernetes client's dependency: always there

        self.session = requests.Session()

    def _headers(self) -> dict[str, str]:
        if self.authorization is not None:
            return {"Authorization": self.authorization()}
        if self.auth:
            return {"Authorization": "Basic " + b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()}
        return {}

    def one_request(self) -> None:
        import requests

        self.stats.requests += 1
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                with self.session.get(self.url, headers=self._headers(), timeout=30, stream=True) as response:
                    status = response.status_code
                    body = response.raw.read(decode_content=True)
                break
            except requests.ConnectionError as exc:
                text = str(exc)
                refused = "NewConnectionError" in text or "Connection refused" in text
                unanswered = "Connection aborted" in text or "RemoteDisconnected" in text
                if time.monotonic() < deadline and (refused or unanswered):
                    if refused:
                        self.stats.refused_retries += 1
                    else:
                        self.stats.reset_retries += 1
                    time.sleep(0.005)
                    continue
                self.stats.failures.append(f"{type(exc).__name__}: {exc}"[:300])
                return
            except (requests.RequestException, OSError, http.client.HTTPException) as exc:
                self.stats.failures.append(f"{type(exc).__name__}: {exc}"[:300])
                return
        if status == 200 and body == self.expected:
            self.stats.successes += 1
        else:
            self.stats.failures.append(f"HTTP {status}, {len(body)} bytes")

    def stop(self) -> PullStats:
        stats = super().stop()
        self.session.close()
        return stats
