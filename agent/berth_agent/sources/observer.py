"""A watchdog observer for a few directories, non-recursive, with the polling observer as fallback.

Directories, not files: the kubelet's AtomicWriter swaps a Secret by renaming `..data_tmp` to `..data`, which a
watch on the directory sees and a watch on a file symlink or on `..data` does not
(docs/upstream.md#k8s-watch-the-directory).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

from ..core import metrics

log = logging.getLogger(__name__)

# Events that mean content changed. Opened and closed-without-write are left out: the agent reads the files it
# watches (and so does the pipeline), and counting those reads as changes would make every read a new change.
CHANGE_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileModifiedEvent,
    DirModifiedEvent,
    FileClosedEvent,
]

ObserverFactory = Callable[[], BaseObserver]

INOTIFY_LIMITS = (errno.EMFILE, errno.ENFILE, errno.ENOSPC)  # instances, open files, watches


class _Callback(FileSystemEventHandler):
    def __init__(self, on_event: Callable[[FileSystemEvent], None]) -> None:
        self._on_event = on_event

    def on_any_event(self, event: FileSystemEvent) -> None:
        self._on_event(event)


class DirObserver:
    """Watches a changing set of directories; `on_event(watched_dir, event)` runs in the observer's thread.

    start, sync and stop block (they start and join threads), so callers run them in worker threads; a lock
    orders them, and stop is final: a start or sync that a cancelled caller left running in its thread, and that
    gets the lock only after stop, does nothing instead of leaving watch threads behind. One instance per run.
    """

    def __init__(
        self,
        on_event: Callable[[Path, FileSystemEvent], None],
        *,
        source: str,
        observer_factory: ObserverFactory | None = None,
        force_polling: bool = False,
        poll_seconds: float = 1.0,
    ) -> None:
        self._on_event = on_event
        self._source = source  # metrics label
        self._factory = observer_factory or Observer
        self._poll_seconds = poll_seconds
        self.polling = force_polling
        self._observer: BaseObserver | None = None
        self._watches: dict[Path, ObservedWatch] = {}
        # Never taken by on_event (the dispatch thread holds watchdog's own lock then): no lock-order cycle.
        self._lock = threading.RLock()
        self._closed = False

    @property
    def watched(self) -> set[Path]:
        """Directories with a live watch (a watch dies with its directory)."""
        watches = self._watches.copy()  # copy() is atomic under the GIL; sync() runs in a worker thread
        observer = self._observer
        if observer is None:
            return set()
        live = {emitter.watch for emitter in list(observer.emitters) if emitter.is_alive()}
        return {directory for directory, watch in watches.items() if watch in live}

    def start(self, dirs: list[Path]) -> None:
        with self._lock:
            if self._closed:
                return
            self._start(dirs)

    def _start(self, dirs: list[Path]) -> None:
        if not self.polling:
            try:
                self._start_with(self._factory, dirs)
                return
            except OSError as exc:
                self._fall_back(exc)
        self._start_with(lambda: PollingObserver(timeout=self._poll_seconds), dirs)

    def _fall_back(self, exc: OSError) -> None:
        # inotify limits are per user per node (max_user_instances, max_user_watches): when they are hit,
        # watchdog raises EMFILE or ENOSPC (docs/upstream.md#watchdog-inotify-limits). Polling costs a stat per entry
        # per second.
        metrics.watch_errors_total.labels(source=self._source).inc()
        log.warning(
            "inotify unavailable, falling back to polling",
            extra={"fields": {"source": self._source, "errno": exc.errno, "error": os.strerror(exc.errno or 0)}},
        )
        self._stop_quietly()
        self.polling = True

    def _start_with(self, factory: ObserverFactory, dirs: list[Path]) -> None:
        self._observer = factory()
        self._watches = {}
        for directory in dirs:
            self._schedule(directory)
        self._observer.start()

    def _schedule(self, directory: Path) -> None:
        assert self._observer is not None
        handler = _Callback(lambda event, d=directory: self._on_event(d, event))
        self._watches[directory] = self._observer.schedule(
            handler, str(directory), recursive=False, event_filter=CHANGE_EVENTS
        )

    def sync(self, dirs: list[Path]) -> list[Path]:
        """Watch exactly `dirs` from now on; returns the directories newly watched."""
        with self._lock:
            if self._closed or self._observer is None:
                return []
            return self._sync(dirs)

    def _sync(self, dirs: list[Path]) -> list[Path]:
        wanted = set(dirs)
        for gone in set(self._watches) - wanted:
            self._unschedule(gone)
        added = []
        for directory in dirs:
            if directory in self._watches and not self._watch_alive(directory):
                self._unschedule(directory)  # the directory was deleted and made again: the old watch is dead
            if directory not in self._watches:
                try:
                    self._schedule(directory)
                    added.append(directory)
                except OSError as exc:
                    self._watches.pop(directory, None)
                    if exc.errno in INOTIFY_LIMITS and not self.polling:
                        # The limit was reached after start: watch everything by polling from now on.
                        self._fall_back(exc)
                        self._start_with(lambda: PollingObserver(timeout=self._poll_seconds), dirs)
                        return list(dirs)
                    # The directory is gone again: the next sync looks again.
                    metrics.watch_errors_total.labels(source=self._source).inc()
                    log.warning(
                        "cannot watch directory",
                        extra={"fields": {"source": self._source, "path": str(directory),
                                          "error": os.strerror(exc.errno or 0)}},
                    )
        return added

    def _watch_alive(self, directory: Path) -> bool:
        assert self._observer is not None
        watch = self._watches[directory]
        # An inotify emitter stops itself when its directory is deleted (IN_DELETE_SELF).
        return any(emitter.watch == watch and emitter.is_alive() for emitter in self._observer.emitters)

    def _unschedule(self, directory: Path) -> None:
        watch = self._watches.pop(directory)
        try:
            assert self._observer is not None
            self._observer.unschedule(watch)
        except (KeyError, OSError):
            pass  # already gone with its directory

    def alive(self) -> bool:
        return self._observer is not None and self._observer.is_alive()

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            self._stop_quietly()

    def _stop_quietly(self) -> None:
        observer, self._observer = self._observer, None
        self._watches = {}
        if observer is None:
            return
        try:
            observer.unschedule_all()
            if observer.is_alive():
                observer.stop()
                observer.join(timeout=5)
        except Exception:  # noqa: BLE001 - stopping a half-started observer must not hide the original failure
            log.debug("observer stop failed", exc_info=True)


class DirectorySource:
    """Shared by the sources that watch directories (mounts, registry file): how their DirObserver is made,
    and whether it fell back to polling. A subclass sets `name`, defines `_on_event(watched, event)` and calls
    `_init_observer` in its __init__; `run` makes a fresh observer per run (a stopped one stays stopped)."""

    name: str

    def _on_event(self, watched: Path, event: FileSystemEvent) -> None:
        raise NotImplementedError

    def _init_observer(
        self, *, observer_factory: ObserverFactory | None, force_polling: bool, poll_seconds: float
    ) -> None:
        self._new_observer = functools.partial(
            DirObserver,
            self._on_event,
            source=self.name,
            observer_factory=observer_factory,
            force_polling=force_polling,
            poll_seconds=poll_seconds,
        )
        self._observer = self._new_observer()

    @property
    def polling(self) -> bool:
        """True when inotify was unavailable and the polling observer is in use."""
        return self._observer.polling
