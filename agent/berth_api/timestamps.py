"""The one timestamp format of the Registry's status and Leases, and its parser: both programs use these.

RFC 3339 in UTC with a `Z`: whole seconds in status (`requestedAt`, `deadline`, `lastRun.finishedAt`),
milliseconds where one report follows another closely, microseconds for a Lease's MicroTime fields.
Read back with the offset that was written (Z or +hh:mm); a timestamp without one is no timestamp.
"""

from __future__ import annotations

import datetime
import time
from typing import Literal

Precision = Literal["seconds", "milliseconds", "microseconds"]


def format_time(moment: float | datetime.datetime | None = None, *, precision: Precision = "seconds") -> str:
    """`moment` (epoch seconds or an aware datetime; now when None) as RFC 3339 in UTC, e.g. 2026-01-02T03:04:05Z."""
    if not isinstance(moment, datetime.datetime):
        moment = datetime.datetime.fromtimestamp(time.time() if moment is None else moment, datetime.UTC)
    return moment.astimezone(datetime.UTC).isoformat(timespec=precision).replace("+00:00", "Z")


def parse_time(text: object) -> datetime.datetime | None:
    """A status timestamp (RFC 3339 with its offset, Z or +hh:mm) as an aware datetime, else None. The operator
    and the agents read each other's `requestedAt`, `deadline`, `nextRun` and `startedAt` with it."""
    if not isinstance(text, str) or "T" not in text.upper():
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def parse_epoch(text: object) -> float | None:
    """parse_time as epoch seconds, else None."""
    moment = parse_time(text)
    return moment.timestamp() if moment is not None else None


__all__ = ["Precision", "format_time", "parse_epoch", "parse_time"]
