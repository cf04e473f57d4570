"""Replicas reload one at a time, each out of its Service first
(docs/decisions/0010-replicas-reload-one-at-a-time.md).

`ReplicaTurn`: around a registry restart in a pod with siblings: take the reload Lease (kube.lease.ReloadLease;
reporting "waiting" on status while another pod holds it), turn /readyz false and wait `leave_seconds` (the
readiness probe and the endpoints catching up: then no new connection comes to this pod), restart, turn
/readyz true, wait `leave_seconds` again (so the next pod never leaves while this one is not back yet), release
the Lease. On the socket the supervisor holds (3.x) the pod does not leave: it only takes its turn.

Blocking calls: runs in the applier's worker thread.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from berth_api.timestamps import format_time

from ..core.health import Health
from ..kube.lease import LeaseError, ReloadLease

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2  # while another pod holds the Lease (with jitter, so waiters do not move in step)
DEFAULT_LEAVE_SECONDS = 5.0


@dataclass
class TurnTimings:
    lease_wait: float = 0.0
    drain_wait: float = 0.0
    stopped: bool = False


class ReplicaTurn:
    """One restart at a time across the Registry's pods, each out of its Service while it restarts."""

    def __init__(self, lease: ReloadLease, health: Health, *, leave_seconds: float = DEFAULT_LEAVE_SECONDS,
                 on_wait: Callable[[str | None], None] = lambda _message: None):
        self.lease, self.health, self.leave_seconds = lease, health, leave_seconds
        self.on_wait = on_wait  # a status line while another pod holds the Lease; None when the wait ended
        self._holding = False
        self._began = 0.0
        self._taken_at = 0.0  # wall clock, for the "reload turn" log line

    def begin(self, stop: threading.Event, *, hold_seconds: float, leave: bool = True) -> TurnTimings:
        """Take the Lease (waiting for it), then leave the Service. `hold_seconds` bounds the hold. With
        `leave` False (the supervisor holds the listening socket: nothing is refused) the pod stays in."""
        timings = TurnTimings()
        started = time.monotonic()
        reported: str | None = None
        while True:
            try:
                taken, holder = self.lease.try_acquire(hold_seconds + (2 * self.leave_seconds if leave else 0))
            except LeaseError as exc:
                # An API we cannot reach must not stop reloads for good: after the bound, go alone.
                taken, holder = False, None
                if time.monotonic() - started > hold_seconds:
                    log.warning("reload lease unavailable, restarting without it",
                                extra={"fields": {"lease": self.lease.name, "error": exc.args[0]}})
                    break
            if taken:
                self._holding = True
                self._taken_at = time.time()
                break
            if holder is not None and holder != reported:
                reported = holder
                self.on_wait(f"waiting for its turn to reload: pod {holder} holds Lease {self.lease.name} "
                             f"(since {format_time(precision='microseconds')})")
            if stop.wait(POLL_SECONDS * random.uniform(0.5, 1.5)):
                timings.stopped = True
                break
        if reported is not None:
            self.on_wait(None)
        timings.lease_wait = round(time.monotonic() - started, 4)
        self._began = time.monotonic()
        if timings.stopped:
            self._release()
            return timings
        if not leave:
            return timings
        # Out of the Service before the registry stops listening: /readyz fails, the kubelet's next probe sees
        # it, the endpoints drop the pod; after leave_seconds no new connection is sent here.
        self.health.set_ready(False)
        stop.wait(self.leave_seconds)
        timings.drain_wait = round(time.monotonic() - self._began, 4)
        return timings

    def end(self, stop: threading.Event, *, leave: bool = True) -> None:
        """Back into the Service; hand the turn on only once the endpoints could have taken this pod back."""
        self.health.set_ready(True)
        if leave:
            stop.wait(self.leave_seconds)
        released_at = time.time()  # before the release: nobody else can have it before this moment
        held = self._holding
        self._release()
        log.info("reload turn", extra={"fields": {
            "lease": self.lease.name, "held": held, "taken_at": round(self._taken_at, 4),
            "released_at": round(released_at, 4), "seconds": round(time.monotonic() - self._began, 4)}})

    def _release(self) -> None:
        if not self._holding:
            return
        self._holding = False
        try:
            self.lease.release()
        except LeaseError as exc:  # it expires by itself after its bound
            log.warning("cannot release the reload lease", extra={"fields": {"lease": self.lease.name,
                                                                            "error": exc.args[0]}})


__all__ = ["DEFAULT_LEAVE_SECONDS", "ReplicaTurn", "TurnTimings"]
