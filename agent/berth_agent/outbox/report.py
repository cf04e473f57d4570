"""What the outbox tells status.agents.<pod>.notifications (berth_api.registry.NotificationEndpointRecord), and when:
at once when an endpoint appears or goes, starts or stops failing, drops events, or empties; otherwise once its
counts have been still for SETTLE_SECONDS, and at most every REFRESH_SECONDS while they keep moving, so N replicas
under a push load do not patch the Registry every second, and a quiet pod's status says what it holds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from berth_api.timestamps import format_time

REFRESH_SECONDS = 30.0
SETTLE_SECONDS = 1.0

Report = Callable[[dict | None], Awaitable[None]]


class StatusReport:
    def __init__(self, report: Report | None) -> None:
        self.report = report
        self.told: dict[str, dict] = {}  # what status says, by endpoint
        self.told_at = 0.0
        self.seen: dict[str, dict] = {}  # the counts at the last look
        self.seen_since = 0.0  # since when they are what they are

    def record(self, counts: dict[str, tuple[int, int, int, float | None]], now: float) -> dict | None:
        """The merge patch to write now, or None. `counts`: (pending, delivered, dropped, failing since) by name."""
        fresh = {name: {"pending": pending, "delivered": delivered, "dropped": dropped,
                        **({"failingSince": format_time(failing)} if failing else {})}
                 for name, (pending, delivered, dropped, failing) in counts.items()}
        if not fresh and not self.told:
            return None
        if fresh != self.seen:
            self.seen, self.seen_since = fresh, now

        def state(entry: dict | None) -> tuple:
            return (None,) if entry is None else (entry["pending"] == 0, "failingSince" in entry, entry["dropped"])

        urgent = any(state(fresh.get(n)) != state(self.told.get(n)) for n in set(fresh) | set(self.told))
        moved = any(fresh[n] != {k: v for k, v in self.told.get(n, {}).items() if k != "checkedAt"} for n in fresh)
        settled = now - self.seen_since >= SETTLE_SECONDS
        if not urgent and not (moved and (settled or now - self.told_at >= REFRESH_SECONDS)):
            return None
        stamped = {name: dict(entry, checkedAt=format_time(now)) for name, entry in fresh.items()}
        patch: dict = {**stamped, **{name: None for name in self.told if name not in fresh}}
        self.told, self.told_at = stamped, now
        return patch or None


__all__ = ["REFRESH_SECONDS", "SETTLE_SECONDS", "Report", "StatusReport"]
