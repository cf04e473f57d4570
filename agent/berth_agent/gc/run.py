"""The GC runner (docs/design.md §4.5): the I/O around decide.py's decisions.

Every agent that sees a standing, unfinished request tries the Registry's `<registry>-gc` Lease every ~2 s
(jittered). The holder is the runner: it writes `active` (SwitchingReadOnly), renews the Lease every 5 s,
waits until every replica acknowledged read-only (polling the Registry: only during a run), then runs
`registry garbage-collect` in the registry container through the supervisor (GcCommand, gc-sup), measures
the bytes freed on filesystem storage, and writes `lastRun` and `active: null` in one status patch, which
returns every replica to writable. A runner that cannot renew the Lease until it would expire stops the
command and records nothing (another agent takes over). A taker that finds a run taken with no result (its
runner died; or this pod's agent restarted) stops an orphaned command in this pod and records `Interrupted`.

Blocking: one attempt runs in a worker thread; events go back to the loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from berth_api.timestamps import format_time

from ..core import metrics
from ..kube.api import describe_api_error
from ..kube.lease import LeaseError, ReloadLease
from . import report as gc_report
from .api import LEASE_SECONDS, RENEW_SECONDS, GcStatusApi, LeaseKeeper
from .cache import CachePurgeError, purge_blob_descriptors, uses_redis_cache
from .decide import (
    Interrupt,
    Refuse,
    Run,
    acknowledgements,
    interrupted_run,
    last_run,
    measures_bytes,
    next_step,
    result_of,
    time_bound,
)
from .mode import read_only_for

log = logging.getLogger(__name__)

TRY_SECONDS = 2.0  # how often a standing request's Lease is tried (jittered)
ACK_POLL_SECONDS = 0.5
IDLE_SECONDS = 30.0  # with no request standing
RECORD_ATTEMPTS = 5  # the final status patch: what returns every replica to writable


class GcCommandLike(Protocol):  # berth_agent.gc.command.GcCommand (gc-sup)
    def run(self, run_id: str, *, dry_run: bool, delete_untagged: bool, stop: threading.Event,
            timeout_seconds: float) -> Any: ...

    def stop_orphan(self, timeout: float = 15.0) -> str | None: ...


def nothing_stored(data_dir: Path) -> bool:
    """A filesystem store nothing was ever pushed to: no repositories or no blobs directory under it."""
    root = Path(data_dir) / gc_report.BLOBS_DIR.parent
    return not (root / "repositories").is_dir() or not (root / "blobs").is_dir()


def _describe(exc: BaseException) -> str:
    """GcCommandError messages are ours and secret-free; anything else is described by type and status only."""
    if type(exc).__module__.endswith(".gc_command"):
        return str(exc)
    return describe_api_error(exc)


@dataclass(frozen=True)
class GcPace:
    """How often the runner tries a standing request, polls the acknowledgements and renews its Lease."""

    try_seconds: float = TRY_SECONDS
    ack_poll_seconds: float = ACK_POLL_SECONDS
    renew_seconds: float = RENEW_SECONDS


class GcRunner:
    """A source-like loop (`name`, `run(emit)`): it emits nothing; the pipeline hands it every Registry read."""

    name = "gc-runner"

    def __init__(self, status: GcStatusApi, lease: ReloadLease, command: GcCommandLike, reporter: Any, pod: str,
                 data_dir: Path, config_path: Path, *, try_seconds: float = TRY_SECONDS,
                 ack_poll_seconds: float = ACK_POLL_SECONDS, renew_seconds: float = RENEW_SECONDS,
                 wall: Callable[[], float] = time.time,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.status, self.lease, self.command, self.reporter = status, lease, command, reporter
        self.pod, self.data_dir = pod, data_dir  # the data path: bytes freed on filesystem storage
        self.config_path = config_path  # the rendered config: its redis cache is cleared after a run
        self.pace = GcPace(try_seconds, ack_poll_seconds, renew_seconds)
        self.wall = wall
        self.registry: dict | None = None  # the latest Registry object read
        self.stopping = threading.Event()  # the agent stops: a running command is stopped, the run recorded
        self._wake: asyncio.Event | None = None
        self._loop = loop  # where the reporter's Events run (run() sets it)
        self._unrecorded: dict | None = None  # a result whose status patch failed: written again first
        self._run_stop: threading.Event | None = None  # the running command's stop

    def offer(self, registry: dict) -> None:
        """A Registry read (called on the event loop)."""
        self.registry = registry
        if self._wake is not None:
            self._wake.set()

    async def run(self, emit: Any = None) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        try:
            while True:
                self._wake.clear()
                standing = read_only_for(self.registry, self.wall()) is not None or self._unrecorded is not None
                if standing:
                    await asyncio.shield(asyncio.to_thread(self.attempt))
                    timeout = self.pace.try_seconds * random.uniform(0.5, 1.5)
                else:
                    timeout = IDLE_SECONDS  # the next Registry read wakes it; this bounds a missed one
                try:
                    async with asyncio.timeout(timeout):  # not wait_for: see sources/mount_watch.py
                        await self._wake.wait()
                except TimeoutError:
                    pass
        finally:
            self.stop()

    def stop(self) -> None:
        """The agent stops: so does a running command (its run recorded Interrupted)."""
        self.stopping.set()
        if self._run_stop is not None:
            self._run_stop.set()

    # ---- one attempt, in a worker thread ------------------------------------------------------------------

    def attempt(self) -> None:
        try:
            taken, _holder = self.lease.try_acquire(LEASE_SECONDS)
        except LeaseError as exc:
            log.warning("cannot read the gc lease", extra={"fields": {"lease": self.lease.name, "error": exc.args[0]}})
            return
        if not taken:
            return
        lost = False
        try:
            if self._unrecorded is not None:
                self._record(self._unrecorded)
                return
            registry = self.status.read()
            step = next_step(registry, self.wall())
            if isinstance(step, Interrupt):
                self._interrupted(step)
            elif isinstance(step, Refuse):
                self._refused(step)
            elif isinstance(step, Run):
                lost = self._run(step, registry)
        except Exception as exc:  # noqa: BLE001 - an API failure: tried again on the next attempt
            log.warning("gc attempt failed", extra={"fields": {"error": _describe(exc)}})
        finally:
            if not lost:
                try:
                    self.lease.release()
                except LeaseError as exc:  # it expires by itself
                    log.warning("cannot release the gc lease", extra={"fields": {"error": exc.args[0]}})

    def _run(self, step: Run, registry: dict) -> bool:
        """The run itself; True when the Lease was lost (nothing recorded)."""
        hold = step.hold
        started_wall = self.wall()
        started_at = format_time(started_wall)
        bound = time_bound(started_wall, hold)
        stop = self._run_stop = threading.Event()
        if self.stopping.is_set():
            return False
        keeper = LeaseKeeper(self.lease, stop, renew_seconds=self.pace.renew_seconds)
        keeper.start()
        try:
            self.status.patch({"active": {"id": hold.request_id, "runner": self.pod, "startedAt": started_at,
                                          "phase": "SwitchingReadOnly"}})
            acks = self._wait_for_acks(hold, stop, bound)
            if keeper.lost.is_set():
                return True
            if acks is None:
                return False  # the request ended meanwhile (its result or its deadline): nothing to add
            if self.stopping.is_set():
                self._record(last_run(hold, result="Interrupted", started_at=started_at,
                                      finished_at=format_time(self.wall()), runner=self.pod,
                                      message=f"the agent in pod {self.pod} stopped before the run"))
                return False
            if not acks.complete:
                self._record(last_run(hold, result="TimedOut", started_at=started_at,
                                      finished_at=format_time(self.wall()),
                                      runner=self.pod, message=f"not every replica served read-only within the "
                                      f"bound: {acks.describe()}"))
                return False
            return self._collect(hold, registry, started_at, bound, stop, keeper, acks)
        finally:
            keeper.done.set()
            keeper.join(30)  # a renewal in flight must not take the Lease back after the release
            self._run_stop = None

    def _wait_for_acks(self, hold, stop: threading.Event, bound: float):
        """A4: poll the Registry until every replica acknowledged. None when the request ended meanwhile."""
        acks = None
        while not stop.is_set() and not self.stopping.is_set():
            try:
                registry = self.status.read()
            except Exception as exc:  # noqa: BLE001 - the API may blink; the bound still applies
                log.warning("cannot read the Registry", extra={"fields": {"error": describe_api_error(exc)}})
            else:
                current = read_only_for(registry, self.wall())
                if current is None or current.request_id != hold.request_id:
                    return None
                acks = acknowledgements(registry, hold.request_id)
                if acks.complete:
                    return acks
            if self.wall() >= bound:
                break
            stop.wait(self.pace.ack_poll_seconds)
        return acks or acknowledgements(None, hold.request_id)

    def _collect(self, hold, registry: dict, started_at: str, bound: float, stop: threading.Event,
                 keeper: LeaseKeeper, acks) -> bool:
        self.status.patch({"active": {"phase": "Collecting"}})
        flags = [name for name, on in (("dry run", hold.dry_run), ("delete untagged", hold.delete_untagged)) if on]
        self._event("GarbageCollectionStarted", f"garbage collection {hold.request_id} started in pod {self.pod}"
                    + (f" ({', '.join(flags)})" if flags else "") + f"; read-only: {', '.join(acks.acked)}")
        log.info("gc started", extra={"fields": {"request_id": hold.request_id, "runner": self.pod,
                                                 "dry_run": hold.dry_run, "delete_untagged": hold.delete_untagged}})
        measure = measures_bytes(registry, hold.dry_run)
        before = gc_report.blob_bytes(self.data_dir) if measure else None
        if measures_bytes(registry, False) and nothing_stored(self.data_dir):
            # Both majors fail on a store never pushed to ("Path not found: .../repositories"): a new registry
            # with a schedule would report Failed until its first push. There is nothing to collect.
            report = gc_report.GcReport(dry_run=hold.dry_run, succeeded=True, blobs_marked=0, manifests_marked=0,
                                        blobs_deleted=0, manifests_deleted=0)
            result, message, seconds = "Succeeded", gc_report.NOTHING_TO_COLLECT, None
        else:
            ran = self._execute(hold, stop, bound, keeper)
            if ran is None:
                return True  # the Lease was lost: the taker records
            result, message, report, seconds = ran
        try:
            self.status.patch({"active": {"phase": "Recording"}})
        except Exception as exc:  # noqa: BLE001 - the result matters more than the phase
            log.warning("cannot write the gc phase", extra={"fields": {"error": describe_api_error(exc)}})
        if not hold.dry_run and report is not None:
            purged, problem = self._purge_cache()
            if problem is not None:  # a cached descriptor of a deleted blob would make pushes skip that layer
                result, message = "Failed", f"{message}; but {problem}"
        freed = None
        if before is not None:
            freed = gc_report.bytes_freed(before, gc_report.blob_bytes(self.data_dir))
        elif registry is not None and hold.dry_run and measures_bytes(registry, False):
            freed = 0
        record = last_run(hold, result=result, started_at=started_at, finished_at=format_time(self.wall()),
                          runner=self.pod, report=report, bytes_freed=freed, message=message)
        self._record(record)
        self._count(record, seconds)
        return False

    def _execute(self, hold, stop: threading.Event, bound: float, keeper: LeaseKeeper):
        """Run the command: (result, message, report, seconds), or None when the Lease was lost meanwhile."""
        try:
            # With the Lease held, a command running in this pod is nobody's: an earlier agent process's.
            if (orphan := self.command.stop_orphan()) is not None:
                log.warning("gc orphan stopped", extra={"fields": {"request_id": orphan}})
            outcome = self.command.run(hold.request_id, dry_run=hold.dry_run, delete_untagged=hold.delete_untagged,
                                       stop=stop, timeout_seconds=max(1.0, bound - self.wall()))
        except Exception as exc:  # noqa: BLE001 - GcCommandError: no supervisor, an old one, a refused request
            return "Failed", f"cannot run registry garbage-collect: {_describe(exc)}", None, None
        if keeper.lost.is_set():
            return None
        metrics.gc_duration_seconds.observe(outcome.seconds)
        result, message = result_of(outcome, stopped_by_agent=self.stopping.is_set(), pod=self.pod)
        return result, message, outcome.report, outcome.seconds

    def _purge_cache(self) -> tuple[int, str | None]:
        """With a redis blob descriptor cache, forget the descriptors (cache.py): (keys deleted, problem)."""
        try:
            config = yaml.safe_load(self.config_path.read_bytes()) or {}
        except (OSError, yaml.YAMLError) as exc:
            return 0, f"the rendered config could not be read to clear the blob descriptor cache ({type(exc).__name__})"
        if not isinstance(config, dict) or not uses_redis_cache(config):
            return 0, None
        try:
            purged = purge_blob_descriptors(config)
        except CachePurgeError as exc:
            log.error("gc cache not cleared", extra={"fields": {"error": str(exc)}})
            return 0, str(exc)
        log.info("gc cache cleared", extra={"fields": {"keys_deleted": purged}})
        return purged, None

    def _interrupted(self, step: Interrupt) -> None:
        orphan = self.command.stop_orphan()
        record = interrupted_run(step, format_time(self.wall()), self.pod)
        log.warning("gc interrupted", extra={"fields": {"request_id": step.hold.request_id, "runner": step.runner,
                                                        "orphan_stopped": orphan}})
        self._record(record)
        metrics.gc_runs_total.labels(result="Interrupted").inc()
        self._event("GarbageCollectionInterrupted", f"garbage collection {step.hold.request_id}: {record['message']}; "
                    f"recorded by pod {self.pod}, the registry returns to writable", warning=True)

    def _refused(self, step: Refuse) -> None:
        now = format_time(self.wall())
        record = last_run(step.hold, result="Failed", started_at=now, finished_at=now, runner=self.pod,
                          message=f"not run: {step.reason}")
        self._record(record)
        self._count(record, None)

    def _record(self, record: dict) -> None:
        """lastRun and active: null in one patch, retried: this write returns every replica to writable."""
        for attempt in range(RECORD_ATTEMPTS):
            try:
                self.status.patch({"lastRun": record, "active": None})
                self._unrecorded = None
                return
            except Exception as exc:  # noqa: BLE001
                log.warning("cannot record the gc result", extra={"fields": {"error": describe_api_error(exc),
                                                                             "attempt": attempt + 1}})
                time.sleep(min(2.0 ** attempt * 0.2, 2.0))
        self._unrecorded = record  # the next attempt (with the Lease) writes it again

    def _count(self, record: dict, seconds: float | None) -> None:
        metrics.gc_runs_total.labels(result=record["result"]).inc()
        if not record["dryRun"]:
            metrics.gc_blobs_deleted_total.inc(record.get("blobsDeleted") or 0)
            metrics.gc_manifests_deleted_total.inc(record.get("manifestsDeleted") or 0)
            metrics.gc_bytes_freed_total.inc(record.get("bytesFreed") or 0)
        log.info("gc finished", extra={"fields": {
            "request_id": record["id"], "result": record["result"],
            "seconds": round(seconds, 3) if seconds is not None else None,
            "blobs_deleted": record.get("blobsDeleted"), "manifests_deleted": record.get("manifestsDeleted"),
            "bytes_freed": record.get("bytesFreed"), "message": record["message"]}})

    def _event(self, reason: str, message: str, *, warning: bool = False) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.reporter.event(reason, message, warning=warning),
                                             self._loop).result(15)
        except Exception as exc:  # noqa: BLE001 - an Event is worth less than the run
            log.warning("cannot post a gc event", extra={"fields": {"reason": reason, "error": type(exc).__name__}})


__all__ = ["GcRunner"]
