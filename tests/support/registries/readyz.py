"""Ask an agent's /readyz every 10 ms in a thread, keeping (wall time the question was sent, status) per answer.

    with ReadyzProbe(port) as probe:
        ...                           # the fault
    probe.answers_after(t)            # [(sent, status), ...] of the questions sent at or after wall time t
"""

from __future__ import annotations

import http.client
import threading
import time

INTERVAL_SECONDS = 0.01


class ReadyzProbe:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.host, self.port = host, port
        self.answers: list[tuple[float, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="readyz-probe", daemon=True)

    def __enter__(self) -> ReadyzProbe:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _ask(self) -> int | None:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=5)
        try:
            connection.request("GET", "/readyz")
            return connection.getresponse().status
        except OSError:
            return None
        finally:
            connection.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.time()
            self.answers.append((sent, self._ask()))
            self._stop.wait(INTERVAL_SECONDS)

    def answers_after(self, wall: float, until: float = float("inf")) -> list[tuple[float, int | None]]:
        return [(sent, status) for sent, status in list(self.answers) if wall <= sent < until]


__all__ = ["ReadyzProbe"]
