"""outbox/report.py: what goes to status.agents.<pod>.notifications, and when (at once on a change of state; counts
once still for SETTLE_SECONDS, or at most every REFRESH_SECONDS while they move; a removed endpoint set to null)."""

from __future__ import annotations

from berth_agent.outbox.report import REFRESH_SECONDS, SETTLE_SECONDS, StatusReport


def test_state_changes_are_told_at_once_and_moving_counts_at_most_every_refresh():
    status = StatusReport(None)
    assert status.record({}, 0.0) is None  # no notifications: nothing to say
    first = status.record({"scanner": (0, 0, 0, None)}, 1.0)
    assert first == {"scanner": {"pending": 0, "delivered": 0, "dropped": 0, "checkedAt": "1970-01-01T00:00:01Z"}}
    assert status.record({"scanner": (0, 0, 0, None)}, 2.0) is None  # nothing new
    assert status.record({"scanner": (3, 0, 0, None)}, 3.0)["scanner"]["pending"] == 3  # not empty any more
    assert status.record({"scanner": (2, 1, 0, None)}, 4.0) is None  # counts move: not yet
    assert status.record({"scanner": (2, 1, 0, None)}, 4.0 + SETTLE_SECONDS)["scanner"]["delivered"] == 1  # still
    for second in range(6, 6 + int(REFRESH_SECONDS)):  # moving every look: only at the refresh
        said = status.record({"scanner": (2, second, 0, None)}, float(second))
        assert (said is not None) == (second - (4.0 + SETTLE_SECONDS) >= REFRESH_SECONDS), second
    failing = status.record({"scanner": (2, 1, 0, 100.0)}, 50.0)
    assert failing["scanner"]["failingSince"] == "1970-01-01T00:01:40Z"  # began failing: at once
    assert status.record({"scanner": (2, 1, 5, 100.0)}, 51.0)["scanner"]["dropped"] == 5  # dropped: at once
    gone = status.record({"audit": (0, 0, 0, None)}, 52.0)
    assert gone["scanner"] is None and gone["audit"]["pending"] == 0  # a removed endpoint: null in the merge patch
