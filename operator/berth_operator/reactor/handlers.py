"""kopf handlers and the caches' wakes: every path leads to the one reconcile (berth_operator.engine.reconcile).

- Registry create, update and resume: reconcile (level-triggered; the same function for all three).
- A change to an object Berth owns (caches.py: Deployments and their status, Services, ServiceAccounts, Roles,
  RoleBindings, PDBs, PVCs and their phase and resize conditions, Leases, COSI objects, Secrets, pods)
  reconciles its Registry: drift is repaired, a deleted object recreated, Ready follows the pods, status.agents
  records of deleted pods are pruned. Wakes of one Registry coalesce while one is waiting.
- A change to an object a Registry names that Berth did not make (named.py: a user's Secret, ConfigMap, claim,
  BucketClaim or BucketAccess, the COSI driver's Secret; Outcome.named, the objects its last reconcile read from
  the server) reconciles every Registry that read it, within a second of the change.
- A periodic sweep (one task for the whole operator, every `refresh_interval` seconds) reconciles only the
  Registries whose status depends on what no watch reports (Outcome.polled: a class, a failed write). It is a
  plain task rather than a kopf timer so Registries carry no finalizer: the operator has nothing to clean up
  (garbage collection removes what a Registry owns), and an uninstalled operator never blocks a deletion. It
  starts with the first Registry event and stops on kopf's cleanup.
- A change of status.agents (written by the agents) reconciles too: Ready waits for every agent to apply.
- An optional API becoming served or going (discovery.py) reconciles the Registries that wait for one
  (Outcome.awaits_api) and, when one goes, every Registry: Registries that need no optional API are never
  held back by one.
- Garbage collection (gc_schedule): a new berth.dev/gc-requested-at value or a run the runner started or
  ended reconciles at once (kopf's diff ignores berth.dev/ annotations and status), and each reconcile arms
  a timer (wakeups) for the next scheduled run or the deadline of the run in progress.
Reconciles run in a bounded pool of worker threads (state.Workers: RECONCILE_WORKERS), never a thread per
Registry, and not in the default executor; they wait until the caches have listed. A reconcile takes one of
RECONCILE_WORKERS slots before it reads or copies its body: at 1000 Registries created at once the others wait
holding nothing (a body copied for each one queued was most of the operator's peak memory, docs/benchmarks.md).
The state the handlers share is state.Context.
Handlers return normally for an invalid or unsatisfiable spec (the condition and a Warning event say why);
kopf never retries those: only an edit of the Registry (or the sweep) runs the reconcile again.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import kopf

from berth_api import GROUP, KIND, PLURAL, VERSION

from ..core import metrics
from ..engine import gc_schedule
from ..engine.apply import Action
from ..engine.reconcile import Outcome, reconcile
from ..engine.status import degraded_changed
from ..kube.client import NotLeader
from .state import Change, Context, Key

logger = logging.getLogger("berth.operator")

REGISTRIES = (GROUP, VERSION, PLURAL)


def compact(body: Mapping[str, Any]) -> bytes:
    """A Registry body as kept between reconciles: compact JSON without metadata.managedFields (half of a body's
    size, and nothing the reconcile reads: it decides from the spec, status and the rest of the metadata)."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return json.dumps({**body, "metadata": meta}, separators=(",", ":")).encode()


def _key(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _older(body: Mapping[str, Any], version: str | None) -> bool:
    """Whether body is older than resourceVersion `version` (they are etcd revisions: integers, compared only
    when both are)."""
    mine = (body.get("metadata") or {}).get("resourceVersion")
    return bool(version and mine and version.isdigit() and str(mine).isdigit() and int(mine) < int(version))


def write_events(actions: Iterable[Action]) -> list[tuple[str, str]]:
    """(reason, message) of the Normal Events for one reconcile's writes: one per verb (Created, Updated,
    Deleted), naming every object it applies to in the order written: `Created ServiceAccount r, Role r, ...`.
    One Event per object would be most of the operator's requests when it creates a Registry's objects."""
    by_verb: dict[str, list[str]] = {}
    for action in actions:
        by_verb.setdefault(action.verb, []).append(f"{action.kind} {action.name}")
    return [(verb, f"{verb} {', '.join(objects)}") for verb, objects in by_verb.items()]


def _post_events(body: Mapping[str, Any], outcome: Outcome) -> None:
    """Normal events for the writes (write_events), a Warning when Degraded turns True or its reason or message
    changes."""
    for reason, message in write_events(outcome.actions):
        kopf.event(body, type="Normal", reason=reason, message=message)
    degraded = outcome.degraded
    if degraded is not None and degraded_changed(outcome.previous_conditions, outcome.conditions):
        kopf.event(body, type="Warning", reason=degraded["reason"], message=degraded["message"])
    for event in outcome.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)


async def run_reconcile(
    ctx: Context,
    body: Mapping[str, Any] | None = None,
    *,
    trigger: str,
    key: Key | None = None,
    fetch: Callable[[], Awaitable[Mapping[str, Any] | None]] | None = None,
) -> Outcome | None:
    """Reconcile one Registry (serialized per Registry), then metrics, events and one log line.

    With fetch, the body is read once the lock is held: a sweep or a refresh that waited behind a
    reconcile of a newer spec must not apply the older one it would otherwise have read before waiting.
    """
    key = key or _key(body or {})
    if ctx.caches_ready is not None:
        await ctx.caches_ready.wait()
    workers = ctx.workers
    async with workers.lock(key), workers.slots:
        if fetch is not None:
            body = await fetch()
        elif body is not None and _older(body, ctx.results.written.get(key)):
            # A trigger's body from before our own last status write (kopf had not delivered it yet, and a
            # wake's reconcile ran first): decide from what the server holds, not from that stale body.
            body = await asyncio.to_thread(ctx.cluster.get, "berth.dev/v1alpha1", KIND, *key)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        raw = json.loads(compact(body))  # our own copy (kopf keeps its body), without managedFields
        outcome = await _reconcile_in_worker(ctx, key, raw)
    if outcome is not None:
        _report(ctx, key, trigger, raw, outcome)
    return outcome


async def _reconcile_in_worker(ctx: Context, key: Key, raw: dict[str, Any]) -> Outcome | None:
    """The reconcile itself, in a worker thread (the caller holds the Registry's lock and a slot); None when this
    operator stopped leading meanwhile. A named object that changed while it ran wakes it again after."""
    workers = ctx.workers
    workers.started += 1
    started = time.monotonic()
    settings = ctx.settings
    work = functools.partial(reconcile, ctx.cluster, raw, agent_image=settings.agent_image, clock=settings.clock)
    since = ctx.names.changes
    workers.running += 1
    try:
        outcome = await asyncio.get_running_loop().run_in_executor(workers.executor, work)
    except NotLeader:
        # The Lease was released (a stop) or lost while this ran: the next leader reconciles it from scratch.
        logger.info("reconcile of Registry %s/%s left to the next leader: this operator no longer leads", *key)
        return None
    except Exception as exc:
        ctx.results.polled.add(key)  # retried by the sweep too, whatever kopf does
        metrics.RECONCILES.labels(result="error").inc()
        metrics.ERRORS.labels(reason=type(exc).__name__).inc()
        raise
    finally:
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
        workers.completed += 1
        workers.running -= 1
    named = frozenset() if outcome.gone else outcome.named
    ctx.results.record(key, outcome)
    ctx.names.index(key, named)
    missed = ctx.names.missed(named, since, running=workers.running > 0)
    if missed:
        # A named object this reconcile read changed after it began, before its reads were indexed: no wake found
        # this Registry then (else a Secret created just after a status said it was missing went unseen until
        # the next sweep).
        wake(ctx, *key, (missed[0], None), trigger="named object changed")
    return outcome


def _report(ctx: Context, key: Key, trigger: str, raw: Mapping[str, Any], outcome: Outcome) -> None:
    """After a reconcile: its timer, metrics, Events and one log line."""
    metrics.RECONCILES.labels(result=outcome.result).inc()
    namespace, name = key
    ctx.wakes.timers.at(key, None if outcome.gone else outcome.wake_at,
                        lambda: refresh(ctx, namespace, name, trigger="timer"))
    for action in outcome.actions:
        metrics.APPLY_OPERATIONS.labels(kind=action.kind, verb=action.verb.lower()).inc()
    if outcome.gone:
        metrics.record_conditions(key, None)
        return
    metrics.record_conditions(key, outcome.conditions)
    degraded = outcome.degraded
    if degraded is not None:
        metrics.ERRORS.labels(reason=degraded["reason"]).inc()
    _post_events(raw, outcome)
    logger.info(
        "reconciled Registry %s/%s (%s): %s; %s",
        key[0], key[1], trigger,
        ", ".join(map(str, outcome.actions)) or "no writes",
        "Degraded " + degraded["reason"] if degraded else "not degraded",
    )


async def refresh(ctx: Context, namespace: str, name: str, *, trigger: str, skip_own: bool = False) -> None:
    """Reconcile a Registry known only by name (from a timer or an owned object's change): its body is
    read once the lock is held. From the server, not kopf's last body: an owned object deleted by the garbage
    collector after its Registry must not be recreated from a body kopf has not yet seen go."""
    key = (namespace, name)

    async def fetch() -> Mapping[str, Any] | None:
        changes = ctx.wakes.waking.pop(key, [])  # from here on a new change needs a new reconcile
        cluster = ctx.cluster
        if skip_own and cluster.cached and changes and all(cluster.ours(*change) for change in changes):
            return None  # only echoes of the writes of the reconcile that held the lock: nothing to do
        return await asyncio.to_thread(cluster.get, "berth.dev/v1alpha1", KIND, namespace, name)

    await run_reconcile(ctx, key=key, fetch=fetch, trigger=trigger)


def named_changed(ctx: Context, change: Change) -> None:
    """An object some Registries named changed (named.py; in the loop's thread): wake each that read it."""
    for namespace, name in ctx.names.changed(change[0], running=ctx.workers.running > 0):
        wake(ctx, namespace, name, change, trigger="named object changed")


def names_resynced(ctx: Context, api_version: str, kind: str) -> None:
    """The watch of a named kind (re)started, and may have missed changes: wake every Registry naming one."""
    for namespace, name in ctx.names.readers_of_kind(api_version, kind):
        wake(ctx, namespace, name, ((api_version, kind, namespace, ""), None), trigger=f"watch of {kind} resynced")


def wake(ctx: Context, namespace: str, name: str, change: Change, *,
         trigger: str = "owned object changed") -> None:
    """An owned object of this Registry changed (caches.py; in the loop's thread), or one it names (named.py):
    reconcile it, once for any number of changes that arrive before that reconcile begins, and not at all when
    every one of them was our own write (an echo that overtook the answer)."""
    key = (namespace, name)
    wakes = ctx.wakes
    if wakes.kopf_context is None:  # before kopf's first Registry event, whose handlers reconcile every Registry
        return
    if key in wakes.waking:
        wakes.waking[key].append(change)
        return
    wakes.waking[key] = [change]

    async def reconcile_changed() -> None:
        try:
            await refresh(ctx, namespace, name, trigger=trigger, skip_own=True)
        except Exception:  # the sweep retries it (run_reconcile marked it polled)
            logger.exception("reconcile of Registry %s/%s after a change (%s) failed", *key, trigger)

    wakes.spawn(reconcile_changed(), name=f"berth-changed-{namespace}/{name}")


def apis_changed(ctx: Context, served: bool) -> None:
    """Discovery saw optional kinds become served (or stop being served; in the loop's thread): reconcile the
    Registries waiting for one, or, when one went, every Registry (one that used it must now say so)."""
    if ctx.wakes.kopf_context is None:  # before kopf's first Registry event, whose handlers reconcile every one
        return
    keys = sorted(ctx.results.awaiting_api if served else ctx.seen.bodies)
    for namespace, name in keys:

        async def reconcile_waiting(namespace: str = namespace, name: str = name) -> None:
            try:
                await refresh(ctx, namespace, name, trigger="optional API " + ("served" if served else "gone"))
            except Exception:  # the sweep retries it (run_reconcile marked it polled)
                logger.exception("reconcile of Registry %s/%s after an API change failed", namespace, name)

        ctx.wakes.spawn(reconcile_waiting(), name=f"berth-api-{namespace}/{name}")


async def sweep_forever(ctx: Context) -> None:
    while True:
        await asyncio.sleep(ctx.settings.refresh_interval)
        # With caches, only what they cannot know; without (no watches), every Registry.
        keys = [key for key in ctx.seen.bodies if ctx.caches_ready is None or key in ctx.results.polled]
        for key in keys:

            async def latest(key: Key = key) -> Mapping[str, Any] | None:
                kept = ctx.seen.bodies.get(key)  # the newest body kopf has seen, once the lock is ours
                return json.loads(kept) if kept is not None else None

            try:
                await run_reconcile(ctx, key=key, fetch=latest, trigger="periodic")
            except Exception:  # one Registry's failure must not stop the sweep of the others
                logger.exception("periodic reconcile of Registry %s/%s failed", *key)


def _agents_digest(body: Mapping[str, Any]) -> str:
    agents = (body.get("status") or {}).get("agents") or {}
    summary = {pod: [rec.get("observedGeneration"), rec.get("error")] for pod, rec in agents.items()
               if isinstance(rec, Mapping)}
    return json.dumps(summary, sort_keys=True)


def _forget(ctx: Context, key: Key) -> None:
    """A Registry deleted: nothing of it is kept."""
    ctx.seen.forget(key)
    ctx.workers.locks.pop(key, None)
    ctx.results.forget(key)
    ctx.names.index(key, frozenset())
    ctx.wakes.timers.cancel(key)
    metrics.record_conditions(key, None)


def make_registry(ctx: Context) -> kopf.OperatorRegistry:
    """The handlers of one operator instance (a fresh registry, so several can run in one process)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.cleanup(registry=registry, id="stop-sweeper")
    async def stop_sweeper(**_: Any) -> None:
        if ctx.sweeper is not None:
            ctx.sweeper.cancel()
            await asyncio.gather(ctx.sweeper, return_exceptions=True)
        await ctx.wakes.close()
        ctx.workers.executor.shutdown(wait=False, cancel_futures=True)

    # One function, three causes. retries bound kopf's retry of an unexpected error (a bug or an API
    # outage); expected failures never raise.
    @kopf.on.resume(*REGISTRIES, registry=registry, id="reconcile-on-resume", retries=5, backoff=15)
    @kopf.on.create(*REGISTRIES, registry=registry, id="reconcile-on-create", retries=5, backoff=15)
    @kopf.on.update(*REGISTRIES, registry=registry, id="reconcile-on-update", retries=5, backoff=15)
    async def reconcile_registry(body: kopf.Body, reason: str, **_: Any) -> None:
        await run_reconcile(ctx, body, trigger=str(reason))

    @kopf.on.event(*REGISTRIES, registry=registry, id="track-registry")
    async def track_registry(event: Mapping[str, Any], **_: Any) -> None:
        if ctx.sweeper is None:
            # Started from a resource handler, not from on.startup: kopf sets the context its Event poster
            # needs (kopf.event) only in the tasks that process objects, and the sweep posts Events too.
            ctx.sweeper = asyncio.create_task(sweep_forever(ctx), name="berth-sweeper")
            ctx.wakes.kopf_context = contextvars.copy_context()
        body = event.get("object") or {}
        key = _key(body)
        if event.get("type") == "DELETED" or (body.get("metadata") or {}).get("deletionTimestamp"):
            _forget(ctx, key)
            return
        trigger = ctx.seen.remember(key, compact(body), agents=_agents_digest(body),
                                    gc=gc_schedule.watch_digest(body))
        if trigger is not None:
            await run_reconcile(ctx, body, trigger=trigger)

    return registry
