"""Ask an agent's /readyz every 10 ms in a thread, keeping (wall time the question was sent, status) per answer.

    with ReadyzProbe(port) as probe:
        ...                           # the fault
    probe.answers_after(t, u)         # [(sent, status), ...] of the questions sent at or after wall time t and
                                      # answered before u

The agent computed an answer between its question's sending and its answer's arrival: a window against a log
line's time holds only the answers wholly inside it (a 200 sent just before "supervisor is back" and answered after
it, on a loaded node, was counted as a 200 before it).
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
        self.answered: list[float] = []  # the wall time each answer of `answers` arrived
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
            status = self._ask()
            self.answered.append(time.time())
            self.answers.append((sent, status))
            self._stop.wait(INTERVAL_SECONDS)

    def answers_after(self, wall: float, until: float = float("inf")) -> list[tuple[float, int | None]]:
        answers = list(zip(self.answers, self.answered, strict=False))
        return [(sent, status) for (sent, status), answered in answers if wall <= sent and answered < until]


__all__ = ["ReadyzProbe"]
