"""What the operator does about garbage collection, decided from the Registry and the time. Pure: no API calls,
no clock (now is given).

The operator's half of the contract (docs/design.md §4.5):
- it asks for a run by writing status.garbageCollection.request, when the scheduled time (nextRun) has passed
  or the berth.dev/gc-requested-at annotation has a value it has not handled, and only when no run is pending;
- a schedule missed while the operator was down runs once (nextRun moves past now, never slot by slot);
- it clears the request once the runner has recorded lastRun with the request's id;
- a request whose deadline passed with no result is recorded as lastRun Interrupted (the runner died);
- it keeps nextRun current and says when it must look again (wake_at: nextRun or the request's deadline).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from berth_api import GC_REQUEST_ANNOTATION, GarbageCollection, GarbageCollectionRequest, GarbageCollectionRun, cron
from berth_api.gc import parse_gc_duration
from berth_api.timestamps import format_time, parse_time

# Time the runner has, beyond the read-only window, to take the Lease before it starts and to record the
# result after the registry is writable again. Past requestedAt + readOnlyTimeout + this, the run is dead.
DEADLINE_GRACE = datetime.timedelta(minutes=2)
RESULT_MESSAGE_LIMIT = 4096


@dataclass(frozen=True)
class GcEvent:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass
class GcDecision:
    """status_patch: keys of status.garbageCollection to merge-patch (None: write nothing); pending: the request
    that stands after this decision (for the Progressing condition); wake_at: when to decide again."""

    status_patch: dict[str, Any] | None = None
    events: list[GcEvent] = field(default_factory=list)
    pending: GarbageCollectionRequest | None = None
    wake_at: datetime.datetime | None = None

    @property
    def records_result(self) -> bool:
        """The patch writes lastRun (Interrupted, the operator's only result): it must be written only over the
        status it was decided from (a resourceVersion-guarded patch), or it could overwrite a result the runner
        recorded meanwhile, at the deadline. On a conflict the caller reads again and decides again."""
        return self.status_patch is not None and "lastRun" in self.status_patch


def request_id(now: datetime.datetime, trigger: str, taken: set[str]) -> str:
    base = f"{now.astimezone(datetime.UTC):%Y%m%dT%H%M%SZ}-{trigger}"
    candidate, suffix = base, 2
    while candidate in taken:
        candidate, suffix = f"{base}-{suffix}", suffix + 1
    return candidate


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _counts_message(run: Mapping[str, Any]) -> str:
    parts = [f"{run.get(key)} {label}" for key, label in (
        ("blobsDeleted", "blobs deleted"), ("manifestsDeleted", "manifests deleted"), ("bytesFreed", "bytes freed"),
    ) if isinstance(run.get(key), int)]
    return ", ".join(parts)


def _finished_event(run: Mapping[str, Any]) -> GcEvent:
    result = run.get("result")
    dry = " (dry run)" if run.get("dryRun") else ""
    detail = "; ".join(p for p in (_counts_message(run), str(run.get("message") or "")) if p)
    message = f"garbage collection {run.get('id')}{dry} {str(result).lower()}" + (f": {detail}" if detail else "")
    return GcEvent("Normal" if result == "Succeeded" else "Warning", f"GarbageCollection{result}",
                   message[:RESULT_MESSAGE_LIMIT])


@dataclass
class Draft:
    """What decide()'s steps collect: keys of status.garbageCollection to merge-patch, and Events to post."""

    patch: dict[str, Any] = field(default_factory=dict)
    events: list[GcEvent] = field(default_factory=list)


def decide(
    spec: GarbageCollection | None,
    *,
    annotations: Mapping[str, Any] | None,
    live: Any,
    now: datetime.datetime,
    spec_valid: bool = True,
    uncollectable: str | None = None,
) -> GcDecision:
    """live: status.garbageCollection as stored (not validated: anything may be there). spec_valid False: the
    spec did not validate; requests and deadlines are still handled, nothing new is started and the schedule
    is left as it is. uncollectable: why this Registry's storage cannot be collected (in-memory); the run-now
    annotation is then refused with that reason (a schedule cannot be set: the spec would not validate)."""
    live = _mapping(live)
    gc = spec or GarbageCollection()
    draft = Draft()
    pending = settle_request(live, now, draft)
    next_run, schedule_due = advance_schedule(gc.schedule, live, now, draft) if spec_valid else (None, False)
    asked = (annotations or {}).get(GC_REQUEST_ANNOTATION)
    manual_due = spec_valid and pending is None and take_run_now(asked, live, uncollectable, draft)
    if manual_due or schedule_due:
        if pending is not None:
            draft.events.append(GcEvent("Normal", "GarbageCollectionSkipped",
                                        f"the scheduled run was skipped: run {pending.id} has not finished"))
        else:
            pending = new_request(gc, "manual" if manual_due else "schedule", live, now, draft)
    return GcDecision(status_patch=draft.patch or None, events=draft.events, pending=pending,
                      wake_at=wake_at(next_run, pending, now))


def settle_request(live: Mapping[str, Any], now: datetime.datetime, draft: Draft) -> GarbageCollectionRequest | None:
    """Step 1, the standing request: what still stands of it. None once finished (the runner recorded its result),
    dead (its deadline passed with no result: recorded Interrupted) or malformed (dropped)."""
    raw_request = live.get("request")
    if raw_request is None:
        return None
    try:
        pending = GarbageCollectionRequest.model_validate(raw_request)
        deadline = parse_time(pending.deadline)
        if deadline is None:
            raise ValueError("deadline")
    except (ValidationError, ValueError):
        draft.patch["request"] = None
        draft.events.append(GcEvent("Warning", "GarbageCollectionInterrupted",
                                    "status.garbageCollection.request was malformed and is dropped"))
        return None
    last_run = _mapping(live.get("lastRun"))
    if last_run.get("id") == pending.id:
        draft.patch["request"] = None
        draft.events.append(_finished_event(last_run))
        return None
    if now >= deadline:
        interrupted = interrupted_run(pending, _mapping(live.get("active")), now)
        draft.patch.update(request=None, active=None, lastRun=interrupted)
        draft.events.append(_finished_event(interrupted))
        return None
    return pending


def interrupted_run(pending: GarbageCollectionRequest, active: Mapping[str, Any],
                    now: datetime.datetime) -> dict[str, Any]:
    """The lastRun recorded for a request whose deadline passed with no result: Interrupted, with the runner and
    start of `active` when the runner had taken this request."""
    taken = active.get("id") == pending.id
    started = active.get("startedAt") if taken else None
    runner = active.get("runner") if taken else None
    started = started if isinstance(started, str) else None  # the agents' words: strings, or none
    runner = runner if isinstance(runner, str) else None
    return GarbageCollectionRun(
        id=pending.id, trigger=pending.trigger, dry_run=pending.dry_run,
        delete_untagged=pending.delete_untagged, result="Interrupted", started_at=started,
        finished_at=format_time(now), runner=runner,
        message=(f"no result was recorded by the deadline {pending.deadline}: "
                 + (f"the runner in pod {runner} stopped" if runner else "no runner took the request")),
    ).status()


def advance_schedule(schedule: str | None, live: Mapping[str, Any], now: datetime.datetime,
                     draft: Draft) -> tuple[datetime.datetime | None, bool]:
    """Step 2, the schedule (of a valid spec): (nextRun, whether a run is due). Due once its time has passed,
    however long ago; no schedule clears schedule and nextRun."""
    if schedule is None:
        draft.patch.update({key: None for key in ("schedule", "nextRun") if live.get(key) is not None})
        return None, False
    parsed = cron.parse(schedule)
    next_run = parse_time(live.get("nextRun"))
    due = False
    if live.get("schedule") != schedule or next_run is None:
        next_run = parsed.next_after(now)  # a new schedule starts from now: nothing is due yet
    elif now >= next_run:
        due = True
        next_run = parsed.next_after(now)  # every slot missed meanwhile collapses into this one run
    if live.get("schedule") != schedule:
        draft.patch["schedule"] = schedule
    if live.get("nextRun") != format_time(next_run):
        draft.patch["nextRun"] = format_time(next_run)
    return next_run, due


def take_run_now(asked: Any, live: Mapping[str, Any], uncollectable: str | None, draft: Draft) -> bool:
    """Step 3, the run-now annotation (asked; called only when no run stands, so a value waits while one does):
    whether a run is due. A value not handled yet is taken once (handledRequest), and refused with a Warning
    when it is no timestamp or the storage cannot be collected."""
    if not isinstance(asked, str) or not asked or asked == live.get("handledRequest"):
        return False
    draft.patch["handledRequest"] = asked
    if parse_time(asked) is None:
        draft.events.append(GcEvent("Warning", "InvalidGarbageCollectionRequest",
                                    f"annotation {GC_REQUEST_ANNOTATION} must be an RFC 3339 timestamp "
                                    "(e.g. 2026-11-30T10:00:00Z); no run was started"))
        return False
    if uncollectable is not None:
        # A run would keep the registry read-only for nothing and report an empty store it never saw.
        draft.events.append(GcEvent("Warning", "InvalidGarbageCollectionRequest",
                                    f"annotation {GC_REQUEST_ANNOTATION}: no run was started: {uncollectable}"))
        return False
    return True


def new_request(gc: GarbageCollection, trigger: str, live: Mapping[str, Any], now: datetime.datetime,
                draft: Draft) -> GarbageCollectionRequest:
    """Step 4, a run is due and nothing stands: the request asking for it, with an id neither the last run nor
    the request just settled has."""
    timeout = parse_gc_duration(gc.read_only_timeout)
    taken = {str(x) for x in (_mapping(live.get("lastRun")).get("id"), _mapping(live.get("request")).get("id")) if x}
    pending = GarbageCollectionRequest.model_validate({
        "id": request_id(now, trigger, taken), "trigger": trigger, "requestedAt": format_time(now),
        "dryRun": gc.dry_run, "deleteUntagged": gc.delete_untagged, "readOnlyTimeout": gc.read_only_timeout,
        "deadline": format_time(now + timeout + DEADLINE_GRACE),
    })
    draft.patch["request"] = pending.model_dump(by_alias=True, mode="json")
    what = ", ".join(k for k, on in (("dry run", gc.dry_run), ("delete untagged", gc.delete_untagged)) if on)
    draft.events.append(GcEvent("Normal", "GarbageCollectionRequested",
                                f"garbage collection {pending.id} requested ({trigger}"
                                + (f", {what}" if what else "")
                                + f"); the registry turns read-only for at most {gc.read_only_timeout}"))
    return pending


def wake_at(next_run: datetime.datetime | None, pending: GarbageCollectionRequest | None,
            now: datetime.datetime) -> datetime.datetime | None:
    """When to decide again: the sooner of nextRun and the standing request's deadline, if still to come."""
    wakes = [next_run] if next_run is not None else []
    if pending is not None:
        deadline = parse_time(pending.deadline)
        if deadline is not None:
            wakes.append(deadline)
    # Only future instants: a past one would fire at once, forever.
    wakes = [moment for moment in wakes if moment > now]
    return min(wakes) if wakes else None


def progress_message(pending: GarbageCollectionRequest) -> str:
    """For the Progressing condition (reason GarbageCollecting)."""
    return (f"garbage collection {pending.id} ({pending.trigger}{', dry run' if pending.dry_run else ''}) "
            f"requested at {pending.requested_at}: the registry is read-only while it runs (deadline "
            f"{pending.deadline})")


def watch_digest(body: Mapping[str, Any]) -> str:
    """What, outside the spec, makes a GC decision due at once: the annotation, and the runner's records."""
    annotations = _mapping(_mapping(body.get("metadata")).get("annotations"))
    gc_status = _mapping(_mapping(body.get("status")).get("garbageCollection"))
    return "|".join(str(x) for x in (
        annotations.get(GC_REQUEST_ANNOTATION), _mapping(gc_status.get("lastRun")).get("id"),
        _mapping(gc_status.get("active")).get("id"),
    ))
