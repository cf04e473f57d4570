"""gc_schedule.decide: what the operator asks for and when, from the Registry and a given time (pure)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from berth_api import GC_REQUEST_ANNOTATION, GC_STORAGE_MESSAGE, GarbageCollection, GarbageCollectionStatus
from berth_operator.engine import gc_schedule

UTC = datetime.UTC


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def gc(**fields: Any) -> GarbageCollection:
    return GarbageCollection.model_validate(fields)


def decide(spec: GarbageCollection | None, live: Any, now: str, annotation: str | None = None, **kw: Any):
    annotations = {GC_REQUEST_ANNOTATION: annotation} if annotation is not None else {}
    return gc_schedule.decide(spec, annotations=annotations, live=live, now=at(now), **kw)


def merged(live: dict[str, Any] | None, patch: dict[str, Any] | None) -> dict[str, Any]:
    """The status.garbageCollection a JSON merge patch leaves (what the API server stores)."""
    def merge(target: Any, change: Any) -> Any:
        if not isinstance(change, dict):
            return change
        result = dict(target) if isinstance(target, dict) else {}
        for key, value in change.items():
            if value is None:
                result.pop(key, None)
            else:
                result[key] = merge(result.get(key), value)
        return result
    stored = merge(live or {}, patch or {})
    GarbageCollectionStatus.model_validate(stored)  # what the operator writes fits the CRD's model
    return stored


def test_a_new_schedule_sets_next_run_and_requests_nothing():
    d = decide(gc(schedule="0 3 * * *"), None, "2026-11-30T02:00:00Z")
    assert d.status_patch == {"schedule": "0 3 * * *", "nextRun": "2026-11-30T03:00:00Z"}
    assert d.pending is None and d.events == []
    assert d.wake_at == at("2026-11-30T03:00:00Z")


def test_the_scheduled_time_passing_requests_one_run_and_moves_next_run():
    live = {"schedule": "0 3 * * *", "nextRun": "2026-11-30T03:00:00Z"}
    assert decide(gc(schedule="0 3 * * *"), live, "2026-11-30T02:59:59Z").status_patch is None
    d = decide(gc(schedule="0 3 * * *", readOnlyTimeout="15m", deleteUntagged=True), live, "2026-11-30T03:00:00Z")
    stored = merged(live, d.status_patch)
    assert stored["nextRun"] == "2026-12-01T03:00:00Z"
    assert stored["request"] == {
        "id": "20261130T030000Z-schedule", "trigger": "schedule", "requestedAt": "2026-11-30T03:00:00Z",
        "dryRun": False, "deleteUntagged": True, "readOnlyTimeout": "15m", "deadline": "2026-11-30T03:17:00Z",
    }
    assert [e.reason for e in d.events] == ["GarbageCollectionRequested"]
    assert d.pending is not None and d.wake_at == at("2026-11-30T03:17:00Z")  # the deadline comes first


def test_slots_missed_while_the_operator_was_down_run_once():
    live = {"schedule": "0 * * * *", "nextRun": "2026-11-30T03:00:00Z"}
    d = decide(gc(schedule="0 * * * *"), live, "2026-12-02T17:42:10Z")  # 62 slots later
    stored = merged(live, d.status_patch)
    assert stored["request"]["trigger"] == "schedule"
    assert stored["nextRun"] == "2026-12-02T18:00:00Z"
    # The next decision, a second later, asks for nothing more.
    again = decide(gc(schedule="0 * * * *"), stored, "2026-12-02T17:42:11Z")
    assert again.status_patch is None and again.events == []


def test_a_changed_schedule_starts_from_now():
    live = {"schedule": "0 3 * * *", "nextRun": "2026-11-30T03:00:00Z"}
    d = decide(gc(schedule="30 4 * * *"), live, "2026-11-30T05:00:00Z")
    assert d.status_patch == {"schedule": "30 4 * * *", "nextRun": "2026-12-01T04:30:00Z"}
    assert d.pending is None


def test_removing_the_schedule_clears_next_run():
    live = {"schedule": "0 3 * * *", "nextRun": "2026-11-30T03:00:00Z"}
    d = decide(gc(), live, "2026-11-30T05:00:00Z")
    assert d.status_patch == {"schedule": None, "nextRun": None}
    assert d.wake_at is None
    assert decide(None, {}, "2026-11-30T05:00:00Z").status_patch is None


def test_a_new_annotation_value_requests_a_run_once():
    d = decide(gc(dryRun=True), None, "2026-11-30T10:00:05Z", annotation="2026-11-30T10:00:00Z")
    stored = merged(None, d.status_patch)
    assert stored["handledRequest"] == "2026-11-30T10:00:00Z"
    assert stored["request"]["trigger"] == "manual" and stored["request"]["dryRun"] is True
    assert stored["request"]["deadline"] == "2026-11-30T10:12:05Z"  # default readOnlyTimeout 10m + 2m grace
    # The runner records the result: the request is cleared, an Event says how it ended.
    stored["lastRun"] = {"id": stored["request"]["id"], "trigger": "manual", "dryRun": True,
                         "deleteUntagged": False, "result": "Succeeded", "finishedAt": "2026-11-30T10:01:00Z",
                         "blobsDeleted": 3, "manifestsDeleted": 0}
    done = decide(gc(dryRun=True), stored, "2026-11-30T10:01:01Z", annotation="2026-11-30T10:00:00Z")
    assert done.status_patch == {"request": None}
    assert [(e.type, e.reason) for e in done.events] == [("Normal", "GarbageCollectionSucceeded")]
    assert "3 blobs deleted" in done.events[0].message and "dry run" in done.events[0].message
    stored = merged(stored, done.status_patch)
    # The same value again, later: nothing.
    later = decide(gc(dryRun=True), stored, "2026-11-30T11:00:00Z", annotation="2026-11-30T10:00:00Z")
    assert later.status_patch is None and later.events == [] and later.pending is None


def test_an_annotation_during_a_run_waits_for_it_to_end():
    first = merged(None, decide(gc(), None, "2026-11-30T10:00:00Z", annotation="2026-11-30T10:00:00Z").status_patch)
    d = decide(gc(), first, "2026-11-30T10:01:00Z", annotation="2026-11-30T10:01:00Z")
    assert d.status_patch is None and d.pending is not None  # not handled yet: the run stands
    ended = dict(first, lastRun={"id": first["request"]["id"], "trigger": "manual", "dryRun": False,
                                 "deleteUntagged": False, "result": "Failed", "finishedAt": "2026-11-30T10:02:00Z",
                                 "message": "registry garbage-collect exited 1"})
    d = decide(gc(), ended, "2026-11-30T10:02:01Z", annotation="2026-11-30T10:01:00Z")
    stored = merged(ended, d.status_patch)
    assert [e.reason for e in d.events] == ["GarbageCollectionFailed", "GarbageCollectionRequested"]
    assert d.events[0].type == "Warning" and "exited 1" in d.events[0].message
    assert stored["handledRequest"] == "2026-11-30T10:01:00Z"
    assert stored["request"]["id"] == "20261130T100201Z-manual"


def test_a_schedule_due_during_a_run_is_skipped_not_queued():
    live = {"schedule": "*/5 * * * *", "nextRun": "2026-11-30T10:05:00Z"}
    live = merged(live, decide(gc(schedule="*/5 * * * *"), live, "2026-11-30T10:05:00Z").status_patch)
    d = decide(gc(schedule="*/5 * * * *"), live, "2026-11-30T10:10:00Z")
    assert d.status_patch == {"nextRun": "2026-11-30T10:15:00Z"}
    assert [e.reason for e in d.events] == ["GarbageCollectionSkipped"]


def test_a_request_past_its_deadline_with_no_result_is_interrupted():
    live = merged(None, decide(gc(readOnlyTimeout="1m"), None, "2026-11-30T10:00:00Z",
                               annotation="2026-11-30T10:00:00Z").status_patch)
    live["active"] = {"id": live["request"]["id"], "runner": "reg-abc-1", "startedAt": "2026-11-30T10:00:01Z",
                      "phase": "Collecting"}
    assert decide(gc(readOnlyTimeout="1m"), live, "2026-11-30T10:02:59Z").status_patch is None
    d = decide(gc(readOnlyTimeout="1m"), live, "2026-11-30T10:03:00Z")
    stored = merged(live, d.status_patch)
    assert "request" not in stored and "active" not in stored
    run = stored["lastRun"]
    assert run["result"] == "Interrupted" and run["runner"] == "reg-abc-1"
    assert run["startedAt"] == "2026-11-30T10:00:01Z" and run["finishedAt"] == "2026-11-30T10:03:00Z"
    assert "the runner in pod reg-abc-1 stopped" in run["message"]
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "GarbageCollectionInterrupted")]
    assert d.pending is None


def test_an_interrupted_run_replaces_every_count_of_the_previous_one():
    live = {"lastRun": {"id": "old", "trigger": "schedule", "dryRun": False, "deleteUntagged": False,
                        "result": "Succeeded", "finishedAt": "2026-11-29T03:00:00Z", "blobsDeleted": 9,
                        "bytesFreed": 100},
            "request": {"id": "new", "trigger": "schedule", "requestedAt": "2026-11-30T03:00:00Z", "dryRun": False,
                        "deleteUntagged": False, "readOnlyTimeout": "10m", "deadline": "2026-11-30T03:12:00Z"}}
    stored = merged(live, decide(None, live, "2026-11-30T04:00:00Z").status_patch)
    assert stored["lastRun"]["id"] == "new" and "blobsDeleted" not in stored["lastRun"]
    assert "no runner took the request" in stored["lastRun"]["message"]


@pytest.mark.parametrize("value", ["now", "2026-11-30", "yesterday at 3", "2026-11-30T10:00:00"])
def test_an_annotation_that_is_not_rfc3339_is_refused_once(value):
    d = decide(gc(), None, "2026-11-30T10:00:00Z", annotation=value)
    assert d.status_patch == {"handledRequest": value} and d.pending is None
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "InvalidGarbageCollectionRequest")]
    again = decide(gc(), merged(None, d.status_patch), "2026-11-30T10:00:01Z", annotation=value)
    assert again.events == []


def test_the_annotation_on_storage_that_cannot_be_collected_is_refused_once_with_the_reason():
    d = decide(None, None, "2026-11-30T10:00:00Z", annotation="2026-11-30T10:00:00Z", uncollectable=GC_STORAGE_MESSAGE)
    assert d.status_patch == {"handledRequest": "2026-11-30T10:00:00Z"} and d.pending is None
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "InvalidGarbageCollectionRequest")]
    assert GC_STORAGE_MESSAGE in d.events[0].message and "no run was started" in d.events[0].message
    again = decide(None, merged(None, d.status_patch), "2026-11-30T10:00:01Z", annotation="2026-11-30T10:00:00Z",
                   uncollectable=GC_STORAGE_MESSAGE)
    assert again.events == [] and again.pending is None


def test_an_invalid_spec_starts_nothing_but_deadlines_still_hold():
    live = {"schedule": "0 3 * * *", "nextRun": "2026-11-30T03:00:00Z",
            "request": {"id": "r", "trigger": "manual", "requestedAt": "2026-11-30T02:00:00Z", "dryRun": False,
                        "deleteUntagged": False, "readOnlyTimeout": "10m", "deadline": "2026-11-30T02:12:00Z"}}
    d = decide(None, live, "2026-11-30T04:00:00Z", annotation="2026-11-30T04:00:00Z", spec_valid=False)
    stored = merged(live, d.status_patch)
    assert stored["lastRun"]["result"] == "Interrupted" and "request" not in stored
    assert stored["nextRun"] == "2026-11-30T03:00:00Z" and "handledRequest" not in stored
    assert d.wake_at is None  # the stale nextRun is in the past: a timer for it would fire in a loop


def test_wake_at_is_always_in_the_future():
    live = {"schedule": "0 3 * * *", "nextRun": "2026-11-30T03:00:00Z"}
    for now in ("2026-11-30T02:00:00Z", "2026-11-30T03:00:00Z", "2026-12-05T00:00:00Z"):
        d = decide(gc(schedule="0 3 * * *"), live, now)
        assert d.wake_at is not None and d.wake_at > at(now)
        assert decide(None, live, now, spec_valid=False).wake_at is None


@pytest.mark.parametrize("live", ["garbage", {"request": "x"}, {"request": {"id": "r"}},
                                  {"nextRun": 5, "schedule": ["x"]}])
def test_a_status_broken_by_hand_is_repaired_not_trusted(live):
    d = decide(gc(schedule="0 3 * * *"), live, "2026-11-30T02:00:00Z")
    stored = merged(live if isinstance(live, dict) else {}, d.status_patch)
    assert stored["nextRun"] == "2026-11-30T03:00:00Z"
    assert "request" not in stored


def test_request_ids_do_not_repeat_within_a_second():
    assert gc_schedule.request_id(at("2026-11-30T10:00:00Z"), "manual", {"20261130T100000Z-manual"}) == \
        "20261130T100000Z-manual-2"


def test_watch_digest_moves_with_the_annotation_and_the_runner_records_only():
    body = {"metadata": {"annotations": {GC_REQUEST_ANNOTATION: "a"}}, "status": {"garbageCollection": {
        "nextRun": "x", "request": {"id": "r"}}}}
    base = gc_schedule.watch_digest(body)
    body["status"]["garbageCollection"]["nextRun"] = "y"  # the operator's own writes: no extra reconcile
    assert gc_schedule.watch_digest(body) == base
    body["status"]["garbageCollection"]["active"] = {"id": "r"}
    assert gc_schedule.watch_digest(body) != base
