"""A client pulling one blob over and over through a registry restart, counting what a user would see.

A refused connection is retried (the listener is closed for the few milliseconds between the old registry's
drain and the new one's start); every other outcome counts: 200 with the right bytes is a success, anything
else (another status, wrong bytes, a connection cut mid-request, a refusal lasting over `retry_seconds`) is a
failure.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode
from dataclasses import dataclass, field


@dataclass
class PullStats:
    requests: int = 0
    successes: int = 0
    refused_retries: int = 0
    failures: list[str] = field(default_factory=list)


class PullLoop(threading.Thread):
    def __init__(self, url: str, expected: bytes, *, auth: tuple[str, str] | None = None,
                 retry_seconds: float = 5.0, pause: float = 0.0, max_requests: int = 100_000):
        super().__init__(name="pull-loop", daemon=True)
        self.url, self.expected, self.auth = url, expected, auth
        self.retry_seconds, self.pause, self.max_requests = retry_seconds, pause, max_requests
        self.stats = PullStats()
        self._stop_event = threading.Event()

    def stop(self) -> PullStats:
        self._stop_event.set()
        self.join(30)
        return self.stats

    def _get(self) -> tuple[int, bytes]:
        request = urllib.request.Request(self.url)
        if self.auth:
            request.add_header("Authorization", "Basic " + b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode())
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def one_request(self) -> None:
        deadline = time.monotonic() + self.retry_seconds
        self.stats.requests += 1
        while True:
            try:
                status, body = self._get()
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, ConnectionRefusedError) and time.monotonic() < deadline:
                    self.stats.refused_retries += 1
                    time.sleep(0.005)
                    continue
                self.stats.failures.append(f"{type(exc.reason).__name__}: {exc.reason}")
                return
            except (http.client.HTTPException, OSError) as exc:
                self.stats.failures.append(f"{type(exc).__name__}: {exc}")
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
