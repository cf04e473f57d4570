"""The agent pipeline: one asyncio task that turns Changes into an applied config (docs/design.md §4.2).

    Change queue -> debounce -> validate the Registry -> read mounts -> render -> (hash changed?) -> apply
    (pre-flight, write, restart, verify, roll back) -> report (log line, metrics, status/Event, health)

Debounce: a trailing quiet window with a maximum wait. A kubelet Secret swap is ~9 file events within a few
milliseconds (field-notes §4); a quiet window of 30 ms coalesces it, and the maximum wait (2 s, longer than a
burst of a second) keeps a stream of events from postponing the apply for ever.

Bad input never touches what runs: the last good config keeps serving, the error goes to status, metrics and
the log, and the next Change (or the periodic resync) re-renders, so fixing the input recovers by itself.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError

from berth_api import RegistrySpec, describe_validation_error
from berth_api.pod import INPUT_VOLUMES

from ..apply.applier import Applier, Outcome
from ..apply.turns import ReplicaTurn
from ..core import metrics
from ..core.clock import Clock, LoopClock
from ..core.errors import InputError, describe_internal_error
from ..core.health import Health
from ..core.write import local_http_secret
from ..gc.mode import with_read_only
from ..inputs.mounts import read_inputs
from ..render.config import Rendered, RenderPaths, render
from ..sources import Change
from ..sources.pvc import PvcProbe
from ..supervisor.probe import STOPPED
from .guard import BoundedThread, Overrun, inputs_fingerprint, newer_input_pending
from .report import Reporter

if TYPE_CHECKING:  # API mode only: local mode never loads the API sources
    from ..gc.read_only import GcReadOnly
    from ..sources.api_secrets import ApiSecrets

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0  # after a transient failure (a key not live yet, a registry that did not come up)
MAX_BACKOFF_SECONDS = 300.0  # the retry of a failed config doubles from RETRY_SECONDS up to this
PENDING_RETRY_SECONDS = 1.0  # the first config is written and no registry container has started yet
ROUND_BOUND_SECONDS = 300.0  # the longest an apply round may take (drain timeouts, a Lease wait) before /livez fails
# Changes that try a refused config again: the backoff timer, the periodic resync, the registry watch (a
# supervisor came back, the registry stopped serving).
FORCING_SOURCES = ("retry", "resync", "registry-watch")
# Reading bounded inputs and rendering takes milliseconds; 30 s means a read is stuck (a hung volume).
RENDER_TIMEOUT_SECONDS = 30.0
STALE_RENDERS = 3  # renders overtaken by a newer input before the round gives up and retries later


@dataclass
class PipelineSettings:
    config_dir: Path = Path("/etc/berth")
    data_dir: Path = Path("/var/lib/registry")
    mount_root: Path = Path("/var/run/berth")
    distribution: str | None = None  # "2" or "3"; default: the spec's (from its image)
    quiet_seconds: float = 0.03
    max_wait_seconds: float = 2.0
    restart_timeout: float | None = None  # default: the drain timeout + 10 s
    retry_seconds: float = RETRY_SECONDS
    preflight: bool = True
    render_timeout: float = RENDER_TIMEOUT_SECONDS
    state_dir: Path | None = None  # berth-supervise's BERTH_STATE_DIR (default: the config dir)
    resync_seconds: float = 60.0  # the mount watcher's resync: the pipeline hears from it at least this often
    listen_host: str | None = None  # replaces the host of http.addr (several local pods on one machine)


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
        self.clock = clock or LoopClock()  # the debounce's time (a test steps it)
        self.reporter = reporter
        self.health = health
        self.pvc = pvc  # the data path probe: only filesystem storage has a data path to check
        self.api_secrets = api_secrets  # API mode: copies of the mounted Secrets read over the API
        self.applier = applier or applier_for(settings, health)
        self.bounded = BoundedThread(health, settings.render_timeout)  # the render step's time bound
        # With siblings (spec.replicas > 1, API mode) a restart waits for this pod's turn, out of the Service.
        self.turn = turn
        self.replicas = 1  # pods that take turns: spec.replicas, or more while a roll's new pod runs beside the old
        self.registry: dict | None = None  # the latest Registry object read (unvalidated)
        self.registry_error: str | None = None  # why the latest read of the Registry failed
        self.reported_error: str | None = None
        self.registry_problem: str | None = None  # from the registry watch: no supervisor, a crash loop
        self._problem_reason: str | None = None  # the Event reason last sent for it
        self.reported_hash: str | None = None  # the config the last ConfigApplied Event named
        # The generation whose render the registry serves (applier.current): set when a round's render is seen
        # served, whether that took a restart or none (a spec field the agent does not render, an edit back).
        self.served_generation: int | None = None
        # (config hash, generation) of the last applied record the API accepted: status.agents.<pod> says it.
        self.reported_record: tuple[str, int | None] | None = None
        self._record_written = True  # the latest status write (applied or failed) reached the API
        # A render the registry refused (its identity) and why: tried again on the backoff and every resync.
        self.refused: tuple[str, str] | None = None
        self.backoff = settings.retry_seconds  # the next retry of a failed config; reset by a success
        self._pending_reported = False  # "waiting for the registry container" is on status
        self._forced = False  # this round was asked for by a retry, a resync or the registry watch
        self.applies = 0  # apply rounds run (tests and benchmarks count them)
        self.gc = gc  # garbage collection's read-only window (API mode, docs/design.md §4.5; gc/read_only.py)
        self._retry: asyncio.TimerHandle | None = None
        self._queue: asyncio.Queue[Change] | None = None

    # ---- the loop -------------------------------------------------------------------------------------------

    async def run(self, queue: asyncio.Queue[Change]) -> None:
        self._queue = queue
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
                    await self._debounce(queue)
                try:
                    await self.apply_once()
                except Exception as exc:  # noqa: BLE001  a bug or an I/O failure (disk full) must not end the loop
                    await self._internal_error(exc)
        finally:
            self.applier.stopping.set()  # a worker thread still verifying a restart gives up
            self.health.unregister("pipeline")
            if self._retry is not None:
                self._retry.cancel()
            if self.gc is not None:
                self.gc.close()

    async def _debounce(self, queue: asyncio.Queue[Change]) -> None:
        clock = self.clock
        deadline = clock.now() + self.settings.max_wait_seconds
        while True:
            wait = min(self.settings.quiet_seconds, deadline - clock.now())
            if wait <= 0:
                return
            try:
                async with clock.timeout(wait):
                    change = await queue.get()
            except TimeoutError:
                return
            self._absorb(change)

    def _absorb(self, change: Change) -> None:
        if change.source in FORCING_SOURCES:
            self._forced = True
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

    def _schedule_retry(self, delay: float | None = None) -> None:
        if self._queue is None or (self._retry is not None and not self._retry.cancelled()):
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._retry = None
            self._queue.put_nowait(Change("retry"))

        self._retry = loop.call_later(self.settings.retry_seconds if delay is None else delay, fire)

    # ---- one round ------------------------------------------------------------------------------------------

    @property
    def generation(self) -> int | None:
        value = ((self.registry or {}).get("metadata") or {}).get("generation")
        return value if isinstance(value, int) else None

    async def apply_once(self) -> None:
        """Render from the latest inputs and apply when the result differs from what runs; report the result."""
        if self.api_secrets is not None and (wait := self.api_secrets.start_wait()) > 0:
            # At start, the Secrets' API copies are due: a render now could restart onto a stale mount.
            self._schedule_retry(wait)
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
        rendered, error = await self._render_current()
        if rendered is None:
            if error:
                await self._fail(error)
            # else: no Registry read yet (a mount event came first); its source will emit it shortly
            return None, error
        if self.gc is not None:
            self.gc.arm_deadline(self._queue)
        forced, self._forced = self._forced, False
        if self.refused is not None and self.refused[0] == rendered.identity \
                and self.applier.current is not None and not forced:
            # Already refused by the registry: tried again on the backoff timer and on every resync, at once when
            # an input changes (a new render), not on every unrelated event.
            await self._fail(self.refused[1])
            return None, error
        return rendered, error

    async def _apply_step(self, rendered: Rendered) -> Outcome:
        """Put `rendered` into service (in a worker thread: writes, pre-flight, the restart)."""
        turn = self.turn if self.replicas > 1 else None  # one replica: nobody to wait for, nowhere to go
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
            self.refused, self.backoff = None, self.settings.retry_seconds
            await self._settle(error)
            return
        if outcome.ok:
            self.refused, self.backoff = None, self.settings.retry_seconds
            if outcome.action in ("written", "restarted"):
                self.health.set_serving(True)  # just seen answering on it (the registry watch keeps checking)
            self._log_success(outcome, fields)
            self._mark_written(rendered)
            await self._settle(error)
            return
        if outcome.action == "pending":
            if not self._pending_reported:  # status.agents.<pod>.waiting until a registry answers (applied clears it)
                self._pending_reported = True
                log.info("waiting for the registry container", extra={"fields": fields})
                await self.reporter.waiting(outcome.detail)
            self._schedule_retry(PENDING_RETRY_SECONDS)
            return
        await self._report_failure(rendered, outcome, fields)

    async def _report_failure(self, rendered: Rendered, outcome: Outcome, fields: dict) -> None:
        self._show_current()  # config_info names what is verified serving, or nothing
        failed = outcome.failed_hash or rendered.identity
        message = f"config {failed[:12]} not applied: {outcome.detail}"
        if self.applier.current is None and outcome.detail != STOPPED:
            self.health.set_serving(False, message)  # nothing verified serves: /readyz says so now
        if outcome.action == "preflight-failed":
            metrics.reload_failures_total.labels(reason="preflight").inc()
        elif outcome.detail != STOPPED:
            metrics.reload_failures_total.labels(reason="restart").inc()
            if failed == rendered.identity:
                self.refused = (rendered.identity, message)
        if outcome.action == "rolled-back":
            message = await self._report_rollback(outcome, fields, failed, message)
        # Retried on a backoff (doubling to MAX_BACKOFF) and on every resync; a new input retries at once.
        self._schedule_retry(self.backoff)
        self.backoff = min(self.backoff * 2, MAX_BACKOFF_SECONDS)
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
        self._schedule_retry()
        await self._fail(f"{describe_internal_error(exc)}; retrying in {self.settings.retry_seconds:g}s")

    async def _render_current(self) -> tuple[Rendered | None, str | None]:
        """Render within a time bound, and hand on only a render whose inputs did not move while it was made:
        one overtaken by a newer input is stale, made again (pipeline/guard.py), never applied."""
        for _ in range(STALE_RENDERS):
            outcome = await self.bounded.run(self._render_and_recheck)
            if isinstance(outcome, Overrun):
                return None, outcome
            rendered, error, moved = outcome
            if rendered is None:
                return None, error
            if not moved:
                if newer_input_pending(self._queue):
                    return None, None  # a newer Registry or API Secret waits in the queue: the next round renders it
                return rendered, error
            log.info("stale render discarded", extra={"fields": {"config_hash": rendered.identity}})
        self._schedule_retry()  # the inputs keep moving: look again in a moment
        return None, None

    def _render_and_recheck(self) -> tuple[Rendered | None, str | None, bool]:
        before = inputs_fingerprint(self.settings.mount_root)
        rendered, error = self._render()
        return rendered, error, rendered is not None and inputs_fingerprint(self.settings.mount_root) != before

    def _render(self) -> tuple[Rendered | None, str | None]:
        """(render, input error to report) or (None, error). Runs in a thread: it reads files."""
        if self.registry is None:
            return None, self.registry_error
        metrics.renders_total.inc()
        try:
            spec = RegistrySpec.model_validate(self.registry.get("spec"))
        except ValidationError as exc:
            metrics.render_errors_total.labels(source="registry").inc()
            # A newer file that could not be read at all is the problem to show, not the older object's.
            return None, self.registry_error or describe_validation_error(exc, "spec")
        self.replicas = max(spec.replicas, pods_of(self.registry))
        # Read-only while a GC request stands (A1): the same hot reload as an edit of the spec's readonly.
        if self.gc is not None and self.gc.hold_for(self.registry) is not None:
            spec = with_read_only(spec)
        filesystem = spec.config.storage.filesystem is not None
        if self.pvc is not None:
            # Object and in-memory storage have no data path: probing one would report a missing PVC.
            self.pvc.set_enabled(filesystem)
        if filesystem and self.pvc is not None:
            state = self.pvc.check()
            if state.error:
                metrics.render_errors_total.labels(source="pvc").inc()
                return None, state.error
        try:
            roots = self.api_secrets.overrides() if self.api_secrets is not None else None
            name = (self.registry.get("metadata") or {}).get("name")  # messages name the objects made for it
            inputs = read_inputs(spec, self.settings.mount_root, roots, registry=name)
            if inputs.http_secret is None and spec.http.secret is None:
                # Nothing mounted (outside Kubernetes): sign upload state with the agent's own kept secret, so
                # an upload survives a reload (field-notes §7).
                inputs = dataclasses.replace(inputs, http_secret=local_http_secret(self.settings.config_dir))
            rendered = render(spec, inputs, distribution=self.settings.distribution,
                              paths=RenderPaths(self.settings.config_dir, self.settings.data_dir), registry=name)
        except InputError as exc:
            metrics.render_errors_total.labels(source=_source_label(exc.source)).inc()
            return None, str(exc)
        if self.settings.listen_host:
            rendered = listen_on(rendered, self.settings.listen_host)
        # A Registry that could not be re-read: render from the last good one, but keep the error visible.
        return rendered, self.registry_error

    def _log_success(self, outcome: Outcome, fields: dict) -> None:
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
        self._show_current()
        self.health.mark_config_written()

    def _show_current(self) -> None:
        """config_info: the config a registry was seen answering on (none while nothing is verified)."""
        current = self.applier.current
        if current is None:
            metrics.config_info.clear()
        else:
            metrics.set_config_identity(current.identity)

    async def watch_problem(self, reason: str, problem: str | None) -> None:
        """From the registry watch: a missing supervisor or a crash loop (None: it ended). Status and an Event."""
        self.registry_problem = problem
        if problem is not None:
            log.error("registry problem", extra={"fields": {"reason": reason, "error": problem}})
            if reason != self._problem_reason:  # one Event per problem; its text (an exit count) moves on status
                await self.reporter.event(reason, problem, warning=True)
            self._problem_reason = reason
            await self._fail(problem, event=False)
        else:
            self._problem_reason = None
            await self._settle(self.registry_error)

    async def _settle(self, error: str | None) -> None:
        """Report the state after a round: the input error if any is left, else the applied config.

        The record names the config served and the newest generation whose render it is (docs/design.md §4.2,
        "What observedGeneration means"): written when either moved, so an edit that renders what already runs
        is reported at once; a write the API refused is tried again on a retry and on every later round."""
        error = error or self.registry_problem
        if error:
            await self._fail(error)
            return
        current = self.applier.current
        if current is None:
            return
        self._show_current()
        trust = current.trust
        served = (current.identity, self.served_generation, tuple(sorted(trust.items())))
        if self.reported_error is None and self.reported_record == served and self._record_written:
            return
        # trust only with token auth, so a reporter of before it needs no change
        written = await self.reporter.applied(*served[:2], **({"trust": trust} if trust else {}))
        if self.reported_error is not None:
            # The refused input (or the problem) is gone: say so where the `failed` line was, once.
            log.info("recovered", extra={"fields": {"action": "recovered", "config_hash": current.identity,
                                                    "generation": self.served_generation,
                                                    "cleared": self.reported_error}})
        if self.reported_hash is not None and self.reported_hash != current.identity:
            await self.reporter.event("ConfigApplied", f"registry runs config {current.identity[:12]}")
        self.reported_error, self.reported_hash = None, current.identity
        self.reported_record = served if written else None
        self._record_written = written
        if not written:
            self._schedule_retry()  # the status write was lost (the API refused it): report again shortly

    async def _fail(self, error: str, *, event: bool = True) -> None:
        if error == self.reported_error and self._record_written:
            return  # the same problem seen again (resync): already in status and the log
        if error != self.reported_error:
            log.error("failed", extra={"fields": {
                "action": "failed", "error": error,
                "config_hash": self.applier.current.identity if self.applier.current else None}})
        first = error != self.reported_error
        self.reported_error = error
        self._record_written = await self.reporter.failed(error, self.generation)
        if not self._record_written:
            self._schedule_retry()
        if event and first:
            await self.reporter.event("ConfigRejected", error, warning=True)


def pods_of(registry: dict | None) -> int:
    """The Registry's pods as its status counts them: the Deployment's (a roll's new pod beside the old one on a
    ReadWriteOnce claim, issue 39) or the agents that report, whichever is more. They take turns to reload."""
    status = (registry or {}).get("status") or {}
    replicas = status.get("replicas")
    agents = status.get("agents")
    return max(replicas if isinstance(replicas, int) else 0, len(agents) if isinstance(agents, dict) else 0)


def listen_on(rendered: Rendered, host: str) -> Rendered:
    """The same render with http.addr on `host` (its port kept): two local pods on two loopback addresses."""
    document = copy.deepcopy(rendered.document)
    port = rendered.listen_addr.rpartition(":")[2]
    document["http"]["addr"] = f"{host}:{port}"
    config = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, allow_unicode=False,
                            width=1000).encode()
    return dataclasses.replace(rendered, config=config, parsed=document)


def _source_label(source: str) -> str:
    """A bounded metrics label for an InputError source: the mount dir name, else 'spec'."""
    head = source.split("/", 1)[0].split(":", 1)[0]
    return head if head in INPUT_VOLUMES else "spec"


__all__ = ["Pipeline", "PipelineSettings"]
