"""The pod's notification outbox (docs/design.md §4.7): the registry's only
notification endpoint. The relay (relay.py) takes what the registry posts on the loopback and answers 200 once it
is on disk (store.py); one Sender per endpoint (delivery.py) delivers it. So an old registry's queue empties within
milliseconds of each event and a reload waits for no endpoint; a kill -9 of the agent loses nothing the relay
answered; the endpoints' list and header values are read from the rendered file (endpoints.py) whenever the
applier rewrites it, with no registry restart.

Metrics per endpoint: berth_agent_notifications_pending, _delivered_total, _dropped_total (the size bound, or the
pod's end), _failing_since_timestamp_seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp

from ..core import metrics
from .delivery import Sender
from .endpoints import Endpoint, file_state, read_endpoints
from .report import Report, StatusReport
from .store import EventLog

log = logging.getLogger(__name__)

LOOK_SECONDS = 0.2  # how often the endpoints' file, the cursors and the size bound are looked at


class Outbox:
    name = "outbox"

    def __init__(self, directory: Path, endpoints_file: Path, max_bytes: int, report: Report | None = None) -> None:
        self.log = EventLog(directory, max_bytes)
        self.status = StatusReport(report)  # status.agents.<pod>.notifications
        self.endpoints_file = endpoints_file
        self.senders: dict[str, tuple[Sender, asyncio.Task]] = {}
        self.delivered = asyncio.Event()
        self._seen_file: tuple[int, int, int] | None = None
        self._pending: list[tuple[list[bytes], asyncio.Future]] = []
        self._write = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        # The log's writes and fsyncs in a thread of their own: the relay's answer never waits behind the
        # pipeline's work in the default executor (an apply waiting for a registry holds a thread for seconds).
        self._disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox-disk")

    async def _on_disk(self, call, *args):
        return await asyncio.get_running_loop().run_in_executor(self._disk, call, *args)

    # ---- what the relay calls ------------------------------------------------------------------------------------

    async def store(self, events: list[bytes]) -> None:
        """Return once `events` are on disk (group commit: one fsync for everything that came meanwhile)."""
        done = asyncio.get_running_loop().create_future()
        self._pending.append((events, done))
        self._write.set()
        await done

    async def _writer(self) -> None:
        while True:
            await self._write.wait()
            self._write.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            # An endpoint gets the events stored after the applier wrote it: the file is looked at before each write
            # (a stat), not only every LOOK_SECONDS, so none stored after it slips past a new endpoint.
            self._follow_endpoints()
            try:
                await self._on_disk(self.log.append, [e for events, _ in batch for e in events])
            except OSError as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for _, done in batch:
                if not done.done():
                    done.set_result(None)
            metrics.notifications_stored_total.inc(sum(len(events) for events, _ in batch))
            for sender, _task in self.senders.values():
                sender.wake.set()

    # ---- the loop ------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.create_task(self._writer(), name="outbox-writer")
        try:
            while True:
                try:
                    self._follow_endpoints()
                    if self.delivered.is_set():
                        self.delivered.clear()
                        await self._on_disk(self.log.save_cursors)
                    self._compact()
                except OSError as exc:  # a full or broken volume: said, and tried again at the next look
                    log.error("outbox disk error", extra={"fields": {"errno": exc.errno}})
                self._export()
                await self._tell()
                await asyncio.sleep(LOOK_SECONDS)
        finally:
            writer.cancel()
            for _sender, task in self.senders.values():
                task.cancel()
            await asyncio.gather(writer, *(t for _, t in self.senders.values()), return_exceptions=True)
            with contextlib.suppress(OSError):
                self.log.save_cursors()
            self.log.close()
            self._disk.shutdown(wait=False)
            if self._session is not None:
                await self._session.close()

    def _follow_endpoints(self) -> None:
        state = file_state(self.endpoints_file)
        if state == self._seen_file:
            return
        try:
            endpoints = {e.name: e for e in read_endpoints(self.endpoints_file)}
        except ValueError as exc:
            log.error("outbox endpoints unreadable", extra={"fields": {"error": str(exc)}})
            return
        self._seen_file = state
        if set(endpoints) != set(self.log.cursors):
            self.log.follow(set(endpoints))
            try:  # where a new endpoint starts, on disk before any event is stored for it: a kill -9 keeps it
                self.log.save_cursors()
            except OSError as exc:
                log.error("outbox cursors not saved", extra={"fields": {"errno": exc.errno}})
        for name in list(self.senders):
            if name not in endpoints:
                self.senders.pop(name)[1].cancel()
                for gauge in (metrics.notifications_pending, metrics.notifications_failing_since):
                    with contextlib.suppress(KeyError):
                        gauge.remove(name)  # a removed endpoint holds nothing and fails nowhere
                log.info("outbox endpoint removed", extra={"fields": {"endpoint": name}})
        for name, endpoint in endpoints.items():
            if name in self.senders:
                self.senders[name][0].endpoint = endpoint  # a new URL, header value or bound: from the next try
                continue
            if self._session is None:  # made for the first endpoint: a pod with none loads no HTTP client
                self._session = aiohttp.ClientSession()
            sender = Sender(endpoint, self.log, self._session, self.delivered)
            self.senders[name] = (sender, asyncio.create_task(sender.run(), name=f"outbox-{name}"))
            log.info("outbox endpoint added", extra={"fields": {"endpoint": name, "url": _shown(endpoint)}})

    def _compact(self) -> None:
        for name, count in self.log.compact().items():
            metrics.notifications_dropped_total.labels(endpoint=name).inc(count)
            log.warning("notification events dropped", extra={"fields": {
                "endpoint": name, "events": count, "why": "the outbox reached its size bound"}})

    def _export(self) -> None:
        metrics.outbox_bytes.set(self.log.size())
        for name, (sender, _task) in self.senders.items():
            metrics.notifications_pending.labels(endpoint=name).set(self.log.pending(name))
            metrics.notifications_failing_since.labels(endpoint=name).set(sender.failing_since or 0)

    async def _tell(self) -> None:
        counts = {name: (self.log.pending(name), sender.delivered_count, self.log.dropped.get(name, 0),
                         sender.failing_since) for name, (sender, _task) in self.senders.items()}
        patch = self.status.record(counts, time.time())
        if patch is not None and self.status.report is not None:
            try:
                await self.status.report(patch)
            except Exception as exc:  # noqa: BLE001 - a status write must never end the outbox
                log.warning("outbox status not written", extra={"fields": {"error": type(exc).__name__}})

    def pending(self) -> dict[str, int]:
        return {name: self.log.pending(name) for name in self.senders}

    async def deliver_all(self, seconds: float) -> dict[str, int]:
        """At the pod's end (the registry has exited: nothing more comes): deliver what is held, for at most
        `seconds`; what is still held then is counted as dropped, per endpoint, and returned."""
        deadline = time.monotonic() + seconds
        self._follow_endpoints()
        while any(self.pending().values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = {name: count for name, count in self.pending().items() if count}
        for name, count in left.items():
            self.log.dropped[name] = self.log.dropped.get(name, 0) + count
            metrics.notifications_dropped_total.labels(endpoint=name).inc(count)
            log.warning("notification events dropped", extra={"fields": {
                "endpoint": name, "events": count, "why": f"still undelivered {seconds:g}s after the agent was "
                                                          "told to stop"}})
        with contextlib.suppress(OSError):
            await self._on_disk(self.log.save_cursors)
        await self._tell()
        return left


def _shown(endpoint: Endpoint) -> str:
    """The URL without its user info or query (a password or a token could sit there)."""
    scheme, sep, rest = endpoint.url.split("?", 1)[0].split("#", 1)[0].partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}"


def parse_envelope(body: bytes) -> list[bytes]:
    """Each event of a Distribution envelope (`{"events": [...]}`), as compact JSON. Raises ValueError."""
    envelope = json.loads(body)
    events = envelope.get("events") if isinstance(envelope, dict) else None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ValueError("not a notification envelope")
    return [json.dumps(e, separators=(",", ":")).encode() for e in events]


__all__ = ["LOOK_SECONDS", "Outbox", "parse_envelope"]
