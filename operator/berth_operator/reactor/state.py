"""What the handlers of one running operator share (Context), in small parts with one job each: the settings
(Settings), where reconciles run (Workers), what kopf delivered (Seen), what the last reconciles left for later
events (Results), which Registries read which named objects (NameIndex), and the reconciles a change starts
(Wakes). Runs in the operator's event loop: nothing here is locked.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from ..cluster.view import Cluster
from ..core.clock import UtcClock, WallClock
from ..engine.reconcile import Outcome
from .wakeups import Wakeups

# Reconciles in flight at once. A reconcile mostly waits for the API server (each write waits for etcd's
# fsync), and uses little CPU: 16 overlap those waits.
RECONCILE_WORKERS = 16

Key = tuple[str, str]  # a Registry's namespace and name
Named = tuple[str, str, str, str]  # an object a Registry names: apiVersion, kind, namespace, name
Change = tuple[Any, str | None]  # a watched object's cache key and resourceVersion


@dataclass(frozen=True)
class Settings:
    """How this operator was started. clock: the wall clock garbage-collection schedules are read on."""

    agent_image: str
    refresh_interval: float = 60.0  # seconds between the sweeps
    clock: UtcClock = field(default_factory=WallClock)


@dataclass
class Workers:
    """Where reconciles run: a bounded pool of threads of their own, one lock per Registry (its reconciles run one
    at a time), and the counts of reconciles started, running and finished."""

    executor: concurrent.futures.ThreadPoolExecutor = field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(RECONCILE_WORKERS, "berth-reconcile"))
    # Taken before a reconcile reads or copies its body: the ones queued behind it hold nothing.
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(RECONCILE_WORKERS))
    locks: dict[Key, asyncio.Lock] = field(default_factory=dict)
    started: int = 0  # for tests that check there is no retry loop
    running: int = 0
    completed: int = 0  # successfully or not

    def lock(self, key: Key) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())


@dataclass
class Seen:
    """What kopf last delivered of each Registry: its body, as handlers.compact made it (the sweep reconciles from
    it), and digests of what, outside the spec, reconciles at once when it changes (kopf's diff ignores it)."""

    bodies: dict[Key, bytes] = field(default_factory=dict)
    agents: dict[Key, str] = field(default_factory=dict)  # status.agents
    gc: dict[Key, str] = field(default_factory=dict)  # the run-now annotation, the GC runner's records

    def remember(self, key: Key, body: bytes, *, agents: str, gc: str) -> str | None:
        """Keep what kopf delivered; the trigger of a reconcile when a digest seen before changed."""
        agents_before, gc_before = self.agents.get(key), self.gc.get(key)
        self.bodies[key], self.agents[key], self.gc[key] = body, agents, gc
        if agents_before is not None and agents_before != agents:
            return "agents"
        if gc_before is not None and gc_before != gc:
            return "garbage collection"
        return None

    def forget(self, key: Key) -> None:
        self.bodies.pop(key, None)
        self.agents.pop(key, None)
        self.gc.pop(key, None)


@dataclass
class Results:
    """What each Registry's last reconcile left for later events: the resourceVersion of its status write (a
    trigger's body older than that is read again), whether the sweep reconciles it (polled: its status depends on
    what no watch reports, or it failed) and whether it waits for an optional API the cluster lacks."""

    written: dict[Key, str] = field(default_factory=dict)
    polled: set[Key] = field(default_factory=set)
    awaiting_api: set[Key] = field(default_factory=set)

    def record(self, key: Key, outcome: Outcome) -> None:
        if outcome.status_version is not None:
            self.written[key] = outcome.status_version
        if outcome.polled and not outcome.gone:
            self.polled.add(key)
        else:
            self.polled.discard(key)
        if outcome.awaits_api and not outcome.gone:
            self.awaiting_api.add(key)
        else:
            self.awaiting_api.discard(key)

    def forget(self, key: Key) -> None:
        self.written.pop(key, None)
        self.polled.discard(key)
        self.awaiting_api.discard(key)


@dataclass
class NameIndex:
    """Wakes by name (named.py): the objects each Registry's last reconcile read from the server, and the reverse.

    A named object that changes while a reconcile that read it runs is indexed only once that reconcile ends: its
    change is kept (numbered) while any reconcile runs, and a reconcile that began before it wakes again."""

    read_by: dict[Key, frozenset[Named]] = field(default_factory=dict)
    readers: dict[Named, set[Key]] = field(default_factory=dict)
    changes: int = 0  # named objects' changes so far: a reconcile notes the count when it begins
    changed_while_running: dict[Named, int] = field(default_factory=dict)

    def index(self, key: Key, named: frozenset[Named]) -> None:
        """The objects this Registry's last reconcile read (none: it is gone)."""
        for gone in self.read_by.get(key, frozenset()) - named:
            readers = self.readers.get(gone)
            if readers is not None:
                readers.discard(key)
                if not readers:
                    del self.readers[gone]
        for read in named:
            self.readers.setdefault(read, set()).add(key)
        if named:
            self.read_by[key] = named
        else:
            self.read_by.pop(key, None)

    def changed(self, read: Named, *, running: bool) -> list[Key]:
        """A named object changed: the Registries that read it, in order."""
        self.changes += 1
        if running:
            self.changed_while_running[read] = self.changes
        return sorted(self.readers.get(read, ()))

    def missed(self, named: frozenset[Named], since: int, *, running: bool) -> list[Named]:
        """What a reconcile that began at change `since` read and that changed after: no wake found its Registry
        then. The changes kept are dropped once no reconcile runs."""
        missed = sorted(read for read in named if self.changed_while_running.get(read, 0) > since)
        if not running:
            self.changed_while_running.clear()
        return missed

    def readers_of_kind(self, api_version: str, kind: str) -> list[Key]:
        return sorted({reader for read, readers in self.readers.items() if read[:2] == (api_version, kind)
                       for reader in readers})


@dataclass
class Wakes:
    """Reconciles started by a change rather than by kopf: queued ones (waking: the changes each is for, until its
    reconcile begins), those in flight, and the per-Registry timers. They run in kopf_context, copied from a kopf
    handler (kopf's Event poster needs it); None before kopf's first Registry event."""

    timers: Wakeups
    kopf_context: contextvars.Context | None = None
    waking: dict[Key, list[Change]] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        assert self.kopf_context is not None
        task = asyncio.create_task(work, name=name, context=self.kopf_context.copy())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.timers.close()


@dataclass
class Context:
    """State shared by every handler of one running operator. caches_ready is set once the caches have listed
    (None: no caches); sweeper is the periodic sweep's task, started with kopf's first Registry event."""

    cluster: Cluster
    settings: Settings
    caches_ready: asyncio.Event | None = None
    workers: Workers = field(default_factory=Workers)
    seen: Seen = field(default_factory=Seen)
    results: Results = field(default_factory=Results)
    names: NameIndex = field(default_factory=NameIndex)
    wakes: Wakes = field(init=False)
    sweeper: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self.wakes = Wakes(Wakeups(self.settings.clock))

    @property
    def reconciles(self) -> int:
        """Reconciles started (tests check there is no retry loop)."""
        return self.workers.started

    @property
    def completed(self) -> int:
        """Reconciles finished, successfully or not."""
        return self.workers.completed
