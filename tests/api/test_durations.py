"""One Go-duration parser for the operator and the agent (berth_api.types.duration_seconds), and berth-supervise's
stdlib copy held to the same answers (there were three, and two behaved differently)."""

from __future__ import annotations

import pytest

from berth_api.types import duration_seconds
from berth_supervise.notify import duration_seconds as supervisor_copy

CASES = [("0", 0.0), ("30s", 30.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5h", 5400.0), ("250us", 0.00025),
         ("10µs", 0.00001), ("1h1m1s1ms", 3661.001), ("", 0.0), ("soon", 0.0), ("5 s", 0.0), ("30sx", 0.0),
         ("x30s", 0.0)]


@pytest.mark.parametrize("text, seconds", CASES)
def test_both_parsers_give_the_same_seconds(text, seconds):
    assert duration_seconds(text) == pytest.approx(seconds)
    assert supervisor_copy(text) == pytest.approx(seconds)


def test_none_is_no_duration():
    assert duration_seconds(None) == 0.0
