"""The upstream watch: what a pull-through cache's upstream answers, for status.agents.<pod>.upstream
(docs/decisions/0020-pull-through-cache-restarts.md).

Every check of the upstream (apply/preflight_proxy.check_upstream) publishes its result: the pre-flight's before
a restart, and this watch's own. The watch checks the upstream of the config the registry runs (the applier's
verified config), with its credentials, every `interval` seconds (a GET of /v2/, a token when the upstream asks
for one, /v2/ again: two or three small requests), and turns the latest result into the status record:
`reachable`, `auth` (what /v2/ asks for), `checkedAt`, and `lastAuthFailure` (the last refusal of the
credentials: the upstream's HTTP status and short reason, kept after a later success). The reporter writes the
record only when it changes, or every 10 minutes. Nothing here holds or logs a credential; the check runs in a
worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from berth_api.timestamps import format_time

from ..core import metrics
from ..sources import Emit
from .applier import Applier
from .preflight_proxy import UpstreamCheck, UpstreamRefused, check_upstream, distribution_of, publish, take

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 300.0
REFRESH_SECONDS = 600.0  # an unchanged record is written again (a fresh checkedAt) this often

class UpstreamWatch:
    name = "upstream-watch"

    def __init__(self, applier: Applier, *, interval: float = INTERVAL_SECONDS, tick: float = 1.0,
                 on_record: Callable[[dict[str, Any] | None], Awaitable[None]] | None = None) -> None:
        self.applier, self.interval, self.tick = applier, interval, tick
        self.on_record = on_record  # status.agents.<pod>.upstream
        self.last_auth_failure: dict[str, Any] | None = None
        self.latest: UpstreamCheck | None = None
        self._reported: tuple | None = None
        self._written_at = 0.0

    def record(self) -> dict[str, Any] | None:
        if self.latest is None:
            return None
        check = self.latest
        return {"url": check.url, "reachable": check.reachable, "auth": check.scheme or None,
                "checkedAt": format_time(check.checked_at), "lastAuthFailure": self.last_auth_failure}

    def absorb(self, checks: list[UpstreamCheck]) -> bool:
        """Take published results in order; True when the record (but for checkedAt) changed."""
        for check in checks:
            self.latest = check
            if check.reachable and check.failure_status and check.authenticated is False:
                self.last_auth_failure = {"status": check.failure_status, "reason": check.failure_reason[:256],
                                          "at": format_time(check.checked_at)}
                metrics.upstream_auth_failures_total.inc()  # deploy/monitoring pages on it
        record = self.record()
        # Whether the credentials were accepted is part of what changed: after a refusal, a success writes a
        # checkedAt newer than lastAuthFailure.at, which is how status says the credentials work again.
        key = None if record is None else (*((k, str(v)) for k, v in record.items() if k != "checkedAt"),
                                            self.latest.authenticated if self.latest else None)
        now = time.monotonic()
        changed = key != self._reported or (record is not None and now - self._written_at >= REFRESH_SECONDS)
        if changed:
            self._reported, self._written_at = key, now
        return changed

    def check_running(self) -> None:
        """Check the running config's upstream with its credentials (a worker thread); publishes the result."""
        current = self.applier.current
        target = current.proxy if current is not None else None
        if target is None:
            return
        try:
            publish(check_upstream(target.remote_url, target.username, target.password,
                                   major=distribution_of(current)))
        except UpstreamRefused as exc:
            publish(exc.check)

    async def run(self, emit: Emit) -> None:
        waited = self.interval  # check once soon after start
        reported_none = False
        while True:
            current = self.applier.current
            if current is None or current.proxy is None:
                if not reported_none and self.latest is not None and self.on_record is not None:
                    self.latest, self.last_auth_failure, self._reported = None, None, None
                    await self.on_record(None)  # no longer a proxy: the record goes
                reported_none = True
                take()
                await asyncio.sleep(self.tick * 5)  # no proxy: only look for one now and then
                continue
            reported_none = False
            if waited >= self.interval:
                waited = 0.0
                await asyncio.to_thread(self.check_running)
            taken = take()
            if taken and self.absorb(taken) and self.on_record is not None:
                await self.on_record(self.record())
            await asyncio.sleep(self.tick)
            waited += self.tick


__all__ = ["INTERVAL_SECONDS", "UpstreamWatch"]
