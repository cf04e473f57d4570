"""When a registry that exited is started again: at once after a clean exit, within 10 ms after a 2.8 handover (a
lost bind race: the old listener may not have let the port go yet), else after a second (a config it refuses
would otherwise restart in a hot loop)."""

from __future__ import annotations

QUICK_FAILURE_SECONDS = 2.0  # a registry that dies sooner was refused at start
PAUSE_SECONDS = 1.0  # between two quick failures
RACE_RETRY_SECONDS = 0.01  # after a handover: the old listener may not have let the port go yet (2.8)
RACE_RETRIES = 5


class CrashBackoff:
    def __init__(self) -> None:
        self.restart_at: float | None = None
        self.handed_over = False  # the current registry was started by a 2.8 handover
        self.retries = 0

    def after_handover(self) -> None:
        """A 2.8 handover starts the successor now: a quick failure of it is a lost bind race, retried soon."""
        self.handed_over = True
        self.retries = 0
        self.restart_at = None

    def schedule(self, now: float, quick: bool) -> None:
        """A registry exited (`quick`: with a failure, sooner than QUICK_FAILURE_SECONDS after its start)."""
        delay = 0.0
        if quick:
            if self.handed_over and self.retries < RACE_RETRIES:
                self.retries += 1
                delay = RACE_RETRY_SECONDS
            else:
                self.handed_over = False
                delay = PAUSE_SECONDS
        else:
            self.handed_over = False
        self.restart_at = now + delay

    def pause(self, now: float) -> None:
        """The start itself failed (no binary to exec): try again in PAUSE_SECONDS."""
        self.restart_at = now + PAUSE_SECONDS

    def due(self, now: float) -> bool:
        """Whether the restart is due now (then it is taken: the caller starts the registry)."""
        if self.restart_at is None or now < self.restart_at:
            return False
        self.restart_at = None
        return True

    def cancel(self) -> None:
        self.restart_at = None


__all__ = ["PAUSE_SECONDS", "QUICK_FAILURE_SECONDS", "RACE_RETRIES", "RACE_RETRY_SECONDS", "CrashBackoff"]
