"""Health of the agent: startup (first config written), readiness, liveness of the watch loops; the HTTP server
(core/listener.py).

Liveness reflects real progress: each source loop registers with a maximum silence and beats on every
iteration (a watch event, a reopened watch, a timer tick). A loop stuck in a read with no timeout stops
beating, /livez turns 503 and the kubelet restarts the agent container (a native sidecar: the registry
container keeps running). A loop that is merely retrying against an unreachable API still beats, because
restarting the agent would not bring the API back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import prometheus_client
from prometheus_client.registry import REGISTRY

from .listener import Handler, Listener, Request, Response, listen


class Health:
    """Thread-safe: sources beat from watchdog and kubernetes-client threads."""

    def __init__(self, clock=time.monotonic, config_path: Path | None = None) -> None:
        self._clock = clock
        self._config_path = config_path  # config.yml: on disk (written by this agent or an earlier one)
        self._lock = threading.Lock()
        self._last_beat: dict[str, float] = {}
        self._max_silence: dict[str, float] = {}
        self._config_written = False
        self._ready = True
        self._serving: tuple[bool, str] | None = None  # from the registry watch; None: no watch (unit tests)
        # Asked on every /readyz: facts cheap enough to read per probe (a missing supervisor), so the answer
        # turns the moment they do, not at the registry watch's next look.
        self._checks: list[Callable[[], str | None]] = []

    def register(self, name: str, max_silence_seconds: float) -> None:
        """From now on `name` must beat at least every `max_silence_seconds` for /livez to pass."""
        with self._lock:
            self._max_silence[name] = max_silence_seconds
            self._last_beat[name] = self._clock()  # a fresh loop gets its full allowance

    def unregister(self, name: str) -> None:
        """A loop that ended on purpose (shutdown) no longer counts."""
        with self._lock:
            self._max_silence.pop(name, None)
            self._last_beat.pop(name, None)

    def registered(self) -> list[str]:
        with self._lock:
            return sorted(self._max_silence)

    def beat(self, name: str) -> None:
        with self._lock:
            self._last_beat[name] = self._clock()

    def mark_config_written(self) -> None:
        """The first config is on disk: the registry container may start (the sidecar's startupProbe)."""
        self._config_written = True

    def set_ready(self, ready: bool) -> None:
        """False while this replica leaves the Service for a reload (apply/turns.py), whatever the registry does."""
        self._ready = ready

    def add_check(self, check: Callable[[], str | None]) -> None:
        """`check()` runs on every readiness question and returns why nothing serves, or None."""
        self._checks.append(check)

    def set_serving(self, ok: bool, reason: str = "") -> None:
        """The registry watch's finding: a registry started on the believed config answers (or why not)."""
        self._serving = (ok, reason)

    def serving_now(self) -> bool | None:
        """The last finding on the registry (None: none yet)."""
        return None if self._serving is None else self._serving[0]

    def startup_ok(self) -> bool:
        """config.yml is on disk, so the registry container may start: written by this agent, or by an earlier
        one (an agent restarted while the Registry is invalid must not hold back a pod that serves)."""
        if not self._config_written and self._config_path is not None and self._config_path.exists():
            self._config_written = True
        return self._config_written

    def not_ready_reason(self) -> str | None:
        if not self.startup_ok():
            return "config not written yet"
        for check in self._checks:
            if (reason := check()) is not None:
                return reason
        if not self._ready:
            return "leaving the Service for a reload"
        if self._serving is not None and not self._serving[0]:
            return self._serving[1] or "the registry is not serving"
        return None

    def ready_ok(self) -> bool:
        return self.not_ready_reason() is None

    def stale_loops(self) -> list[str]:
        """Registered loops that have been silent longer than they may be, as 'name (silent Ns)'."""
        now = self._clock()
        with self._lock:
            return [
                f"{name} (silent {now - self._last_beat.get(name, 0.0):.0f}s)"
                for name, limit in sorted(self._max_silence.items())
                if now - self._last_beat.get(name, 0.0) > limit
            ]

    def live_ok(self) -> bool:
        return not self.stale_loops()


def _answer(ok: bool, reason: str) -> Response:
    return Response.text(200 if ok else 503, "ok\n" if ok else reason + "\n")


def build_routes(health: Health) -> dict[str, dict[str, Handler]]:
    async def startupz(_request: Request) -> Response:
        return _answer(health.startup_ok(), "config not written yet")

    async def readyz(_request: Request) -> Response:
        reason = health.not_ready_reason()
        return _answer(reason is None, reason or "")

    async def livez(_request: Request) -> Response:
        stale = health.stale_loops()
        return _answer(not stale, "loops not progressing: " + ", ".join(stale))

    async def metrics(_request: Request) -> Response:
        return Response(200, prometheus_client.generate_latest(REGISTRY),
                        {"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})

    return {"/startupz": {"GET": startupz}, "/readyz": {"GET": readyz}, "/livez": {"GET": livez},
            "/metrics": {"GET": metrics}}


async def start_health_server(health: Health, host: str, port: int) -> Listener:
    """Serve the probes and /metrics on host:port; the caller stops it with `await listener.cleanup()`."""
    return await listen("health", build_routes(health), host, port)


__all__ = ["Health", "build_routes", "start_health_server"]
