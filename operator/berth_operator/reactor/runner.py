"""Run the operator: kopf with our handlers, settings and credentials, in the current event loop.

Used by cli.py (the berth-operator process) and by the tests (in a thread, against the kmock fixture).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import signal
import threading
import urllib.parse
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import kopf
from kubernetes.client import Configuration

from ..cluster.caches import Caches
from ..cluster.discovery import Discovery
from ..cluster.named import NamedWatches
from ..cluster.view import Cluster
from ..core.clock import UtcClock, WallClock
from ..core.identity import own_identity
from ..core.kinds import CACHED_KINDS, CLASS_KINDS, NAMED_KINDS
from ..kube.client import Kube
from .handlers import apis_changed, make_registry, named_changed, names_resynced, wake
from .leader import LeaderElector, LeaseSettings
from .state import RECONCILE_WORKERS, Context, Settings

# Persist kopf's own bookkeeping in our annotations, never in status (the CRD's status schema has no
# room for status.kopf, and the API server would prune it).
ANNOTATION_PREFIX = "berth.dev"

logger = logging.getLogger("berth.operator.runner")


def exact_names(namespaces: Collection[str]) -> bool:
    """Namespaces named one by one (no kopf glob or negation): a namespaced install's."""
    return bool(namespaces) and not any(set(ns) & set("*?![]") for ns in namespaces)


def settings(*, peering_standalone: bool = True, scanning: bool = True) -> kopf.OperatorSettings:
    """scanning False: kopf neither lists nor watches Namespaces and CRDs cluster-wide (it reads the API's
    discovery once at start), which a namespaced install's RBAC does not grant: given exact names it needs neither,
    and without this it would log a refusal at every start."""
    s = kopf.OperatorSettings()
    s.scanning.disabled = not scanning
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    s.posting.reporting_component = "berth-operator"
    s.posting.event_name_prefix = "berth-"
    # Our own events (kopf.event) are always posted; kopf's per-handler log lines only from warnings up.
    s.posting.level = logging.WARNING
    s.peering.standalone = peering_standalone
    # Watches are re-opened at least every 5 minutes (idle connections get dropped:
    # docs/upstream.md#k8s-watch-timeouts).
    s.watching.server_timeout = 270
    s.watching.client_timeout = 300
    return s


def connection_info(configuration: Configuration) -> kopf.ConnectionInfo:
    """kopf's credentials from the same Configuration the official client uses (one source of truth)."""
    if configuration.refresh_api_key_hook is not None:
        configuration.refresh_api_key_hook(configuration)  # in-cluster tokens rotate
    token = (configuration.api_key or {}).get("authorization") or (configuration.api_key or {}).get("BearerToken")
    if token and token.lower().startswith("bearer "):
        token = token[7:]
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme="Bearer" if token else None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


class LeadershipLost(Exception):
    """The leader could not renew its Lease in time: it stopped acting; the process should exit."""


async def run(
    configuration: Configuration,
    *,
    agent_image: str,
    namespaces: Collection[str] = (),
    clusterwide: bool = False,
    liveness: str | None = None,
    refresh_interval: float = 60.0,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Event | threading.Event | None = None,
    context: dict[str, Any] | None = None,
    leader: LeaseSettings | None = None,
    clock: UtcClock | None = None,
) -> None:
    """Run until stop_flag is set (or a signal, when in the main thread).

    With leader, stand by until this process holds the Lease (leader.py), then act; raises LeadershipLost
    when the Lease could not be renewed. Without, act at once (one operator must be all there is).
    context, when given, receives the handlers' Context under "ctx" (tests read its counters). clock: the
    wall clock garbage-collection schedules are read on (tests pass one they set).
    """
    if not clusterwide and not namespaces:
        raise ValueError("name the namespaces to watch, or run cluster-wide")
    stopping = asyncio.Event()
    _stop_on_signals(stopping)
    mirror = asyncio.create_task(_mirror(stop_flag, stopping)) if stop_flag is not None else None
    try:
        await _run(configuration, leader=leader, agent_image=agent_image, namespaces=namespaces,
                   clusterwide=clusterwide, liveness=liveness, refresh_interval=refresh_interval, stopping=stopping,
                   ready_flag=ready_flag, context=context, clock=clock or WallClock())
    finally:
        if mirror is not None:
            mirror.cancel()
            await asyncio.gather(mirror, return_exceptions=True)


def _stop_on_signals(stopping: asyncio.Event) -> None:
    """SIGTERM and SIGINT set `stopping` from the process's start (main thread only), not only once kopf runs: a
    signal while standing by, or between taking the Lease and kopf's own handlers (the stand-by's health server
    closing, the caches starting), stops the operator cleanly and releases the Lease. Without, that gap had the
    default action: killed by the signal, the Lease left to expire. kopf replaces these with its own once it
    starts, and _run_kopf puts them back."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()

    def stop(sig: signal.Signals) -> None:
        if not stopping.is_set():
            logger.info("%s received: stopping", sig.name)
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig)


async def _run(configuration: Configuration, *, leader: LeaseSettings | None, liveness: str | None,
               stopping: asyncio.Event, **options: Any) -> None:
    if leader is None:
        await _operate(configuration, may_write=None, liveness=liveness, stopping=stopping, **options)
        return
    # Its own client with a short timeout: a hung renewal must not outlast the renew deadline.
    elector = LeaderElector(Kube(configuration, timeout=leader.renew_deadline / 2), leader)
    try:
        if not await _stand_by(elector, liveness, stopping):
            return
        operating = asyncio.create_task(_operate(configuration, may_write=elector.may_write, liveness=liveness,
                                                 stopping=stopping, **options))
        keeping = asyncio.create_task(elector.keep())
        stopped = asyncio.create_task(stopping.wait())
        await asyncio.wait({operating, keeping, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if keeping.done() and not operating.done() and not stopping.is_set():
            operating.cancel()
            await asyncio.gather(operating, return_exceptions=True)
            raise LeadershipLost(f"lost the leader Lease {leader.namespace}/{leader.name}")
        if stopping.is_set():
            logger.info("asked to stop: releasing the leader Lease %s/%s before kopf has stopped", leader.namespace,
                        leader.name)
        keeping.cancel()
        await asyncio.gather(keeping, stopped, return_exceptions=True)
        # Asked to stop (a rollout, a drain): hand the Lease over now, not after kopf's shutdown (its workers,
        # the watches, the caches' threads; about 0.1 s, see _operate). The release is the fence first: from it on,
        # this process sends no write (may_write), so the standby may act at once. Waiting, the pod a rollout
        # makes in its place had time to start, see the Lease still held, and race the standby for it.
        await asyncio.to_thread(elector.release)
        await asyncio.gather(operating, return_exceptions=True)
        operating.result()
    finally:
        await asyncio.to_thread(elector.release)
        elector.kube.close()


async def _operate(
    configuration: Configuration,
    *,
    may_write: Callable[[], bool] | None,
    agent_image: str,
    namespaces: Collection[str],
    clusterwide: bool,
    liveness: str | None,
    refresh_interval: float,
    stopping: asyncio.Event,
    ready_flag: asyncio.Event | threading.Event | None,
    context: dict[str, Any] | None,
    clock: UtcClock,
) -> None:
    """kopf with our handlers and the caches, until stopped."""
    relay = _Relay(asyncio.get_running_loop())
    watches = _Watches.open(configuration, namespaces, clusterwide, relay)
    # The reconciles: one connection per worker.
    cluster = Cluster(Kube(_pooled(configuration, RECONCILE_WORKERS + 4), may_write=may_write), watches.caches,
                      served=watches.discovery.serves, classes=watches.classes)
    ctx = relay.ctx = Context(cluster=cluster, settings=Settings(agent_image, refresh_interval, clock),
                              caches_ready=asyncio.Event())
    if context is not None:
        context["ctx"] = ctx
    registry = make_registry(ctx)
    watches.start()
    synced = asyncio.create_task(_set_when(watches.caches, ctx.caches_ready))
    try:
        await _run_kopf(registry, configuration, namespaces=namespaces, clusterwide=clusterwide, liveness=liveness,
                        stopping=stopping, ready_flag=ready_flag)
    finally:
        synced.cancel()
        await asyncio.gather(synced, return_exceptions=True)
        await watches.stop()
        ctx.workers.executor.shutdown(wait=False, cancel_futures=True)
        cluster.close()
        logger.info("stopped: kopf, the caches and the watches")


@dataclass
class _Relay:
    """What the watches hear (each method is called in the thread of the watch it is given to: an informer's, a
    named watch's, discovery's), handed to the handlers in the loop's thread. Until the Context exists (it needs
    the watches' caches) it is dropped: kopf's first events reconcile every Registry anyway."""

    loop: asyncio.AbstractEventLoop
    ctx: Context | None = None

    def owned_changed(self, namespace: str, name: str, key: Any, version: str | None) -> None:
        self._call(wake, namespace, name, (key, version))

    def named_changed(self, key: Any, version: str | None) -> None:
        self._call(named_changed, (key, version))

    def class_changed(self, _namespace: str, _owner: str, key: Any, version: str | None) -> None:
        self.named_changed(key, version)

    def names_resynced(self, api_version: str, kind: str) -> None:
        self._call(names_resynced, api_version, kind)

    def served_changed(self, discovery: Discovery, kinds: frozenset[tuple[str, str]]) -> None:
        if self.ctx is not None:
            self._call(apis_changed, all(discovery.serves(*kind) for kind in kinds))

    def _call(self, handler: Callable[..., None], *args: Any) -> None:
        if self.ctx is not None:
            self.loop.call_soon_threadsafe(handler, self.ctx, *args)


@dataclass
class _Watches:
    """Discovery (one open watch, of CRDs), the caches of what Berth owns (one informer per kind and namespace), the
    watches of the objects Registries name (as many) and the cache of the classes a spec names (cluster-wide, never
    waited for: until listed, a reconcile GETs them). Each with a client whose pool fits its connections."""

    discovery: Discovery
    caches: Caches
    named: NamedWatches
    classes: Caches

    @classmethod
    def open(cls, configuration: Configuration, namespaces: Collection[str], clusterwide: bool,
             relay: _Relay) -> _Watches:
        discovery = Discovery(Kube(_pooled(configuration, 2)))
        discovery.on_change(lambda kinds: relay.served_changed(discovery, kinds))
        scope = None if clusterwide else namespaces
        per_namespace = len(namespaces) or 1
        caches = Caches(Kube(_pooled(configuration, len(CACHED_KINDS) * per_namespace + 2)), scope,
                        on_change=relay.owned_changed, discovery=discovery)
        named = NamedWatches(Kube(_pooled(configuration, len(NAMED_KINDS) * per_namespace + 2)), scope,
                             on_change=relay.named_changed, on_resync=relay.names_resynced, discovery=discovery)
        classes = Caches.of_classes(Kube(_pooled(configuration, len(CLASS_KINDS) + 2)), relay.class_changed,
                                    discovery)
        return cls(discovery, caches, named, classes)

    def start(self) -> None:
        self.discovery.start()
        self.caches.start()
        self.classes.start()
        self.named.start()

    async def stop(self) -> None:
        await asyncio.to_thread(self.caches.stop)
        await asyncio.to_thread(self.classes.stop)
        await asyncio.to_thread(self.named.stop)
        await asyncio.to_thread(self.discovery.stop)
        self.discovery.kube.close()


async def _run_kopf(registry: kopf.OperatorRegistry, configuration: Configuration, *, namespaces: Collection[str],
                    clusterwide: bool, liveness: str | None, stopping: asyncio.Event,
                    ready_flag: asyncio.Event | threading.Event | None) -> None:
    """kopf with our handlers and settings, logging in with configuration's credentials, until stopping is set."""

    @kopf.on.login(registry=registry, id="login")
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(configuration)

    # kopf.operator() is these two calls. Between them, kopf's signal handlers replace ours. Theirs end kopf by its
    # own signal future, leaving its waiter on `stopping` pending, which run_tasks waits 5 s for; and the Lease was
    # released only after that. Ours again: a signal sets `stopping` (kopf's stop flag), and _run hands the Lease
    # over at once.
    existing = set(asyncio.all_tasks())
    tasks = await kopf.spawn_tasks(
        registry=registry,
        settings=settings(scanning=clusterwide or not exact_names(namespaces)),
        identity=own_identity(),  # never kopf's default: it asks the passwd database (identity.py)
        standalone=True,
        clusterwide=clusterwide,
        namespaces=list(namespaces),
        liveness_endpoint=liveness,
        stop_flag=stopping,
        ready_flag=ready_flag,
    )
    _stop_on_signals(stopping)
    await kopf.run_tasks(tasks, ignored=existing)


def _pooled(configuration: Configuration, connections: int) -> Configuration:
    """The same credentials, with a connection pool of this size (urllib3 discards, with a warning, every
    connection beyond it)."""
    pooled = copy.copy(configuration)
    pooled.connection_pool_maxsize = connections
    return pooled


async def _set_when(caches: Caches, ready: asyncio.Event) -> None:
    while not caches.synced.is_set():
        await asyncio.sleep(0.05)
    ready.set()


async def _mirror(flag: asyncio.Event | threading.Event, target: asyncio.Event) -> None:
    while not flag.is_set():
        await asyncio.sleep(0.1)
    target.set()


async def _stand_by(elector: LeaderElector, liveness: str | None, stopping: asyncio.Event) -> bool:
    """Wait for the Lease; True once held, False when stopped first. A standby is healthy: it answers on
    the liveness URL (kopf serves it once leading), so both replicas are Ready and the budget counts both."""
    health = await _standby_health(liveness) if liveness else None
    try:
        acquiring = asyncio.create_task(elector.acquire())
        waiting = asyncio.create_task(stopping.wait())
        await asyncio.wait({acquiring, waiting}, return_when=asyncio.FIRST_COMPLETED)
        for task in (acquiring, waiting):
            task.cancel()
        await asyncio.gather(acquiring, waiting, return_exceptions=True)
        held = acquiring.done() and not acquiring.cancelled() and acquiring.exception() is None
        return held and not stopping.is_set()  # held but asked to stop: the caller releases it
    finally:
        if health is not None:
            await health.cleanup()


async def _standby_health(liveness: str) -> aiohttp.web.AppRunner:
    url = urllib.parse.urlsplit(liveness)

    async def answer(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"leader": False})

    app = aiohttp.web.Application()
    app.router.add_get(url.path or "/", answer)
    # A probe caught mid-request must not hold the hand-over to kopf (aiohttp waits 60 s by default).
    runner = aiohttp.web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, url.hostname or "0.0.0.0", url.port or 80).start()
    return runner
