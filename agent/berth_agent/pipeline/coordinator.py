"""The agent pipeline: one asyncio task that turns Changes into an applied config (docs/design.md §4.2).

    Change queue -> debounce -> validate the Registry -> read mounts -> render -> (hash changed?) -> apply
    (pre-flight, write, restart, verify, roll back) -> report (log line, metrics, status/Event, health)

Its parts: the debounce (debounce.py), the render step (render_step.py, bounded by guard.py), the applier
(apply/), retries and backoff (retry.py), and what status was last told (book.py, through report.py's Reporter).

Bad input never touches what runs: the last good config keeps serving, the error goes to status, metrics and
the log, and the next Change (or the periodic resync) re-renders, so fixing the input recovers by itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ..apply.applier import Applier, Outcome
from ..apply.turns import ReplicaTurn
from ..core import metrics
from ..core.clock import Clock, LoopClock
from ..core.errors import describe_internal_error
from ..core.health import Health
from ..render.config import Rendered
from ..restart.probe import STOPPED
from ..sources import Change
from ..sources.pvc import PvcProbe
from .book import StatusBook, show_current
from .debounce import Debounce
from .guard import newer_input_pending
from .render_step import RenderStep, listen_on, pods_of
from .report import Reporter
from .retry import Retries
from .settings import PipelineSettings

if TYPE_CHECKING:  # API mode only: local mode never loads the API sources
    from ..gc.read_only import GcReadOnly
    from ..sources.api_secrets import ApiSecrets

log = logging.getLogger(__name__)

PENDING_RETRY_SECONDS = 1.0  # the first config is written and no registry container has started yet
ROUND_BOUND_SECONDS = 300.0  # the longest an apply round may take (drain timeouts, a Lease wait) before /livez fails
# Changes that try a refused config again: the backoff timer, the periodic resync, the registry watch (a
# supervisor came back, the registry stopped serving).
FORCING_SOURCES = ("retry", "resync", "registry-watch")



def applier_for(settings: PipelineSettings, health: Health) -> Applier:
    """The Applier a pipeline with these settings puts its renders into service with."""
    return Applier(settings.config_dir, restart_timeout=settings.restart_timeout, preflight=settings.preflight,
                   on_written=health.mark_config_written, state_dir=settings.state_dir)


class Pipeline:
    def __init__(self, settings: PipelineSettings, reporter: Reporter, health: Health,
                 *, applier: Applier | None = None, pvc: PvcProbe | None = None, clock: Clock | None = None,
                 api_secrets: ApiSecrets | None = None, turn: ReplicaTurn | None = None,
                 gc: GcReadOnly | None = None) -> None:
        """Every part is given here (run.py builds the applier first, so that what reads it, GC's acknowledgement
        and the registry watch, exists before the pipeline); none is set afterwards."""
        self.settings = settings
        self.debounce = Debounce(clock or LoopClock(), settings.quiet_seconds, settings.max_wait_seconds)
        self.health = health
        self.api_secrets = api_secrets  # API mode: copies of the mounted Secrets read over the API
        self.applier = applier or applier_for(settings, health)
        self.renderer = RenderStep(settings, health, pvc=pvc, api_secrets=api_secrets, gc=gc)
        self.retries = Retries(settings.retry_seconds)
        self.book = StatusBook(reporter, self.retries)  # what status was last told
        # With siblings (spec.replicas > 1, API mode) a restart waits for this pod's turn, out of the Service.
        self.turn = turn
        self.registry: dict | None = None  # the latest Registry object read (unvalidated)
        self.registry_error: str | None = None  # why the latest read of the Registry failed
        # The generation whose render the registry serves (applier.current): set when a round's render is seen
        # served, whether that took a restart or none (a spec field the agent does not render, an edit back).
        self.served_generation: int | None = None
        self.applies = 0  # apply rounds run (tests and benchmarks count them)
        self.gc = gc  # garbage collection's read-only window (API mode, docs/design.md §4.5; gc/read_only.py)
        self._queue: asyncio.Queue[Change] | None = None

    @property
    def reporter(self) -> Reporter:
        return self.book.reporter

    @property
    def reported_error(self) -> str | None:
        """The error status says (None: the applied record)."""
        return self.book.error

    # ---- the loop -------------------------------------------------------------------------------------------

    async def run(self, queue: asyncio.Queue[Change]) -> None:
        self._queue = queue
        self.retries.attach(queue)
        # It beats on every Change; the mount watcher's resync sends one every resync_seconds, and a round takes
        # at most a restart's bound (drain + 10 s) twice plus a reload Lease wait: silent for longer, it is stuck.
        self.health.register("pipeline", max_silence_seconds=self.settings.resync_seconds * 2 + ROUND_BOUND_SECONDS)
        try:
            while True:
                self.health.beat("pipeline")
                change = await queue.get()
                self._absorb(change)
                if not (change.source.startswith("secret:") and queue.empty()):
                    # A Secret read over the API arrives whole, in one event: only file events come in bursts.
                    await self.debounce.gather(queue, self._absorb)
                try:
                    await self.apply_once()
                except Exception as exc:  # noqa: BLE001  a bug or an I/O failure (disk full) must not end the loop
                    await self._internal_error(exc)
        finally:
            self.applier.stopping.set()  # a worker thread still verifying a restart gives up
            self.health.unregister("pipeline")
            self.retries.cancel()
            if self.gc is not None:
                self.gc.close()

    def _absorb(self, change: Change) -> None:
        if change.source in FORCING_SOURCES:
            self.retries.forced = True
        if self.api_secrets is not None and self.api_secrets.absorb(change):
            return
        if change.source == "registry":
            if change.error is not None:
                metrics.render_errors_total.labels(source="registry").inc()  # bad YAML, an empty file, ...
                self.registry_error = change.error  # keep the last object read: its config keeps serving
            elif change.registry is not None:
                self.registry, self.registry_error = change.registry, None
                if self.gc is not None:
                    self.gc.read(change.registry)

    # ---- one round ------------------------------------------------------------------------------------------

    @property
    def generation(self) -> int | None:
        value = ((self.registry or {}).get("metadata") or {}).get("generation")
        return value if isinstance(value, int) else None

    async def apply_once(self) -> None:
        """Render from the latest inputs and apply when the result differs from what runs; report the result."""
        if self.api_secrets is not None and (wait := self.api_secrets.start_wait()) > 0:
            # At start, the Secrets' API copies are due: a render now could restart onto a stale mount.
            self.retries.schedule(wait)
            return
        self.applies += 1
        started = time.monotonic()
        rendered, error = await self._render_step()
        if rendered is None:
            return
        render_seconds = time.monotonic() - started
        outcome = await self._apply_step(rendered)
        fields = {"config_hash": rendered.identity, "action": outcome.action,
                  "seconds": round(time.monotonic() - started, 3),
                  "timings": {"render": round(render_seconds, 4), **outcome.timings}}
        await self._report_step(rendered, outcome, fields, error)

    async def _render_step(self) -> tuple[Rendered | None, str | None]:
        """The render to apply and the input error to report beside it; (None, _) when there is none to apply
        (the failure is reported here)."""
        result = await self.renderer.current(self.registry, self.registry_error)
        if result.retry:
            self.retries.schedule()  # the inputs keep moving: look again in a moment
        rendered, error = result.rendered, result.error
        if rendered is None:
            if error:
                await self._fail(error)
            # else: no Registry read yet (a mount event came first); its source will emit it shortly
            return None, error
        if newer_input_pending(self._queue):
            return None, None  # a newer Registry or API Secret waits in the queue: the next round renders it
        if self.gc is not None:
            self.gc.arm_deadline(self._queue)
        forced = self.retries.take_forced()
        refused = self.retries.refused
        if refused is not None and refused[0] == rendered.identity and self.applier.current is not None \
                and not forced:
            # Already refused by the registry: tried again on the backoff timer and on every resync, at once when
            # an input changes (a new render), not on every unrelated event.
            await self._fail(refused[1])
            return None, error
        return rendered, error

    async def _apply_step(self, rendered: Rendered) -> Outcome:
        """Put `rendered` into service (in a worker thread: writes, pre-flight, the restart)."""
        turn = self.turn if self.renderer.replicas > 1 else None  # one replica: nobody to wait for, nowhere to go
        outcome = await asyncio.to_thread(self.applier.apply, rendered, turn)
        for warning in outcome.warnings:
            log.warning("pre-flight warning", extra={"fields": {"config_hash": rendered.identity,
                                                                "reason": warning.reason, "warning": warning.message}})
            await self.reporter.event(warning.reason, warning.message, warning=True)
        if outcome.ok and self.api_secrets is not None:
            self.api_secrets.settled(changed=outcome.action != "unchanged")
        if outcome.ok:
            # self.registry does not move during a round (only the loop absorbs Changes): this is the
            # generation just rendered, and the registry now serves its render.
            self.served_generation = self.generation
            if self.gc is not None:
                self.gc.served(self.registry, rendered.config)
        return outcome

    async def _report_step(self, rendered: Rendered, outcome: Outcome, fields: dict, error: str | None) -> None:
        """Log, count and report the outcome; schedule the retry of one that failed."""
        if outcome.action == "unchanged":
            self.retries.succeeded()
            await self._settle(error)
            return
        if outcome.ok:
            self.retries.succeeded()
            if outcome.action in ("written", "restarted"):
                self.health.set_serving(True)  # just seen answering on it (the registry watch keeps checking)
            self._log_success(outcome, fields)
            self._mark_written(rendered)
            await self._settle(error)
            return
        if outcome.action == "pending":
            await self.book.waiting_for_registry(outcome.detail, fields)
            self.retries.schedule(PENDING_RETRY_SECONDS)
            return
        await self._report_failure(rendered, outcome, fields)

    async def _report_failure(self, rendered: Rendered, outcome: Outcome, fields: dict) -> None:
        show_current(self.applier.current)  # config_info names what is verified serving, or nothing
        failed = outcome.failed_hash or rendered.identity
        message = f"config {failed[:12]} not applied: {outcome.detail}"
        if self.applier.current is None and outcome.detail != STOPPED:
            self.health.set_serving(False, message)  # nothing verified serves: /readyz says so now
        if outcome.action == "preflight-failed":
            metrics.reload_failures_total.labels(reason="preflight").inc()
        elif outcome.detail != STOPPED:
            metrics.reload_failures_total.labels(reason="restart").inc()
            if failed == rendered.identity:
                self.retries.refused = (rendered.identity, message)
        if outcome.action == "rolled-back":
            message = await self._report_rollback(outcome, fields, failed, message)
        # Retried on a backoff (doubling to MAX_BACKOFF_SECONDS) and on every resync; a new input retries at once.
        self.retries.back_off()
        await self._fail(message)

    async def _report_rollback(self, outcome: Outcome, fields: dict, failed: str, message: str) -> str:
        """The rollback's log line and Event; the status message when it failed too, else `message`."""
        metrics.rollbacks_total.inc()
        back = outcome.rollback
        restored = outcome.restored_hash
        fields.update(action="rolled back",  # the log's name for it, as in the message (Outcome: rolled-back)
                      failed_hash=failed, restored_hash=restored, rollback_ok=bool(back and back.ok),
                      new_pid=back.new.pid if back and back.new else None)
        log.error("rolled back", extra={"fields": {**fields, "error": outcome.detail}})
        if back is not None and back.ok:
            await self.reporter.event("RolledBack", f"config {failed[:12]} did not come up: {outcome.detail}; "
                                      f"restored the last good config {restored[:12]}, serving again",
                                      warning=True)
            return message
        why = back.detail if back is not None else "not restarted"
        message = (f"config {failed[:12]} did not come up ({outcome.detail}), and the last good config "
                   f"{restored[:12]} written back did not come up either: {why}")
        await self.reporter.event("RollbackFailed", message, warning=True)
        return message

    async def _internal_error(self, exc: Exception) -> None:
        """Log where it happened, not the message (it could quote file contents), report, and retry later."""
        metrics.reload_failures_total.labels(reason="internal").inc()
        self.retries.schedule()
        await self._fail(f"{describe_internal_error(exc)}; retrying in {self.settings.retry_seconds:g}s")

    def _log_success(self, outcome: Outcome, fields: dict) -> None:
        if outcome.action in ("htpasswd", "outbox"):
            if outcome.action == "htpasswd":
                metrics.htpasswd_updates_total.inc()
            log.info("written", extra={"fields": {**fields, "files": outcome.changed_files, "restart": False}})
        elif outcome.action == "written":
            log.info("written", extra={"fields": {**fields, "files": ["config.yml"], "first": True}})
        elif outcome.action == "restarted" and outcome.restart is not None:
            metrics.reloads_total.inc()
            metrics.last_reload_success_timestamp_seconds.set(time.time())
            result = outcome.restart
            if "lease_wait" in outcome.timings:
                metrics.reload_lease_wait_seconds.observe(outcome.timings["lease_wait"])
            if result.no_listener_seconds is not None:
                metrics.last_reload_no_listener_seconds.set(result.no_listener_seconds)
                metrics.reload_no_listener_seconds.observe(result.no_listener_seconds)
            log.info("restarted", extra={"fields": {
                **fields, "old_pids": [p.pid for p in result.old], "new_pid": result.new.pid if result.new else None,
                "restart_seconds": round(result.seconds, 3), "restart_at": round(result.started_at, 4),
                "handed_over": result.handed_over,
                "listener_close_seconds": result.listener_close_seconds,
                "no_listener_seconds": result.no_listener_seconds,
                "lease_wait_seconds": outcome.timings.get("lease_wait", 0.0),
                "drain_wait_seconds": outcome.timings.get("drain_wait", 0.0)}})

    def _mark_written(self, rendered: Rendered) -> None:
        show_current(self.applier.current)
        self.health.mark_config_written()

    async def watch_problem(self, reason: str, problem: str | None) -> None:
        """From the registry watch: a missing supervisor or a crash loop (None: it ended). Status and an Event."""
        if await self.book.watch_problem(reason, problem, self.generation, self.applier.current):
            await self._settle(self.registry_error)

    async def watch_event(self, reason: str, message: str) -> None:
        """From the registry watch: something that is over already (a supervisor restarted between two looks).
        A Warning Event only: status has nothing left to say."""
        await self.reporter.event(reason, message, warning=True)

    async def _settle(self, error: str | None) -> None:
        await self.book.settle(error, self.generation, self.applier.current, self.served_generation)

    async def _fail(self, error: str, *, event: bool = True) -> None:
        await self.book.fail(error, self.generation, self.applier.current, event=event)


__all__ = ["Pipeline", "PipelineSettings", "listen_on", "pods_of"]
