"""The GC runner's decisions, pure (docs/design.md §4.5): what to do with the Lease taken, whether
every replica acknowledged, the command's time bound, and the lastRun record. run.py does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from berth_api import GC_PROXY_MESSAGE, GC_STORAGE_MESSAGE
from berth_api.gc import GarbageCollectionRun, gc_status
from berth_api.timestamps import parse_epoch

from .mode import GcHold, read_only_for

# The command is stopped this long before the request's deadline, so the result is recorded (and every
# replica returns to writable) before the operator would record Interrupted.
DEADLINE_MARGIN_SECONDS = 60.0


@dataclass(frozen=True)
class Run:
    hold: GcHold


@dataclass(frozen=True)
class Interrupt:
    """A run was taken (active.id is the request's) and no result came: its runner is gone (A7)."""
    hold: GcHold
    runner: str | None
    started_at: str | None


@dataclass(frozen=True)
class Refuse:
    """The request cannot run on this Registry's storage: recorded Failed at once, no command started. The
    operator never asks for it (and the CRD refuses garbageCollection there); a request written by hand or by
    an older operator must not report an in-memory store it never saw as empty."""
    hold: GcHold
    reason: str


def next_step(registry: dict | None, now_wall: float) -> Run | Interrupt | Refuse | None:
    """With the Lease just taken, on a fresh read of the Registry: run the request, record a dead run, refuse
    it, or nothing (no request stands, its deadline passed, or its result is in)."""
    hold = read_only_for(registry, now_wall)
    if hold is None:
        return None
    active = gc_status(registry).get("active")
    if isinstance(active, dict) and active.get("id") == hold.request_id:
        return Interrupt(hold, active.get("runner"), active.get("startedAt"))
    if _storage(registry).get("inmemory") is not None:
        return Refuse(hold, GC_STORAGE_MESSAGE)
    if (((registry or {}).get("spec") or {}).get("config") or {}).get("proxy") is not None:
        return Refuse(hold, GC_PROXY_MESSAGE)  # read-only does not stop a proxy from writing (design §4.6)
    return Run(hold)


def _storage(registry: dict | None) -> dict:
    storage = (((registry or {}).get("spec") or {}).get("config") or {}).get("storage") or {}
    return storage if isinstance(storage, dict) else {}


@dataclass(frozen=True)
class Acks:
    complete: bool
    acked: tuple[str, ...]
    missing: tuple[str, ...]  # pods whose record does not name the request
    needed: int  # at least status.replicas and status.readyReplicas, at least 1

    def describe(self) -> str:
        parts = [f"{len(self.acked)} of at least {self.needed} replicas serve read-only"]
        if self.missing:
            parts.append(f"waiting for {', '.join(self.missing)}")
        return "; ".join(parts)


def acknowledgements(registry: dict | None, request_id: str) -> Acks:
    """A4: every record in status.agents says readOnlyFor == id, and there are at least as many as the Registry
    has pods (status.replicas: the Deployment's, a roll's new pod included before it is ready) and ready pods, and
    at least one. The operator prunes the records of pods that are gone."""
    status = (registry or {}).get("status") or {}
    agents = status.get("agents") if isinstance(status.get("agents"), dict) else {}
    acked = tuple(sorted(pod for pod, record in agents.items()
                         if isinstance(record, dict) and record.get("readOnlyFor") == request_id))
    missing = tuple(sorted(pod for pod in agents if pod not in acked))
    counts = [status.get(key) for key in ("replicas", "readyReplicas")]
    needed = max([count for count in counts if isinstance(count, int)] + [1])
    return Acks(not missing and len(acked) >= needed, acked, missing, needed)


def time_bound(started_wall: float, hold: GcHold) -> float:
    """When the command must be stopped (wall clock): the read-only bound from the runner's start, or a minute
    before the request's deadline, whichever comes first."""
    return min(started_wall + hold.read_only_timeout, hold.deadline - DEADLINE_MARGIN_SECONDS)


def measures_bytes(registry: dict | None, dry_run: bool) -> bool:
    """bytesFreed is measured on filesystem storage only (the data path is the PVC); a dry run frees 0."""
    return _storage(registry).get("filesystem") is not None and not dry_run


def result_of(outcome: Any, *, stopped_by_agent: bool, pod: str) -> tuple[str, str]:
    """(result, message) of a GcCommand.run outcome."""
    if outcome.timed_out:
        return "TimedOut", ("stopped at the read-only bound" + (f": {outcome.error}" if outcome.error else ""))
    if outcome.stopped:
        why = f"the agent in pod {pod} stopped during the run" if stopped_by_agent else "the run was stopped"
        return "Interrupted", why
    if outcome.exit_status == 0 and outcome.report is not None and outcome.error is None:
        return "Succeeded", outcome.report.summary()
    if outcome.report is not None and outcome.report.empty_store:  # exit 1 on a store never pushed to
        return "Succeeded", outcome.report.summary()
    return "Failed", outcome.error or f"registry garbage-collect exited with status {outcome.exit_status}"


def last_run(hold: GcHold, *, result: str, started_at: str | None, finished_at: str, runner: str | None,
             report: Any = None, bytes_freed: int | None = None, message: str = "") -> dict[str, Any]:
    """status.garbageCollection.lastRun; every count key present (null when unknown), so nothing of the
    previous run survives the merge patch."""
    counts = report.counts() if report is not None else {}
    return GarbageCollectionRun(
        id=hold.request_id, trigger=hold.trigger, dry_run=hold.dry_run, delete_untagged=hold.delete_untagged,
        result=result, started_at=started_at, finished_at=finished_at, runner=runner, **counts,
        bytes_freed=bytes_freed, message=message[:4096]).status()


def interrupted_run(step: Interrupt, finished_at: str, taker: str) -> dict[str, Any]:
    """A7: the record a Lease taker writes for a run whose runner is gone."""
    who = step.runner or "unknown"
    message = f"the runner in pod {who} stopped"
    if step.runner == taker:
        message += " (its agent restarted)"
    started = step.started_at if parse_epoch(step.started_at) is not None else None
    return last_run(step.hold, result="Interrupted", started_at=started, finished_at=finished_at,
                    runner=step.runner, message=message)


__all__ = ["Acks", "DEADLINE_MARGIN_SECONDS", "Interrupt", "Refuse", "Run", "acknowledgements",
           "interrupted_run", "last_run", "measures_bytes", "next_step", "result_of", "time_bound"]
