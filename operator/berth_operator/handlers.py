"""kopf handlers: every path leads to the one reconcile function (berth_operator.reconcile).

- Registry create, update and resume: reconcile (level-triggered; the same function for all three).
- A periodic sweep (one task for the whole operator, every `refresh_interval` seconds) reconciles every known
  Registry again: status refresh (pods becoming ready, a PVC binding) and repair of drifted objects. It is a
  plain task rather than a kopf timer so Registries carry no finalizer: the operator has nothing to clean up
  (garbage collection removes what a Registry owns), and an uninstalled operator never blocks a deletion.
  It starts with the first Registry event and stops on kopf's cleanup.
- Deployment status changes and Pod deletions of Berth's pods reconcile their Registry at once (Ready
  follows the pods; status.agents records of deleted pods are pruned).
- A change of status.agents (written by the agents) reconciles too: Ready waits for every agent to apply.
- Garbage collection (gc_schedule): a new berth.dev/gc-requested-at value or a run the runner started or
  ended reconciles at once (kopf's diff ignores berth.dev/ annotations and status), and each reconcile arms
  a timer (wakeups) for the next scheduled run or the deadline of the run in progress.
Handlers return normally for an invalid or unsatisfiable spec (the condition and a Warning event say why);
kopf never retries those: only an edit of the Registry (or the sweep) runs the reconcile again.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from berth_api import GROUP, KIND, PLURAL, VERSION

from . import gc_schedule, metrics
from .builders import names
from .client import Kube
from .clock import UtcClock, WallClock
from .reconcile import Outcome, reconcile
from .status import degraded_changed
from .wakeups import Wakeups

logger = logging.getLogger("berth.operator")

REGISTRIES = (GROUP, VERSION, PLURAL)
BERTH_PODS = {names.NAME_LABEL: "registry", names.MANAGED_BY_LABEL: "berth"}


@dataclass
class Context:
    """State shared by every handler of one running operator."""

    kube: Kube
    agent_image: str
    refresh_interval: float = 60.0
    bodies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    seen_deployments: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    seen_agents: dict[tuple[str, str], str] = field(default_factory=dict)
    seen_gc: dict[tuple[str, str], str] = field(default_factory=dict)
    clock: UtcClock = field(default_factory=WallClock)
    wakeups: Wakeups | None = None
    sweeper: asyncio.Task[None] | None = None
    reconciles: int = 0  # reconciles started, for tests that check there is no retry loop
    completed: int = 0  # reconciles finished (successfully or not)

    def __post_init__(self) -> None:
        if self.wakeups is None:
            self.wakeups = Wakeups(self.clock)

    def lock(self, key: tuple[str, str]) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())


def _key(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _post_events(body: Mapping[str, Any], outcome: Outcome) -> None:
    """Normal events for each write, a Warning when Degraded turns True or its reason or message changes."""
    for action in outcome.actions:
        kopf.event(body, type="Normal", reason=action.verb, message=str(action))
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
    key: tuple[str, str] | None = None,
    fetch: Callable[[], Awaitable[Mapping[str, Any] | None]] | None = None,
) -> Outcome | None:
    """Reconcile one Registry (serialized per Registry), then metrics, events and one log line.

    With fetch, the body is read once the lock is held: a sweep or a refresh that waited behind a
    reconcile of a newer spec must not apply the older one it would otherwise have read before waiting.
    """
    key = key or _key(body or {})
    async with ctx.lock(key):
        if fetch is not None:
            body = await fetch()
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        raw = copy.deepcopy(dict(body))
        ctx.reconciles += 1
        started = time.monotonic()
        try:
            outcome = await asyncio.to_thread(reconcile, ctx.kube, raw, agent_image=ctx.agent_image, clock=ctx.clock)
        except Exception as exc:
            metrics.RECONCILES.labels(result="error").inc()
            metrics.ERRORS.labels(reason=type(exc).__name__).inc()
            raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
            ctx.completed += 1
    metrics.RECONCILES.labels(result=outcome.result).inc()
    if ctx.wakeups is not None:
        namespace, name = key
        ctx.wakeups.at(key, None if outcome.gone else outcome.wake_at,
                       lambda: refresh(ctx, namespace, name, trigger="timer"))
    for action in outcome.actions:
        metrics.APPLY_OPERATIONS.labels(kind=action.kind, verb=action.verb.lower()).inc()
    if outcome.gone:
        metrics.record_conditions(key, None)
        return outcome
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
    return outcome


async def refresh(ctx: Context, namespace: str, name: str, *, trigger: str) -> None:
    """Reconcile a Registry known only by name (from a Deployment or Pod event): read it first."""

    async def fetch() -> Mapping[str, Any] | None:
        return await asyncio.to_thread(ctx.kube.get, "berth.dev/v1alpha1", KIND, namespace, name)

    await run_reconcile(ctx, key=(namespace, name), fetch=fetch, trigger=trigger)


async def sweep_forever(ctx: Context) -> None:
    while True:
        await asyncio.sleep(ctx.refresh_interval)
        for key in list(ctx.bodies):

            async def latest(key: tuple[str, str] = key) -> Mapping[str, Any] | None:
                return ctx.bodies.get(key)  # the newest body kopf has seen, once the lock is ours

            try:
                await run_reconcile(ctx, key=key, fetch=latest, trigger="periodic")
            except Exception:  # one Registry's failure must not stop the sweep of the others
                logger.exception("periodic reconcile of Registry %s/%s failed", *key)


def _agents_digest(body: Mapping[str, Any]) -> str:
    agents = (body.get("status") or {}).get("agents") or {}
    summary = {pod: [rec.get("observedGeneration"), rec.get("error")] for pod, rec in agents.items()
               if isinstance(rec, Mapping)}
    return json.dumps(summary, sort_keys=True)


def make_registry(ctx: Context) -> kopf.OperatorRegistry:
    """The handlers of one operator instance (a fresh registry, so several can run in one process)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.cleanup(registry=registry, id="stop-sweeper")
    async def stop_sweeper(**_: Any) -> None:
        if ctx.sweeper is not None:
            ctx.sweeper.cancel()
            await asyncio.gather(ctx.sweeper, return_exceptions=True)
        if ctx.wakeups is not None:
            await ctx.wakeups.close()

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
        body = event.get("object") or {}
        key = _key(body)
        if event.get("type") == "DELETED" or (body.get("metadata") or {}).get("deletionTimestamp"):
            ctx.bodies.pop(key, None)
            ctx.seen_agents.pop(key, None)
            ctx.seen_gc.pop(key, None)
            ctx.locks.pop(key, None)
            if ctx.wakeups is not None:
                ctx.wakeups.cancel(key)
            metrics.record_conditions(key, None)
            return
        ctx.bodies[key] = copy.deepcopy(dict(body))
        digest = _agents_digest(body)
        before = ctx.seen_agents.get(key)
        ctx.seen_agents[key] = digest
        gc_digest = gc_schedule.watch_digest(body)
        gc_before = ctx.seen_gc.get(key)
        ctx.seen_gc[key] = gc_digest
        if before is not None and before != digest:
            await run_reconcile(ctx, body, trigger="agents")
        elif gc_before is not None and gc_before != gc_digest:
            await run_reconcile(ctx, body, trigger="garbage collection")

    @kopf.on.event("apps", "v1", "deployments", labels={names.MANAGED_BY_LABEL: "berth"}, registry=registry,
                   id="deployment-changed")
    async def deployment_changed(event: Mapping[str, Any], **_: Any) -> None:
        body = event.get("object") or {}
        meta = body.get("metadata") or {}
        owner = next((ref for ref in meta.get("ownerReferences") or () if ref.get("kind") == KIND), None)
        uid = meta.get("uid")
        if owner is None or uid is None:
            return
        if event.get("type") == "DELETED":
            ctx.seen_deployments.pop(uid, None)
            return
        status = body.get("status") or {}
        state = (meta.get("generation"), status.get("observedGeneration"), status.get("replicas"),
                 status.get("readyReplicas"), status.get("updatedReplicas"))
        before = ctx.seen_deployments.get(uid)
        ctx.seen_deployments[uid] = state
        # First sight (operator start, or our own create): the Registry's own handler covers it.
        if before is not None and before != state:
            await refresh(ctx, meta.get("namespace"), owner.get("name"), trigger="deployment")

    @kopf.on.event("", "v1", "pods", labels=BERTH_PODS, registry=registry, id="pod-deleted")
    async def pod_deleted(event: Mapping[str, Any], **_: Any) -> None:
        if event.get("type") != "DELETED":
            return
        meta = (event.get("object") or {}).get("metadata") or {}
        instance = (meta.get("labels") or {}).get(names.INSTANCE_LABEL)
        if instance:
            await refresh(ctx, meta.get("namespace"), instance, trigger="pod deleted")

    return registry
