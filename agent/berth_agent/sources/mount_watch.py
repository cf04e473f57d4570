"""MountWatcher: the mounted Secret directories under the mount root (docs/design.md §3).

Each existing source directory is watched non-recursively, so the kubelet's `..data` rename is seen
(docs/upstream.md#k8s-watch-the-directory); the mount root is watched too, so a source directory that appears later
(outside Kubernetes, or a test) gets its own watch at once. A periodic resync re-checks the set of directories and
emits Change("resync"): the safety net for anything a watch missed. Events are emitted as they come (about 9 per
Secret swap, docs/upstream.md#watchdog-events); the pipeline debounces.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from watchdog.events import FileSystemEvent

from berth_api.pod import INPUT_VOLUMES

from ..core import metrics
from ..core.health import Health
from .change import Change, Emit
from .observer import DirectorySource, ObserverFactory

log = logging.getLogger(__name__)

# The Secret volumes of the registry pod, by directory name under the mount root (docs/design.md §3).


class MountWatcher(DirectorySource):
    name = "mounts"

    def __init__(
        self,
        mount_root: Path,
        health: Health,
        *,
        resync_seconds: float = 60.0,
        observer_factory: ObserverFactory | None = None,
        force_polling: bool = False,
        poll_seconds: float = 1.0,
        tick_seconds: float = 5.0,
    ) -> None:
        self.mount_root = Path(mount_root)
        self.health = health
        self.resync_seconds = resync_seconds
        self.tick_seconds = min(tick_seconds, resync_seconds)
        self._emit: Emit | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rescan: asyncio.Event | None = None
        self._init_observer(observer_factory=observer_factory, force_polling=force_polling, poll_seconds=poll_seconds)

    @property
    def watched(self) -> set[Path]:
        return self._observer.watched

    def _wanted_dirs(self) -> list[Path]:
        if not self.mount_root.is_dir():
            return []  # nothing mounted (yet): the resync tick looks again
        return [self.mount_root] + [d for d in (self.mount_root / n for n in INPUT_VOLUMES) if d.is_dir()]

    def _on_event(self, watched: Path, event: FileSystemEvent) -> None:
        """Runs in the observer thread."""
        if watched == self.mount_root:
            changed = Path(str(event.dest_path or event.src_path)).name
            if changed not in INPUT_VOLUMES:
                return
            # A source directory appeared, vanished or was replaced: the run loop re-syncs the watches (not
            # here: scheduling a watch from the observer's own dispatch thread would order locks both ways).
            self._request_rescan()
            source = f"mount:{changed}"
        else:
            source = f"mount:{watched.name}"
        metrics.watch_events_total.labels(source=self.name).inc()
        if self._emit is not None:
            self._emit(Change(source))

    def _request_rescan(self) -> None:
        loop, rescan = self._loop, self._rescan
        if loop is not None and rescan is not None:
            try:
                loop.call_soon_threadsafe(rescan.set)
            except RuntimeError:
                pass  # loop closed: shutting down

    async def _sync_watches(self, emit: Emit) -> None:
        added = await asyncio.to_thread(self._observer.sync, self._wanted_dirs())
        for directory in added:
            if directory == self.mount_root:
                continue
            # Files written between the directory's creation and its new watch were not seen: say so.
            metrics.watch_restarts_total.labels(source=self.name).inc()
            emit(Change(f"mount:{directory.name}"))

    async def run(self, emit: Emit) -> None:
        self._emit = emit
        self._loop = loop = asyncio.get_running_loop()
        self._rescan = asyncio.Event()
        self._observer = self._new_observer()  # a stopped DirObserver stays stopped
        self.health.register(self.name, max_silence_seconds=3 * self.tick_seconds + 30)
        try:
            await asyncio.to_thread(self._observer.start, self._wanted_dirs())
            log.info(
                "watching mounted secrets",
                extra={"fields": {"mount_root": str(self.mount_root),
                                  "dirs": sorted(d.name for d in self.watched), "polling": self.polling}},
            )
            next_resync = loop.time() + self.resync_seconds
            observer_was_alive = True
            while True:
                if self._observer.alive():
                    self.health.beat(self.name)
                elif observer_was_alive:  # the observer thread died: no more beats, and /livez turns 503
                    metrics.watch_errors_total.labels(source=self.name).inc()
                    log.error("mount observer stopped", extra={"fields": {"mount_root": str(self.mount_root)}})
                observer_was_alive = self._observer.alive()
                try:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that lands as the
                    # event is set, and the watcher would then never stop.
                    async with asyncio.timeout(min(self.tick_seconds, max(0.0, next_resync - loop.time()))):
                        await self._rescan.wait()
                except TimeoutError:
                    pass
                if self._rescan.is_set():
                    self._rescan.clear()
                    await self._sync_watches(emit)
                if loop.time() >= next_resync:
                    next_resync = loop.time() + self.resync_seconds
                    await self._sync_watches(emit)
                    emit(Change("resync"))
        finally:
            self._emit = self._loop = self._rescan = None
            self.health.unregister(self.name)
            await asyncio.to_thread(self._observer.stop)


__all__ = ["MountWatcher"]
