"""A client asking the registry `GET /v2/` over and over, counting every request that did not get 200 or 401.

Stricter than support.traffic.pull_loop: a refused or reset connection is a failure too, because the checks using it
claim the registry never stopped serving (a config refused before any restart).
"""

from __future__ import annotations

import http.client
import ssl
import threading
from dataclasses import dataclass, field


@dataclass
class RequestStats:
    requests: int = 0
    failures: list[str] = field(default_factory=list)


class RequestLoop(threading.Thread):
    def __init__(self, host: str, port: int, *, tls: bool = False, pause: float = 0.01):
        super().__init__(name="request-loop", daemon=True)
        self.host, self.port, self.tls, self.pause = host, port, tls, pause
        self.stats = RequestStats()
        self._stop_event = threading.Event()

    def __enter__(self) -> RequestLoop:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> RequestStats:
        self._stop_event.set()
        self.join(30)
        return self.stats

    def _connection(self) -> http.client.HTTPConnection:
        if self.tls:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # any certificate: serving is the claim
            return http.client.HTTPSConnection(self.host, self.port, timeout=10, context=context)
        return http.client.HTTPConnection(self.host, self.port, timeout=10)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.stats.requests += 1
            connection = self._connection()
            try:
                connection.request("GET", "/v2/")
                status = connection.getresponse().status
                if status not in (200, 401):
                    self.stats.failures.append(f"HTTP {status}")
            except (OSError, http.client.HTTPException) as exc:
                self.stats.failures.append(type(exc).__name__)
            finally:
                connection.close()
            self._stop_event.wait(self.pause)
