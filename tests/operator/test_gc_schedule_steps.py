"""gc_schedule.decide's steps, each on its own: the standing request, the schedule, the run-now annotation, a new
request, and when to decide again (test_gc_schedule.py covers decide as a whole)."""

from __future__ import annotations

import datetime
from typing import Any

from berth_api import GarbageCollection, GarbageCollectionRequest
from berth_operator.engine import gc_schedule
from berth_operator.engine.gc_schedule import Draft


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def request(**fields: Any) -> dict[str, Any]:
    return {"id": "20261130T030000Z-schedule", "trigger": "schedule", "requestedAt": "2026-11-30T03:00:00Z",
            "dryRun": False, "deleteUntagged": False, "readOnlyTimeout": "10m",
            "deadline": "2026-11-30T03:12:00Z", **fields}


# 1. The standing request.

def test_no_request_leaves_nothing_standing_and_writes_nothing():
    draft = Draft()
    assert gc_schedule.settle_request({}, at("2026-11-30T03:00:00Z"), draft) is None
    assert draft == Draft()


def test_a_request_before_its_deadline_without_result_still_stands():
    draft = Draft()
    pending = gc_schedule.settle_request({"request": request()}, at("2026-11-30T03:11:59Z"), draft)
    assert pending is not None and pending.id == "20261130T030000Z-schedule"
    assert draft == Draft()


def test_a_request_with_its_result_recorded_is_cleared_with_the_result_s_event():
    live = {"request": request(), "lastRun": {"id": "20261130T030000Z-schedule", "result": "Succeeded",
                                              "blobsDeleted": 3}}
    draft = Draft()
    assert gc_schedule.settle_request(live, at("2026-11-30T03:05:00Z"), draft) is None
    assert draft.patch == {"request": None}
    assert [(e.type, e.reason) for e in draft.events] == [("Normal", "GarbageCollectionSucceeded")]
    assert "3 blobs deleted" in draft.events[0].message


def test_a_malformed_request_is_dropped_with_a_warning():
    for raw in ({"id": "x"}, request(deadline="not a time"), "a string"):
        draft = Draft()
        assert gc_schedule.settle_request({"request": raw}, at("2026-11-30T03:00:00Z"), draft) is None
        assert draft.patch == {"request": None}
        assert [(e.type, e.reason) for e in draft.events] == [("Warning", "GarbageCollectionInterrupted")]


def test_a_request_past_its_deadline_is_recorded_interrupted_naming_the_runner_that_took_it():
    live = {"request": request(), "active": {"id": "20261130T030000Z-schedule", "runner": "pod-0",
                                             "startedAt": "2026-11-30T03:00:05Z"}}
    draft = Draft()
    assert gc_schedule.settle_request(live, at("2026-11-30T03:12:00Z"), draft) is None
    assert draft.patch["request"] is None and draft.patch["active"] is None
    last = draft.patch["lastRun"]
    assert (last["result"], last["runner"], last["startedAt"], last["finishedAt"]) == (
        "Interrupted", "pod-0", "2026-11-30T03:00:05Z", "2026-11-30T03:12:00Z")
    assert last["message"].endswith("the runner in pod pod-0 stopped")
    assert [(e.type, e.reason) for e in draft.events] == [("Warning", "GarbageCollectionInterrupted")]


def test_an_interrupted_run_takes_nothing_from_another_request_s_active_record():
    pending = GarbageCollectionRequest.model_validate(request())
    run = gc_schedule.interrupted_run(pending, {"id": "other", "runner": "pod-1", "startedAt": "x"},
                                      at("2026-11-30T03:12:00Z"))
    assert run.get("runner") is None and run.get("startedAt") is None
    assert run["message"].endswith("no runner took the request")
    strange = gc_schedule.interrupted_run(pending, {"id": pending.id, "runner": 7, "startedAt": ["x"]},
                                          at("2026-11-30T03:12:00Z"))
    assert strange.get("runner") is None and strange.get("startedAt") is None


# 2. The schedule.

def test_no_schedule_clears_what_the_status_kept():
    draft = Draft()
    live = {"schedule": "0 3 * * *", "nextRun": "2026-11-30T03:00:00Z"}
    assert gc_schedule.advance_schedule(None, live, at("2026-11-30T04:00:00Z"), draft) == (None, False)
    assert draft.patch == {"schedule": None, "nextRun": None}
    draft = Draft()
    assert gc_schedule.advance_schedule(None, {}, at("2026-11-30T04:00:00Z"), draft) == (None, False)
    assert draft.patch == {}


def test_a_new_or_changed_schedule_starts_from_now_and_is_not_due():
    live = {"schedule": "0 4 * * *", "nextRun": "2026-11-30T01:00:00Z"}
    draft = Draft()
    assert gc_schedule.advance_schedule("0 3 * * *", live, at("2026-11-30T03:30:00Z"), draft) == (
        at("2026-12-01T03:00:00Z"), False)
    assert draft.patch == {"schedule": "0 3 * * *", "nextRun": "2026-12-01T03:00:00Z"}


def test_a_passed_next_run_is_due_once_however_many_slots_were_missed():
    live = {"schedule": "0 * * * *", "nextRun": "2026-11-30T03:00:00Z"}
    draft = Draft()
    assert gc_schedule.advance_schedule("0 * * * *", live, at("2026-11-30T09:30:00Z"), draft) == (
        at("2026-11-30T10:00:00Z"), True)
    assert draft.patch == {"nextRun": "2026-11-30T10:00:00Z"}


def test_a_next_run_still_to_come_is_kept_and_not_due():
    live = {"schedule": "0 3 * * *", "nextRun": "2026-11-30T03:00:00Z"}
    draft = Draft()
    assert gc_schedule.advance_schedule("0 3 * * *", live, at("2026-11-30T02:59:59Z"), draft) == (
        at("2026-11-30T03:00:00Z"), False)
    assert draft.patch == {}


# 3. The run-now annotation.

def test_a_new_timestamp_is_taken_once():
    draft = Draft()
    assert gc_schedule.take_run_now("2026-11-30T10:00:00Z", {}, None, draft) is True
    assert draft.patch == {"handledRequest": "2026-11-30T10:00:00Z"} and draft.events == []
    draft = Draft()
    handled = {"handledRequest": "2026-11-30T10:00:00Z"}
    assert gc_schedule.take_run_now("2026-11-30T10:00:00Z", handled, None, draft) is False
    assert draft == Draft()


def test_no_annotation_or_an_empty_one_asks_for_nothing():
    for asked in (None, "", 5):
        draft = Draft()
        assert gc_schedule.take_run_now(asked, {}, None, draft) is False
        assert draft == Draft()


def test_a_value_that_is_no_timestamp_is_handled_and_refused():
    draft = Draft()
    assert gc_schedule.take_run_now("now please", {}, None, draft) is False
    assert draft.patch == {"handledRequest": "now please"}
    assert [(e.type, e.reason) for e in draft.events] == [("Warning", "InvalidGarbageCollectionRequest")]
    assert "RFC 3339" in draft.events[0].message


def test_uncollectable_storage_refuses_the_run_with_its_reason():
    draft = Draft()
    assert gc_schedule.take_run_now("2026-11-30T10:00:00Z", {}, "in-memory storage", draft) is False
    assert draft.patch == {"handledRequest": "2026-11-30T10:00:00Z"}
    assert draft.events[0].message.endswith("no run was started: in-memory storage")


# 4. A new request.

def test_a_new_request_carries_the_spec_s_flags_and_a_deadline_past_the_read_only_window():
    spec = GarbageCollection.model_validate({"readOnlyTimeout": "15m", "dryRun": True})
    draft = Draft()
    pending = gc_schedule.new_request(spec, "manual", {}, at("2026-11-30T10:00:00Z"), draft)
    assert (pending.id, pending.trigger, pending.dry_run, pending.deadline) == (
        "20261130T100000Z-manual", "manual", True, "2026-11-30T10:17:00Z")
    assert draft.patch == {"request": pending.model_dump(by_alias=True, mode="json")}
    assert [e.reason for e in draft.events] == ["GarbageCollectionRequested"]
    assert "(manual, dry run)" in draft.events[0].message and "at most 15m" in draft.events[0].message


def test_a_new_request_s_id_differs_from_the_last_run_s_and_the_settled_request_s():
    live = {"lastRun": {"id": "20261130T100000Z-schedule"}, "request": {"id": "20261130T100000Z-schedule-2"}}
    pending = gc_schedule.new_request(GarbageCollection(), "schedule", live, at("2026-11-30T10:00:00Z"), Draft())
    assert pending.id == "20261130T100000Z-schedule-3"


# 5. When to decide again.

def test_the_wake_is_the_sooner_of_next_run_and_the_deadline_and_never_in_the_past():
    pending = GarbageCollectionRequest.model_validate(request())  # deadline 03:12
    now = at("2026-11-30T03:00:00Z")
    assert gc_schedule.wake_at(at("2026-11-30T04:00:00Z"), pending, now) == at("2026-11-30T03:12:00Z")
    assert gc_schedule.wake_at(at("2026-11-30T03:05:00Z"), pending, now) == at("2026-11-30T03:05:00Z")
    assert gc_schedule.wake_at(None, None, now) is None
    assert gc_schedule.wake_at(at("2026-11-30T02:00:00Z"), None, now) is None
    assert gc_schedule.wake_at(None, pending, at("2026-11-30T03:12:00Z")) is None
