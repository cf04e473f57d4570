"""The registry watch: once a second, what the registry process and its supervisor are doing
(docs/decisions/0016-probes-tell-the-truth.md).

- Serving: a registry started on config.yml as the agent believes it (the verified config, else what is on
  disk) answers on its address, and its supervisor runs. That is /readyz (core/health.py) and
  berth_agent_registry_serving. The supervisor is also asked on every /readyz (`nothing_serves`): without it
  nothing serves (in a pod the runtime ends the container's registries with it), so readiness turns at once.
  While nothing serves the watch looks every FAST_INTERVAL_SECONDS, so readiness returns soon after a registry
  answers again.
- Unexpected exits: berth-supervise appends "seq pid status seconds" to registry-exits each time a registry exits
  on its own (a registry the agent SIGTERMs is handed over, or exits 0). Each exit with a new seq is counted in
  berth_agent_registry_exits_total{reason} and logged, however many came between two looks (a kill -9 and the
  refused starts after it can exit faster than the watch looks); a kill -9 shows as reason "signal".
- A crash loop: CRASH_LOOP_EXITS exits within CRASH_LOOP_SECONDS with nothing serving.
- A missing supervisor: berth-supervise wrote its pid in supervisor.pid and that process is gone. A /readyz
  that finds it gone wakes the watch, so it is reported within a probe's period, not only at the next look.
- A restarted supervisor: a new pid in supervisor.pid where the last look saw another running. The kubelet can
  restart the registry container (kill -9, OOM) between two looks; the gap was real (nothing served), so it
  is logged, an Event says it (SupervisorRestarted) and the wanted config is applied again, as on a return.
- Dropped notifications (3.x): what old registries still had queued when their wait after a reload reached its
  bound, per endpoint (notifications-dropped), counted in berth_agent_notifications_dropped_total and logged.

Problems go to status, an Event and the log through the pipeline (`Pipeline.watch_problem`), cleared when
they end. When the supervisor comes back, or the registry stops serving, the watch emits
Change("registry-watch"): the pipeline applies the wanted config again without waiting for the backoff.
The checks read /proc and make one GET / (2 s timeout): a worker thread, never the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..core import metrics
from ..core.health import Health
from ..restart.registry_output import first_error, keep_bounded
from ..restart.supervisor_state import (
    dropped_events,
    exit_history,
    supervisor_gone,
    supervisor_pid,
    supervisor_started,
)
from ..sources import Change, Emit
from .applier import Applier

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 1.0  # the supervisor pauses a second between failed starts: each one is seen
FAST_INTERVAL_SECONDS = 0.2  # while nothing serves: /readyz turns 200 within this of a registry answering
SUPERVISOR_MISSING = "the supervisor (berth-supervise, the registry container's command) is not running: nothing serves"
# /livez: the watch beats every second; a check takes at most the GET's 2 s timeout plus /proc scans.
MAX_SILENCE_SECONDS = 15.0
CRASH_LOOP_EXITS = 3
CRASH_LOOP_SECONDS = 30.0
# What changes from one start to the next in a registry's words for the same failure: the local end of a socket
# (`read udp 127.0.0.1:47718->10.96.0.10:53`, an ephemeral port per try), a timestamp, a pid.
_LOCAL_END = re.compile(r"(?:\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:.%\w]*\]):\d+->")
_TIMESTAMP = re.compile(r"\d{4}[-/]\d{2}[-/]\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_PID = re.compile(r"\b(pid[=: ]\s*)\d+", re.I)


@dataclass(frozen=True)
class Finding:
    serving: bool
    serving_reason: str
    supervisor: bool  # berth-supervise runs (or has never been seen: it has not written its pid yet)
    exits: tuple[tuple[int, int, int, int], ...]  # (seq, pid, status, seconds ran) of the last exits, oldest first
    registry_said: str | None  # the registry's first error line, scrubbed, when it is not serving
    dropped: dict[str, int] | None = None  # notification events dropped at the bound, per endpoint (cumulative)
    supervisor_pid: int | None = None  # the running supervisor's pid (None: gone, or not started yet)


def stable_words(said: str) -> str:
    """The registry's words without what moves between starts of the same failure, so a crash loop's message stays
    the same and status and Events say it once (the operator posts a Warning whenever Degraded's message moves).
    What was asked, where and why stay: `Get "https://registry-1.docker.io/v2/": ... read udp 10.96.0.10:53:
    i/o timeout`."""
    said = _LOCAL_END.sub("", said)  # as Go prints an error without a local end
    said = _TIMESTAMP.sub("<time>", said)
    return _PID.sub(r"\1<pid>", said)


def exit_reason(status: int, lived_seconds: int) -> str | None:
    """Why a registry exited, for the metric; None for an exit the agent asked for (status 0 after SIGTERM)."""
    if status == 0:
        return None
    if status > 128:
        return "signal"
    if lived_seconds < 2:
        return "start-failure"
    return "crash"


class RegistryWatch:
    name = "registry-watch"

    def __init__(self, applier: Applier, health: Health, *, interval: float = INTERVAL_SECONDS,
                 report: Callable[[str, str | None], Awaitable[None]] | None = None,
                 notify: Callable[[str, str], Awaitable[None]] | None = None) -> None:
        self.applier = applier
        self.health = health
        self.interval = interval
        self.state_dir = applier.state_dir  # berth-supervise's files
        self.report = report  # (reason, problem or None): the pipeline's watch_problem
        self.notify = notify  # (reason, message): a Warning Event for what is over already (watch_event)
        self._exits: deque[float] = deque(maxlen=16)
        self._last_exit_seq: int | None = None
        self._supervisor_seen = False
        self._supervisor_pid: int | None = None  # the last running supervisor seen
        self._wake: asyncio.Event | None = None  # set (from /readyz) to look now
        self._loop: asyncio.AbstractEventLoop | None = None
        self._problem: str | None = None
        self._looked = False
        self._dropped: dict[str, int] = {}
        health.add_check(self.nothing_serves)

    def nothing_serves(self) -> str | None:
        """Asked on every /readyz: a supervisor that started and is gone leaves nothing serving (3 small reads).
        Seen gone before the watch has said so, it wakes the watch: a restart quicker than a look is still told."""
        if not supervisor_gone(self.state_dir):
            return None
        if self._wake is not None and self._loop is not None and "supervisor" not in (self._problem or ""):
            self._loop.call_soon_threadsafe(self._wake.set)
        return SUPERVISOR_MISSING

    def check(self) -> Finding:
        keep_bounded(self.state_dir)
        pid = supervisor_pid(self.state_dir)
        supervisor = pid is not None or not supervisor_started(self.state_dir)
        exits = exit_history(self.state_dir)
        believed = self.applier.current or self.applier.on_disk(set())
        if not supervisor:
            serving, reason = False, SUPERVISOR_MISSING  # an orphaned registry still answering dies with its pipe
        elif believed is None:
            serving, reason = False, "config not written yet"
        elif self.applier.serving(believed) is not None:
            serving, reason = True, ""
        else:
            serving, reason = False, f"no registry started on config {believed.identity[:12]} answers"
        said = None if serving else first_error(self.state_dir)
        return Finding(serving, reason, supervisor, exits, said, dropped_events(self.state_dir), pid)

    async def run(self, emit: Emit) -> None:
        self.health.register(self.name, MAX_SILENCE_SECONDS)
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        try:
            while True:
                self.health.beat(self.name)
                # While an apply runs it verifies what it restarts itself; the first look is taken regardless
                # (an agent that starts on a crash-looping config must not answer /readyz 200 meanwhile).
                if not self.applier.busy or not self._looked:
                    applies = self.applier.applies
                    finding = await asyncio.to_thread(self.check)
                    # An apply that began during the look may have written config.yml before its process
                    # answered: that look says "not serving" of a restart in progress. Drop it (once looked).
                    stale = self.applier.busy or self.applier.applies != applies
                    if not stale or not self._looked:
                        self._looked = True
                        await self._act(finding, emit)
                serving = self.health.serving_now()
                pause = self.interval if serving is not False else min(self.interval, FAST_INTERVAL_SECONDS)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), pause)
                self._wake.clear()
        finally:
            self._wake = None
            self.health.unregister(self.name)

    def _count_dropped(self, dropped: dict[str, int]) -> None:
        """The supervisor's counts are cumulative since its start: a smaller one is a new supervisor's."""
        for endpoint, count in sorted(dropped.items()):
            before = self._dropped.get(endpoint, 0)
            new = count - before if count >= before else count
            if new > 0:
                metrics.notifications_dropped_total.labels(endpoint=endpoint).inc(new)
                log.warning("notification events dropped", extra={"fields": {
                    "endpoint": endpoint, "events": new,
                    "why": "an old registry still held them when its wait after a reload reached its bound"}})
        self._dropped = dict(dropped)

    def _new_exits(self, exits: tuple[tuple[int, int, int, int], ...]) -> tuple[tuple[int, int, int, int], ...]:
        """The exits recorded since the last look. At the agent's start, an exit from before is not news; a seq
        below the last one seen is a new state dir's (its history starts again)."""
        newest = exits[-1][0] if exits else 0
        if self._last_exit_seq is None:
            self._last_exit_seq = newest
            return ()
        since = self._last_exit_seq if newest >= self._last_exit_seq else 0
        self._last_exit_seq = newest
        return tuple(exit for exit in exits if exit[0] > since)

    async def _act(self, finding: Finding, emit: Emit) -> None:
        now = time.monotonic()
        back = finding.supervisor and not self._supervisor_seen and self._problem and "supervisor" in self._problem
        if back:
            # Said before /readyz may turn 200: a log read next to the probes never shows 200 ahead of it.
            log.info("supervisor is back", extra={"fields": {}})
        previous = self._supervisor_pid
        restarted = not back and None not in (previous, finding.supervisor_pid) and finding.supervisor_pid != previous
        if finding.supervisor_pid is not None:
            self._supervisor_pid = finding.supervisor_pid
        if restarted:
            await self._restarted_between_looks(previous, finding.supervisor_pid)
        self.health.set_serving(finding.serving, finding.serving_reason)
        metrics.registry_serving.set(1 if finding.serving else 0)
        metrics.supervisor_up.set(1 if finding.supervisor else 0)
        self._count_dropped(finding.dropped or {})
        for _seq, pid, status, ran in self._new_exits(finding.exits):
            reason = exit_reason(status, ran)
            if reason is not None:
                metrics.registry_exits_total.labels(reason=reason).inc()
                self._exits.append(now)
                log.warning("registry exited", extra={"fields": {
                    "pid": pid, "status": status, "ran_seconds": ran, "reason": reason,
                    "registry_said": finding.registry_said}})
        recent = [t for t in self._exits if now - t <= CRASH_LOOP_SECONDS]
        problem, reason = None, ""
        if not finding.supervisor:
            problem, reason = ("the supervisor (berth-supervise, the registry container's command) is not running: "
                               "nothing restarts the registry; changes wait until it is back"), "SupervisorMissing"
        elif len(recent) >= CRASH_LOOP_EXITS and not finding.serving:
            # No exit count: it moves with every exit, and each new text is a status write and a Warning Event.
            problem = (f"the registry is crash-looping: it exited {CRASH_LOOP_EXITS} or more times within "
                       f"{CRASH_LOOP_SECONDS:g}s")
            if finding.registry_said:
                problem += f"; the registry said: {stable_words(finding.registry_said)}"
            reason = "RegistryCrashLooping"
        if back or restarted:
            emit(Change("registry-watch"))  # apply the wanted config now
        self._supervisor_seen = finding.supervisor
        if problem != self._problem:
            self._problem = problem
            if self.report is not None:
                await self.report(reason, problem)
            if problem is None and not finding.serving:
                emit(Change("registry-watch"))

    async def _restarted_between_looks(self, previous: int | None, pid: int | None) -> None:
        log.warning("supervisor restarted", extra={"fields": {
            "previous_pid": previous, "pid": pid,
            "why": "the registry container restarted (kill -9, OOM) between two looks: nothing served meanwhile"}})
        reason = "SupervisorRestarted"
        if self.notify is not None:
            await self.notify(reason, "the registry container's supervisor (berth-supervise) restarted: nothing "
                                      "served until its registry answered; see `kubectl describe pod`")


__all__ = ["RegistryWatch", "exit_reason", "stable_words"]
