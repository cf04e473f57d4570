"""Clients that open a new connection for every request, as skopeo and many CI clients do, and count how each ended.

`NewConnectionLoop` GETs `path` in a loop, one TCP connection per request, and sorts every attempt: answered
(any HTTP status under 500), refused (nothing accepting: the failure "hot" must never show), closed without a
response (accepted, then closed before a status line: a process that stopped right after accepting), or failed
(anything else: a 5xx, a timeout). Counts only: never a timing claim.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass, field


@dataclass
class ConnectionCounts:
    answered: int = 0
    refused: int = 0
    closed_without_response: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)  # the first few, for the assertion message

    def add(self, other: ConnectionCounts) -> ConnectionCounts:
        return ConnectionCounts(self.answered + other.answered, self.refused + other.refused,
                                self.closed_without_response + other.closed_without_response,
                                self.failed + other.failed, (self.failures + other.failures)[:10])


class NewConnectionLoop(threading.Thread):
    def __init__(self, host: str, port: int, *, path: str = "/v2/", timeout: float = 10.0, pause: float = 0.0,
                 expected: bytes | None = None):
        """`expected`: the body a pull must get (with 200); anything else is a failed request."""
        super().__init__(name="new-connections", daemon=True)
        self.host, self.port, self.path, self.timeout, self.pause = host, port, path, timeout, pause
        self.expected = expected
        self.counts = ConnectionCounts()
        self._stop_event = threading.Event()

    def start(self) -> NewConnectionLoop:  # type: ignore[override]
        super().start()
        return self

    def __enter__(self) -> NewConnectionLoop:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> ConnectionCounts:
        self._stop_event.set()
        self.join(30)
        return self.counts

    def one(self) -> None:
        counts = self.counts
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            connection.request("GET", self.path, headers={"Connection": "close"})
            response = connection.getresponse()
            status, body = response.status, response.read()
            if self.expected is not None and (status != 200 or body != self.expected):
                counts.failed += 1
                counts.failures.append(f"HTTP {status}, {len(body)} bytes")
            elif status < 500:
                counts.answered += 1
            else:
                counts.failed += 1
                counts.failures.append(f"HTTP {status}")
        except ConnectionRefusedError:
            counts.refused += 1
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            counts.closed_without_response += 1
        except (OSError, http.client.HTTPException) as exc:
            counts.failed += 1
            counts.failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.one()
            if self.pause:
                self._stop_event.wait(self.pause)


__all__ = ["ConnectionCounts", "NewConnectionLoop"]
