"""This pod's acknowledgement that it serves read-only for a GC request (docs/design.md §4.5).

`status.agents.<pod>.readOnlyFor: <id>` is written only when
- the registry verified serving is the read-only render made for that request (the pipeline says so after a
  successful round), and
- no older registry process still runs: after a hitless reload the previous, writable registry keeps
  draining its requests, and an upload it finishes during the mark phase is exactly the data loss GC must
  not cause. An older process is one that started before config.yml was last written (a draining one, or an
  orphan from before an agent restart): polled every `poll_seconds` until they are gone.
It is set back to null once the pipeline reports the spec's readonly serving again. A failed write is retried.

Log lines `gc read-only` / `gc writable` {request_id}; metrics `gc_read_only` (1 from the first read-only
serve to the writable serve) and `gc_read_only_seconds` (that window, set when it ends).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..core import metrics
from ..restart.procfs import RegistryProcess, find_registry_processes, started_after

log = logging.getLogger(__name__)

_UNKNOWN = object()  # what our record says before the first Registry object was seen
RETRY_SECONDS = 1.0


def older_registries(config_path: Path) -> list[RegistryProcess]:
    """Registry processes serving config_path that started before its last write: still draining, or stale."""
    return [p for p in find_registry_processes(config_path) if not started_after(p, config_path)]


class GcAck:
    def __init__(self, write: Callable[[str | None], Awaitable[bool]], pod: str, config_path: Path,
                 current_config: Callable[[], bytes | None], *, poll_seconds: float = 0.2,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._write = write  # ApiReporter.read_only_for
        self.pod, self.config_path = pod, config_path
        self._current_config = current_config  # the config verified serving now (Applier.current)
        self.poll_seconds = poll_seconds
        self._clock, self._wall = clock, wall
        self.written: object = _UNKNOWN  # the readOnlyFor value on status (as far as we know)
        self._target: tuple[str | None, bytes | None] = (None, None)  # (request id, its read-only config)
        self._read_only_id: str | None = None  # the request this pod serves read-only for
        self._since: float | None = None  # first read-only serve of the current window
        self._task: asyncio.Task | None = None

    def _window_start_on_disk(self) -> float | None:
        """A window an earlier agent process began: config.yml was last written when the pod switched to
        read-only (a config edit during the run writes it again, so this may be later, never earlier)."""
        try:
            age = max(0.0, self._wall() - self.config_path.stat().st_mtime)
        except OSError:
            return None
        return self._clock() - age

    def observe(self, registry: dict | None, request_id: str | None, serving_config: bytes) -> None:
        """After a successful round: the registry serves `serving_config`, rendered read-only for `request_id`
        (None: the spec's readonly). Called on the event loop."""
        if self.written is _UNKNOWN:  # a record left by an earlier agent process in this pod
            record = (((registry or {}).get("status") or {}).get("agents") or {}).get(self.pod) or {}
            self.written = record.get("readOnlyFor") if isinstance(record, dict) else None
            self._read_only_id = self.written if isinstance(self.written, str) else None
            if self._read_only_id is not None:
                self._since = self._window_start_on_disk()
                metrics.gc_read_only.set(1)  # set back to 0 below if the pod serves writable already
        if request_id is None and self._read_only_id is not None:
            seconds = round(self._clock() - self._since, 3) if self._since is not None else None
            metrics.gc_read_only.set(0)
            if seconds is not None:
                metrics.gc_read_only_seconds.set(seconds)
            log.info("gc writable", extra={"fields": {"request_id": self._read_only_id,
                                                      "read_only_seconds": seconds}})
            self._since, self._read_only_id = None, None
        elif request_id is not None:
            if self._since is None:
                self._since = self._clock()
                metrics.gc_read_only.set(1)
            self._read_only_id = request_id
        self._target = (request_id, serving_config if request_id is not None else None)
        if self.written != request_id and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._settle(), name="gc-ack")

    async def _settle(self) -> None:
        while True:
            request_id, config = self._target
            if self.written == request_id:
                return
            if request_id is not None:
                if self._current_config() != config:
                    return  # another config serves now: the next round observes again
                older = await asyncio.to_thread(older_registries, self.config_path)
                if older:
                    await asyncio.sleep(self.poll_seconds)
                    continue
                if self._current_config() != config:
                    return
            if not await self._write(request_id):
                await asyncio.sleep(RETRY_SECONDS)
                continue
            self.written = request_id
            if request_id is not None:
                log.info("gc read-only", extra={"fields": {"request_id": request_id}})

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


__all__ = ["GcAck", "older_registries"]
