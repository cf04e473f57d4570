"""What a steered-away registry still holds (3.x on the held socket,
docs/decisions/0011-old-registries-wait-for-clients-and-queues.md): its clients'
connections and its notification queues.

Distribution keeps each endpoint's queue in memory and does not flush it at SIGTERM
(docs/upstream.md#dist-notification-queue), and Go's Shutdown closes a kept-alive connection under a client about to
reuse it. So the supervisor SIGTERMs an old registry only once its clients have closed their connections and its
queues are empty, read from that process's own debug port: `registry_notifications_pending_total{endpoint}` (3.1.1's
name for the gauge) and `registry_http_in_flight_requests` on /metrics, and each endpoint's timeout, threshold and
backoff from /debug/vars (read once; its header values are never kept or printed).

The wait, from the moment the old registry was steered away and its accept queue emptied, is one of two:

- bounded (`quick`: the reload retires a credential, or is GC's read-only switch;
  docs/decisions/0001-retirement-bounded-by-drain-timeout.md): no kept-alive client
  and no request in flight is waited for (they would keep it serving the old configuration), only its queues, for
  at most QUEUE_SECONDS or its drainTimeout if shorter; the supervisor kills it if it still runs its drainTimeout
  after the switch. So no request is served on an old credential later than drainTimeout after the reload;
- otherwise:

- its connections first (a request on one makes its event when it ends): until none is open and nothing is in
  flight, at most IDLE_SECONDS (Go's http.DefaultTransport closes an idle connection after its IdleConnTimeout,
  90 s: skopeo and containerd keep that default) or `draintimeout` if longer;
- then the queues, while they shrink: an endpoint that delivered nothing for `threshold x timeout + backoff +
  timeout` (its breaker opened, waited its backoff and failed again) is down, and a queue of N events that a
  working endpoint takes at most `timeout` each for is done within N x timeout: whichever comes first, with
  MAX_WAIT_SECONDS as the last word. What is still queued then is dropped, counted per endpoint.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable

MAX_WAIT_SECONDS = 300.0  # whatever the endpoints say, no old registry waits longer for its queues
QUEUE_SECONDS = 1.0  # a bounded (quick) wait: at most this long, or the drain timeout if shorter, for the queues
IDLE_SECONDS = 90.0  # Go's net/http DefaultTransport IdleConnTimeout
UNREADABLE_SECONDS = 2.0  # a debug port that does not answer for this long: nothing to wait for
_PENDING = re.compile(rb'^registry_notifications_pending(?:_total)?\{endpoint="((?:[^"\\]|\\.)*)"\} (\S+)$', re.M)
_IN_FLIGHT = re.compile(rb"^registry_http_in_flight_requests\{[^}]*\} (\S+)$", re.M)
_DRAIN = re.compile(rb"^\s+draintimeout:\s*['\"]?([0-9.a-z\xc2\xb5]+)", re.M)
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """Seconds in a Go duration ("5s", "1m30s"); 0 for anything else. berth_api.types.duration_seconds, copied:
    the supervisor imports no pydantic (`tests/api/test_durations.py` holds the two to the same answers)."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return 0.0
    return sum(float(n) * _UNIT[u] for n, u in parts)


def drain_seconds(config: bytes) -> float:
    """http.draintimeout of a rendered config.yml (read when the registry starts on it)."""
    match = _DRAIN.search(config)
    return duration_seconds(match.group(1).decode(errors="replace")) if match else 0.0


def http_get(host: str, port: int, path: str, timeout: float = 0.5, limit: int = 1 << 22) -> bytes | None:
    """The body of a 200 answer to GET path, or None. Asked from the supervisor's one loop: a short timeout (a
    registry's debug port answers in milliseconds; one that does not is "unreadable" within UNREADABLE_SECONDS)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(f"GET {path} HTTP/1.0\r\nHost: berth-supervise\r\n\r\n".encode())
            chunks, size = [], 0
            while size < limit:
                data = conn.recv(65536)
                if not data:
                    break
                chunks.append(data)
                size += len(data)
    except OSError:
        return None
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return body if head.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200")) else None


def endpoint_bounds(host: str, port: int) -> dict[str, tuple[float, int, float]] | None:
    """Each notification endpoint's (timeout, threshold, backoff) as that registry runs them, from /debug/vars;
    {} with none; None when unreadable. Only these three fields are taken: the headers stay in the registry."""
    body = http_get(host, port, "/debug/vars")
    if body is None:
        return None
    import json  # only here: most registries have no notifications, and every pod pays for the supervisor's imports

    try:
        endpoints = (json.loads(body).get("registry") or {}).get("notifications", {}).get("endpoints") or []
        return {str(e["name"]): (max(1.0, int(e.get("Timeout") or 0) / 1e9), max(1, int(e.get("Threshold") or 0)),
                                 max(1.0, int(e.get("Backoff") or 0) / 1e9)) for e in endpoints}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def queue_state(host: str, port: int) -> tuple[int, dict[str, int]] | None:
    """(requests in flight, pending events per endpoint) from /metrics, or None when unreadable."""
    body = http_get(host, port, "/metrics")
    if body is None:
        return None
    try:
        in_flight = sum(int(float(v)) for v in _IN_FLIGHT.findall(body))
        pending = {name.decode(errors="replace"): int(float(v)) for name, v in _PENDING.findall(body)}
    except ValueError:
        return None
    return in_flight, pending


class Waiting:
    """One steered-away registry waiting for its queues; `check` says when to SIGTERM it."""

    def __init__(self, pid: int, host: str, port: int | None, drain: float, now: float,
                 connections: Callable[[], int] | None = None) -> None:
        self.pid, self.host, self.port = pid, host, port
        self.connections = connections  # its clients' open connections; None: a bounded (quick) wait
        self.drain = drain if connections is None else max(drain, IDLE_SECONDS)
        self.open = 0
        self.since = now
        self.bounds: dict[str, tuple[float, int, float]] | None = None
        self.queued_since: float | None = None  # in-flight requests done: the queues' own bound runs
        self.deadline = now + (MAX_WAIT_SECONDS if connections is not None else min(QUEUE_SECONDS, drain))
        self.stall = 0.0
        self.last_total: int | None = None
        self.progress_at = now
        self.unreadable_since: float | None = None
        self.pending: dict[str, int] = {}

    def check(self, now: float) -> str | None:
        """None: wait on. Else why it may go now ("empty", "no notifications", "bound", ...); `pending` then
        holds what it still had queued, per endpoint."""
        if self.port is None:
            return "no debug port"
        if self.queued_since is None and self.connections is not None and now - self.since < self.drain:
            self.open = self.connections()
            if self.open:
                return None  # a kept-alive client may still send it a request
        if self.bounds is None:
            self.bounds = endpoint_bounds(self.host, self.port)
            if self.bounds is None:
                return self._unreadable(now)
            if not self.bounds:
                return "no notification endpoint" if not self.open else f"{self.open} connections still open"
            self.stall = max(threshold * timeout + backoff + timeout
                             for timeout, threshold, backoff in self.bounds.values())
        state = queue_state(self.host, self.port)
        if state is None:
            return self._unreadable(now)
        self.unreadable_since = None
        in_flight, self.pending = state
        total = sum(self.pending.values())
        if self.queued_since is None:
            if self.connections is not None and (in_flight > 0 or self.open) and now - self.since < self.drain:
                return None
            self.queued_since = now
            timeout = max(t for t, _, _ in (self.bounds or {"": (1.0, 1, 1.0)}).values())
            self.deadline = min(self.deadline, now + total * timeout + self.stall)
            self.last_total, self.progress_at = total, now
        if total == 0:
            return "notification queues empty"
        if self.last_total is None or total < self.last_total:
            self.progress_at = now
        self.last_total = total
        if now - self.progress_at >= self.stall:
            return f"no event delivered for {self.stall:g}s"
        if now >= self.deadline:
            return "bound"
        return None

    def _unreadable(self, now: float) -> str | None:
        if self.unreadable_since is None:
            self.unreadable_since = now
        late = now - self.unreadable_since >= UNREADABLE_SECONDS or now >= self.deadline
        return "debug port unreadable" if late else None


__all__ = ["MAX_WAIT_SECONDS", "QUEUE_SECONDS", "Waiting", "drain_seconds", "duration_seconds", "endpoint_bounds",
           "queue_state"]
