"""RegistryFileWatcher: `--registry-file FILE`, the Registry as a YAML file (outside Kubernetes).

The file's DIRECTORY is watched, non-recursively, like the Secret mounts (docs/upstream.md#k8s-watch-the-directory):
editors replace files by rename and a ConfigMap mount swaps `..data`, neither of which a watch on the file itself
sees. Events wake a loop that waits for the directory to be quiet for a moment, re-reads the file and emits only
when what it holds changed; a timer re-reads it too (safety net).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from pathlib import Path

import yaml
from watchdog.events import FileSystemEvent

from ..core import metrics
from ..core.health import Health
from ..mounted.registry_yaml import RegistryFileProblem, read_registry_document
from .change import Change, Emit
from .observer import DirectorySource, ObserverFactory

log = logging.getLogger(__name__)


def read_registry_file(path: Path) -> tuple[dict | None, str | None]:
    """(object, None) or (None, error). The error names the file and never quotes its content."""
    try:
        return read_registry_document(path), None
    except RegistryFileProblem as exc:
        return None, f"registry file {path}: {exc}"


class RegistryFileWatcher(DirectorySource):
    name = "registry-file"

    def __init__(
        self,
        path: Path,
        health: Health,
        *,
        observer_factory: ObserverFactory | None = None,
        force_polling: bool = False,
        poll_seconds: float = 1.0,
        recheck_seconds: float = 30.0,
        settle_seconds: float = 0.1,
    ) -> None:
        self.path = Path(path).absolute()
        self.health = health
        self.recheck_seconds = recheck_seconds
        self.settle_seconds = settle_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._last: tuple[str, str] | None = None  # ("ok", content digest) or ("error", message)
        self._init_observer(observer_factory=observer_factory, force_polling=force_polling, poll_seconds=poll_seconds)

    def _on_event(self, _watched: Path, _event: FileSystemEvent) -> None:
        """Runs in the observer thread: any change in the directory may be ours (a rename onto the file, a
        ConfigMap's ..data swap), so wake the loop, which re-reads and compares."""
        metrics.watch_events_total.labels(source=self.name).inc()
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:
                pass  # loop closed: shutting down

    def _read_state(self) -> tuple[dict | None, str | None, tuple[str, str]]:
        obj, error = read_registry_file(self.path)
        if error is not None:
            return None, error, ("error", error)
        return obj, None, ("ok", hashlib.sha256(yaml.safe_dump(obj, sort_keys=True).encode()).hexdigest())

    def _check(self, emit: Emit) -> None:
        """Blocking (runs in a worker thread): read, compare with what was last emitted, emit a difference."""
        obj, error, state = self._read_state()
        if error is not None and self._last is not None and self._last[0] == "ok":
            # A writer that truncates and then writes leaves the file empty or half-written for a moment: an
            # error must still be there a moment later before it replaces a good Registry.
            time.sleep(self.settle_seconds)
            obj, error, state = self._read_state()
        if state == self._last:
            return
        self._last = state
        if error is not None:
            metrics.watch_errors_total.labels(source=self.name).inc()
            log.warning("registry file unusable", extra={"fields": {"path": str(self.path), "error": error}})
        emit(Change("registry", registry=obj, error=error))

    async def run(self, emit: Emit) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._observer = self._new_observer()  # a stopped DirObserver stays stopped
        self.health.register(self.name, max_silence_seconds=3 * self.recheck_seconds + 30)
        directory = self.path.parent
        try:
            await asyncio.to_thread(self._observer.start, [directory] if directory.is_dir() else [])
            log.info("watching registry file", extra={"fields": {"path": str(self.path), "polling": self.polling}})
            while True:
                await asyncio.to_thread(self._check, emit)
                if directory.is_dir():  # it may have appeared, or been replaced, since the last look
                    await asyncio.to_thread(self._observer.sync, [directory])
                if self._observer.alive():
                    self.health.beat(self.name)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.recheck_seconds):  # not wait_for: see sources/mount_watch.py
                        await self._wake.wait()
                # Trailing debounce: read once the directory has been quiet for settle_seconds, so one save
                # (truncate, write, close; or write aside and rename) is read once, whole.
                while self._wake.is_set():
                    self._wake.clear()
                    await asyncio.sleep(self.settle_seconds)
        finally:
            self._loop = self._wake = None
            self.health.unregister(self.name)
            await asyncio.to_thread(self._observer.stop)


__all__ = ["RegistryFileWatcher", "read_registry_file"]
