"""outbox/store.py on a real directory: what the relay answered survives a reopen (a kill -9), a torn tail is cut,
each endpoint's cursor is kept, delivered segments go, and past the size bound the oldest go, counted per endpoint."""

from __future__ import annotations

import json

from berth_agent.outbox import store
from berth_agent.outbox.store import CURSORS_NAME, EventLog


def events(*names: str) -> list[bytes]:
    return [json.dumps({"id": name}).encode() for name in names]


def test_appended_events_survive_a_reopen_in_order(tmp_path):
    log = EventLog(tmp_path, 1 << 20)
    assert log.append(events("a", "b")) == 2 and log.append(events("c")) == 3
    log.close()
    again = EventLog(tmp_path, 1 << 20)
    assert [(seq, json.loads(raw)["id"]) for seq, raw in again.after(0)] == [(1, "a"), (2, "b"), (3, "c")]
    assert again.after(2) == [(3, events("c")[0])] and again.append(events("d")) == 4


def test_a_torn_tail_never_answered_is_cut(tmp_path):
    log = EventLog(tmp_path, 1 << 20)
    log.append(events("a", "b"))
    log.close()
    segment = next(tmp_path.glob("seg-*.log"))
    with open(segment, "ab") as torn:
        torn.write(b'3 {"id": "c"')  # a kill -9 mid-write: no newline, so the relay never answered it
    again = EventLog(tmp_path, 1 << 20)
    assert again.last_seq == 2 and segment.read_bytes().endswith(b"\n")
    assert again.append(events("c")) == 3 and [s for s, _ in again.after(0)] == [1, 2, 3]


def test_cursors_are_kept_and_a_new_endpoint_starts_at_the_next_event(tmp_path):
    log = EventLog(tmp_path, 1 << 20)
    log.follow({"scanner"})
    log.append(events("a", "b"))
    log.follow({"scanner", "audit"})
    assert log.cursors == {"scanner": 0, "audit": 2} and log.pending("scanner") == 2 and log.pending("audit") == 0
    log.cursors["scanner"] = 1
    log.save_cursors()
    assert json.loads((tmp_path / CURSORS_NAME).read_text()) == {"audit": 2, "scanner": 1}
    log.close()
    assert EventLog(tmp_path, 1 << 20).cursors == {"audit": 2, "scanner": 1}
    log.follow({"audit"})  # removed: its cursor goes, and holds nothing back
    assert log.cursors == {"audit": 2}


def test_delivered_segments_go_and_past_the_bound_the_oldest_go_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "SEGMENT_BYTES", 20)  # a new segment after each append
    log = EventLog(tmp_path, 1 << 20)
    log.follow({"fast", "slow"})
    log.append(events("a", "b"))
    log.append(events("c", "d"))
    log.append(events("e"))
    assert len(log.segments) == 3
    log.cursors.update(fast=5, slow=2)
    assert log.compact() == {} and [s.first for s in log.segments] == [3, 5]  # both had the first
    log.max_bytes = 1  # past the bound: the oldest goes, delivered or not
    assert log.compact() == {"slow": 2} and log.dropped == {"slow": 2} and log.cursors["slow"] == 4
    assert [s.first for s in log.segments] == [5] and sorted(p.name for p in tmp_path.glob("seg-*")) == [
        f"seg-{5:016d}.log"]
