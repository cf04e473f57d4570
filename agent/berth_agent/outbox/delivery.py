"""One endpoint's delivery from the outbox's log: in order, at least once, each event in an envelope of its own
(`{"events": [EVENT]}`, as Distribution 3 posts them), with the endpoint's headers and timeout. A failed POST is
tried again as Distribution's breaker does: at once up to `threshold` failures in a row, then after `backoff` each
time. An event the endpoint ignores (by action or media type) is passed over. The endpoint may change between
tries (a rotated header): each try reads it anew."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from ..core import metrics
from .endpoints import Endpoint
from .store import EventLog

MEDIA_TYPE = "application/vnd.docker.distribution.events.v2+json"
RETRY_SECONDS = 0.05  # between two tries below the threshold: no hot loop on an endpoint that refuses at once
BATCH = 64  # records read from the log at a time


class Sender:
    def __init__(self, endpoint: Endpoint, log: EventLog, session: aiohttp.ClientSession,
                 delivered: asyncio.Event) -> None:
        self.endpoint, self.log, self.session = endpoint, log, session
        self.wake = asyncio.Event()  # set when events were stored
        self.delivered = delivered  # set after each delivery: cursors to save
        self.failing_since: float | None = None  # wall clock of the first failure in a row
        self.failures = 0
        self.delivered_count = 0  # since the agent started (status.agents.<pod>.notifications)

    async def run(self) -> None:
        name = self.endpoint.name
        while True:
            self.wake.clear()
            records = self.log.after(self.log.cursors.get(name, self.log.last_seq), BATCH)
            if not records:
                await self.wake.wait()
                continue
            for seq, raw in records:
                endpoint = self.endpoint
                if not (endpoint.ignored_actions or endpoint.ignored_media_types) or endpoint.wants(json.loads(raw)):
                    await self._deliver(raw)
                with self.log.lock:
                    if name in self.log.cursors and self.log.cursors[name] < seq:
                        self.log.cursors[name] = seq
                self.delivered.set()

    async def _deliver(self, raw: bytes) -> None:
        body = b'{"events":[' + raw + b"]}"
        while True:
            endpoint = self.endpoint
            headers = [("Content-Type", MEDIA_TYPE), *endpoint.headers]
            try:
                async with self.session.post(endpoint.url, data=body, headers=headers, allow_redirects=False,
                                             timeout=aiohttp.ClientTimeout(total=endpoint.timeout)) as response:
                    await response.read()
                    ok = 200 <= response.status < 400  # Distribution's httpSink: 2xx and 3xx are delivered
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
                ok = False
            if ok:
                self.failures, self.failing_since = 0, None
                self.delivered_count += 1
                metrics.notifications_delivered_total.labels(endpoint=endpoint.name).inc()
                return
            self.failures += 1
            if self.failing_since is None:
                self.failing_since = time.time()
            await asyncio.sleep(endpoint.backoff if self.failures >= endpoint.threshold else RETRY_SECONDS)


__all__ = ["MEDIA_TYPE", "Sender"]
