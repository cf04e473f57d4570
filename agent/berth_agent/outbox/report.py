"""What the outbox tells status.agents.<pod>.notifications (berth_api.registry.NotificationEndpointRecord), and when:
at once when an endpoint appears or goes, starts or stops failing, drops events, or empties; otherwise at most every
REFRESH_SECONDS while its counts move, so N replicas under a push load do not patch the Registry every second."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from berth_api.timestamps import format_time

REFRESH_SECONDS = 30.0

Report = Callable[[dict | None], Awaitable[None]]


class StatusReport:
    def __init__(self, report: Report | None) -> None:
        self.report = report
        self.told: dict[str, dict] = {}  # what status says, by endpoint
        self.told_at = 0.0

    def record(self, counts: dict[str, tuple[int, int, int, float | None]], now: float) -> dict | None:
        """The merge patch to write now, or None. `counts`: (pending, delivered, dropped, failing since) by name."""
        fresh = {name: {"pending": pending, "delivered": delivered, "dropped": dropped,
                        **({"failingSince": format_time(failing)} if failing else {})}
                 for name, (pending, delivered, dropped, failing) in counts.items()}
        if not fresh and not self.told:
            return None

        def state(entry: dict | None) -> tuple:
            return (None,) if entry is None else (entry["pending"] == 0, "failingSince" in entry, entry["dropped"])

        urgent = any(state(fresh.get(n)) != state(self.told.get(n)) for n in set(fresh) | set(self.told))
        moved = any(fresh[n] != {k: v for k, v in self.told.get(n, {}).items() if k != "checkedAt"} for n in fresh)
        if not urgent and not (moved and now - self.told_at >= REFRESH_SECONDS):
            return None
        stamped = {name: dict(entry, checkedAt=format_time(now)) for name, entry in fresh.items()}
        patch: dict = {**stamped, **{name: None for name in self.told if name not in fresh}}
        self.told, self.told_at = stamped, now
        return patch or None


__all__ = ["REFRESH_SECONDS", "Report", "StatusReport"]
