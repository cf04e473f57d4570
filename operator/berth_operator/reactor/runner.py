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
from ..core.kinds import CACHED_KINDS, NAMED_KINDS
from ..kube.client import Kube
from .handlers import RECONCILE_WORKERS, Context, apis_changed, make_registry, named_changed, names_resynced, wake
from .leader import LeaderElector, LeaseSettings

# Persist kopf's own bookkeeping in our annotations, never in status (the CRD's status schema has no
# room for status.kopf, and the API server would prune it).
ANNOTATION_PREFIX = "berth.dev"


def settings(*, peering_standalone: bool = True) -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    s.posting.reporting_component = "berth-operator"
    s.posting.event_name_prefix = "berth-"
    # Our own events (kopf.event) are always posted; kopf's per-handler log lines only from warnings up.
    s.posting.level = logging.WARNING
    s.peering.standalone = peering_standalone
    # Watches are re-opened at least every 5 minutes (idle connections get dropped: field-notes §3).
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
    options = dict(agent_image=agent_image, namespaces=namespaces, clusterwide=clusterwide, liveness=liveness,
                   refresh_interval=refresh_interval, stop_flag=stop_flag, ready_flag=ready_flag, context=context,
                   clock=clock or WallClock())
    if leader is None:
        await _operate(configuration, may_write=None, **options)
        return
    # Its own client with a short timeout: a hung renewal must not outlast the renew deadline.
    elector = LeaderElector(Kube(configuration, timeout=leader.renew_deadline / 2), leader)
    try:
        if not await _stand_by(elector, liveness, stop_flag):
            return
        operating = asyncio.create_task(_operate(configuration, may_write=elector.may_write, **options))
        keeping = asyncio.create_task(elector.keep())
        await asyncio.wait({operating, keeping}, return_when=asyncio.FIRST_COMPLETED)
        if not operating.done():
            operating.cancel()
            await asyncio.gather(operating, return_exceptions=True)
            raise LeadershipLost(f"lost the leader Lease {leader.namespace}/{leader.name}")
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
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
    stop_flag: asyncio.Event | threading.Event | None,
    ready_flag: asyncio.Event | threading.Event | None,
    context: dict[str, Any] | None,
    clock: UtcClock,
) -> None:
    """kopf with our handlers and the caches, until stopped."""
    loop = asyncio.get_running_loop()
    caches_ready = asyncio.Event()
    ctx: Context | None = None

    def changed(namespace: str, name: str, key: Any, version: str | None) -> None:  # an informer's thread
        if ctx is not None:
            loop.call_soon_threadsafe(wake, ctx, namespace, name, (key, version))

    def served_changed(kinds: frozenset[tuple[str, str]]) -> None:  # discovery's thread
        if ctx is not None:
            served = all(discovery.serves(*kind) for kind in kinds)
            loop.call_soon_threadsafe(apis_changed, ctx, served)

    def name_changed(key: Any, version: str | None) -> None:  # a named watch's thread
        if ctx is not None:
            loop.call_soon_threadsafe(named_changed, ctx, (key, version))

    def name_resynced(api_version: str, kind: str) -> None:  # a named watch's thread
        if ctx is not None:
            loop.call_soon_threadsafe(names_resynced, ctx, api_version, kind)

    # Discovery holds one open watch (CRDs); the informers and the named watches one per kind and namespace; the
    # reconciles one connection per worker.
    discovery = Discovery(Kube(_pooled(configuration, 2)))
    discovery.on_change(served_changed)
    watches = len(CACHED_KINDS) * (len(namespaces) or 1)
    caches = Caches(Kube(_pooled(configuration, watches + 2)), None if clusterwide else namespaces,
                    on_change=changed, discovery=discovery)
    named = NamedWatches(Kube(_pooled(configuration, len(NAMED_KINDS) * (len(namespaces) or 1) + 2)),
                         None if clusterwide else namespaces, on_change=name_changed, on_resync=name_resynced,
                         discovery=discovery)
    kube = Cluster(Kube(_pooled(configuration, RECONCILE_WORKERS + 4), may_write=may_write), caches,
                   served=discovery.serves)
    ctx = Context(kube=kube, agent_image=agent_image, refresh_interval=refresh_interval, clock=clock,
                  caches_ready=caches_ready)
    if context is not None:
        context["ctx"] = ctx
    registry = make_registry(ctx)
    discovery.start()
    caches.start()
    named.start()
    synced = asyncio.create_task(_set_when(caches, caches_ready))

    @kopf.on.login(registry=registry, id="login")
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(configuration)

    # kopf waits on a threading.Event in a worker thread, which would keep the loop from closing when the
    # operator ends for another reason (a lost Lease): kopf gets an asyncio.Event that mirrors stop_flag.
    kopf_stop = asyncio.Event()
    mirror = asyncio.create_task(_mirror(stop_flag, kopf_stop)) if stop_flag is not None else None
    try:
        await kopf.operator(
            registry=registry,
            settings=settings(),
            identity=own_identity(),  # never kopf's default: it asks the passwd database (identity.py)
            standalone=True,
            clusterwide=clusterwide,
            namespaces=list(namespaces),
            liveness_endpoint=liveness,
            stop_flag=kopf_stop if stop_flag is not None else None,
            ready_flag=ready_flag,
        )
    finally:
        if mirror is not None:
            mirror.cancel()
            await asyncio.gather(mirror, return_exceptions=True)
        synced.cancel()
        await asyncio.gather(synced, return_exceptions=True)
        await asyncio.to_thread(caches.stop)
        await asyncio.to_thread(named.stop)
        await asyncio.to_thread(discovery.stop)
        discovery.kube.close()
        ctx.executor.shutdown(wait=False, cancel_futures=True)
        kube.close()


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


async def _stand_by(elector: LeaderElector, liveness: str | None,
                    stop_flag: asyncio.Event | threading.Event | None) -> bool:
    """Wait for the Lease; True once held, False when stopped first. A standby is healthy: it answers on
    the liveness URL (kopf serves it once leading), so both replicas are Ready and the budget counts both."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT) if threading.current_thread() is threading.main_thread() else ()
    for sig in signals:
        loop.add_signal_handler(sig, stopping.set)
    health = await _standby_health(liveness) if liveness else None

    async def stopped() -> None:
        while not (stopping.is_set() or (stop_flag is not None and stop_flag.is_set())):
            await asyncio.sleep(0.1)

    try:
        acquiring = asyncio.create_task(elector.acquire())
        waiting = asyncio.create_task(stopped())
        await asyncio.wait({acquiring, waiting}, return_when=asyncio.FIRST_COMPLETED)
        for task in (acquiring, waiting):
            task.cancel()
        await asyncio.gather(acquiring, waiting, return_exceptions=True)
        held = acquiring.done() and not acquiring.cancelled() and acquiring.exception() is None
        stop_asked = stopping.is_set() or (stop_flag is not None and stop_flag.is_set())
        return held and not stop_asked  # held but asked to stop: the caller releases it
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if health is not None:
            await health.cleanup()


async def _standby_health(liveness: str) -> aiohttp.web.AppRunner:
    url = urllib.parse.urlsplit(liveness)

    async def answer(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"leader": False})

    app = aiohttp.web.Application()
    app.router.add_get(url.path or "/", answer)
    runner = aiohttp.web.AppRunner(app, access_log=None)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, url.hostname or "0.0.0.0", url.port or 80).start()
    return runner
