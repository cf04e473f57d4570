"""One reconcile of one Registry: validate, look up, build, apply, prune, report. Synchronous (the handlers
run it in a worker thread); level-triggered: it reads everything it needs each time (from the caches where they
hold it: Cluster.get) and writes only what differs, so running it again on an unchanged cluster writes nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from berth_api import API_VERSION, GC_PROXY_MESSAGE, GC_STORAGE_MESSAGE, KIND, Registry, describe_validation_error
from berth_api.pod_template import MANAGED_BY_LABEL
from berth_api.timestamps import format_time

from ..builders import build_all, deployment, exposure, problems, service
from ..builders.meta import namespace as namespace_of
from ..builders.meta import selector_labels, selector_string
from ..cluster.view import Cluster
from ..core.clock import UtcClock, WallClock
from ..core.kinds import CLASS_KINDS, MISSING_API_REASONS, NAMED_KINDS
from ..kube.client import KubeError
from . import apply, expansion, facts, gc_schedule, pod_problems, status
from .status import DeploymentState, Finding, Observation

REGISTRY = (API_VERSION, KIND)
STATUS_CONFLICT_RETRIES = 5
# Findings about objects no watch reports (cluster-scoped classes, which Berth may only get; an optional API not
# served: builders/kinds.py MISSING_API_REASONS) or about a write that failed: only the periodic refresh sees them
# change, so a Registry with one of them is polled (handlers.sweep_forever); all others are not. A Secret,
# ConfigMap, claim, BucketClaim or BucketAccess the spec names is watched by name (cluster/named.py:
# Outcome.named), so MissingSecret and the like are not polled.
UNWATCHED_REASONS = frozenset({
    "ApplyFailed", "MissingStorageClass", "MissingBucketClass", "MissingBucketAccessClass",
    "VolumeExpansionNotAllowed",
}) | MISSING_API_REASONS
# Reads whose object's change wakes the Registry that read it: the named kinds (cluster/named.py) and the classes
# (the caches of classes).
WAKING_READS = frozenset(NAMED_KINDS) | frozenset(CLASS_KINDS)


@dataclass
class Outcome:
    """What one reconcile did and found, for events, metrics and logs (never any Secret value)."""

    actions: list[apply.Action] = field(default_factory=list)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    previous_conditions: list[dict[str, Any]] = field(default_factory=list)
    status_written: bool = False
    gone: bool = False  # the Registry no longer exists
    events: list[gc_schedule.GcEvent] = field(default_factory=list)  # garbage collection's, beside the actions'
    wake_at: datetime.datetime | None = None  # reconcile again then (next scheduled GC, or a run's deadline)
    polled: bool = False  # the status depends on something no watch reports: the periodic refresh reconciles it
    status_version: str | None = None  # the Registry's resourceVersion after our status write
    awaits_api: bool = False  # it needs an API the cluster does not serve (MISSING_API_REASONS)
    # Objects of the named kinds this reconcile read from the server (found or not): not Berth's, so the caches do
    # not watch them; a change of one wakes this Registry (cluster/named.py).
    named: frozenset[tuple[str, str, str, str]] = frozenset()

    @property
    def degraded(self) -> dict[str, Any] | None:
        for cond in self.conditions:
            if cond["type"] == "Degraded" and cond["status"] == "True":
                return cond
        return None

    @property
    def result(self) -> str:
        if self.gone:
            return "gone"
        degraded = self.degraded
        if degraded is None:
            return "ok"
        return "invalid" if degraded["reason"] == "InvalidSpec" else "degraded"


@dataclass
class Observed:
    """What one reconcile saw and the status reports besides its findings (the spec's address, selector and
    storage are the last valid spec's while the spec is invalid)."""

    generation: Any
    moment: datetime.datetime
    deployment: dict[str, Any] | None = None
    live_pods: list[dict[str, Any]] | None = None  # None: not listed (prune no agent record, count none)
    url: str | None = None
    selector: str | None = None
    storage: str | None = None
    external: str | None = None
    unchecked: list[str] = field(default_factory=list)  # what the operator could not check (status.Observation)


def now(clock: UtcClock | None = None) -> str:
    return format_time((clock or WallClock()).now())


def parse(body: Mapping[str, Any]) -> Registry:
    """The validated model; status is the operator's and agents' business and is not validated here."""
    return Registry.model_validate({k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body})


def _usable_status(status: Any) -> dict[str, Any]:
    """The live status, with the parts we read in the shapes we read (nothing validates status: a broken
    agent or a hand edit can put anything there)."""
    usable = dict(status) if isinstance(status, Mapping) else {}
    if not isinstance(usable.get("agents"), Mapping):
        usable["agents"] = {}
    if not isinstance(usable.get("conditions"), list):
        usable["conditions"] = []
    return usable


def _live_pods(cluster: Cluster, reg: Registry) -> list[dict[str, Any]]:
    return cluster.list("v1", "Pod", namespace_of(reg), selector_labels(reg))


def _confirm_pods(cluster: Cluster, reg: Registry, cached: list[dict[str, Any]],
                  agents: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The pods to count and prune records by. The cache's list, unless an agent wrote a record for a pod it does
    not hold: an agent can write before the pod's watch event arrives, and a record pruned then is gone for good
    (the agent writes an unchanged record once). Then the server's list, one request only while that lasts (a
    record of a pod really gone is pruned by it); None (prune nothing, count nothing) if the server fails."""
    cached_names = {p["metadata"]["name"] for p in cached}
    if all(pod in cached_names for pod in agents):
        return cached
    try:
        # The cache's own filter (Berth's label as well as the selector's): the same pods, only up to date.
        return cluster.list("v1", "Pod", namespace_of(reg), {**selector_labels(reg), MANAGED_BY_LABEL: "berth"},
                            fresh=True)
    except KubeError:
        return None


def _serving(pod: Mapping[str, Any]) -> bool:
    """A pod that must serve the current spec: not terminating, not finished (an evicted pod lingers)."""
    phase = (pod.get("status") or {}).get("phase")
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def _apply(
    cluster: Cluster, reg: Registry, agent_image: str, findings: list[Finding], actions: list[apply.Action],
    unchecked: list[str],
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Look up, build, apply and prune; then read what the status reports. Appends to findings, actions and
    unchecked as it goes (so a failure half-way still reports what was done); returns the Deployment and its pods."""
    lookup = facts.look_up(cluster, reg, agent_image)
    findings += lookup.findings
    unchecked += lookup.unchecked
    findings += [Finding(problem.reason, problem.message) for problem in problems(reg, lookup.facts)]
    # A kind the cluster does not serve is neither built nor pruned (facts.missing_apis reported it).
    gone = lookup.facts.unserved
    secret = apply.http_secret_value(cluster, reg)
    built = build_all(reg, lookup.facts, http_secret_value=secret)
    for manifest in built:
        action = apply.apply_object(cluster, manifest, reg.metadata.get("uid"))
        if action is not None:
            actions.append(action)
    actions += apply.prune(cluster, reg, built, gone)
    grown, resize_findings = expansion.expand(cluster, reg)
    actions += grown
    findings += resize_findings
    findings += facts.waiting(cluster, reg, gone)
    live = cluster.get("apps/v1", "Deployment", namespace_of(reg), deployment.name(reg))
    return live, _live_pods(cluster, reg)


def needs_polling(findings: list[Finding]) -> bool:
    """Whether a finding is about an object no watch reports, or a failed write (UNWATCHED_REASONS)."""
    return any(f.reason in UNWATCHED_REASONS for f in findings)


def reconcile(cluster: Cluster, body: Mapping[str, Any], *, agent_image: str, clock: UtcClock | None = None) -> Outcome:
    view = cluster.reading_once()
    outcome = _reconcile(view, body, agent_image=agent_image, clock=clock)
    outcome.named = frozenset(key for key in view.server_reads() if key[:2] in WAKING_READS)
    return outcome


def _reconcile(cluster: Cluster, body: Mapping[str, Any], *, agent_image: str, clock: UtcClock | None) -> Outcome:
    clock = clock or WallClock()
    meta = body.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    live_status = _usable_status(body.get("status"))
    outcome = Outcome()
    findings: list[Finding] = []
    observed = Observed(generation=meta.get("generation"), moment=clock.now())

    try:
        reg = parse(body)
    except ValidationError as exc:
        reg = None
        findings.append(Finding("InvalidSpec", describe_validation_error(exc)))
        # Nothing is applied, but what runs from the last valid spec keeps running: report it as it is.
        observed.url, observed.selector, observed.storage, observed.external = (
            live_status.get(k) for k in ("url", "selector", "storage", "externalAddress"))
        try:
            observed.deployment = cluster.get("apps/v1", "Deployment", namespace, name)
        except KubeError:
            observed.deployment = None

    if reg is not None:
        observed.storage = reg.spec.config.storage.backend
        observed.selector = selector_string(reg)
        observed.url = status.url(name, namespace, reg.spec.http.port, tls=reg.spec.http.tls is not None)
        try:
            observed.deployment, observed.live_pods = _apply(cluster, reg, agent_image, findings, outcome.actions,
                                                                observed.unchecked)
            observed.external = exposure.external_address(
                reg, cluster.get("v1", "Service", namespace_of(reg), service.name(reg)))
        except (KubeError, apply.NotOurs, apply.Conflict) as exc:
            findings.append(Finding("ApplyFailed", str(exc)))
        findings += status.binary_findings(observed.live_pods or [], reg.spec.image)
        findings += pod_problems.findings(observed.live_pods or [])

    outcome.polled = needs_polling(findings)
    outcome.awaits_api = any(f.reason in MISSING_API_REASONS for f in findings)
    for _attempt in range(STATUS_CONFLICT_RETRIES):
        if _report(cluster, body, reg, list(findings), outcome, observed):
            return outcome
        # The status moved since body was read, and this write records a result (Interrupted): read it
        # again and decide again (the runner may have recorded its own result just before).
        fresh = cluster.get(*REGISTRY, namespace, name, cached=False)
        if fresh is None:
            outcome.gone = True
            return outcome
        body = fresh
    raise apply.Conflict(f"Registry {name} status kept changing while recording a garbage collection result; "
                         "the next reconcile retries")



def _uncollectable(reg: Registry | None) -> str | None:
    """Why garbage collection cannot run on this Registry's storage (a run-now request is then refused with an
    Event): in-memory storage, or a pull-through cache (berth_api.proxy.GC_PROXY_MESSAGE)."""
    if reg is None:
        return None
    if reg.spec.config.storage.inmemory is not None:
        return GC_STORAGE_MESSAGE
    if reg.spec.config.proxy is not None:
        return GC_PROXY_MESSAGE
    return None

def _report(cluster: Cluster, body: Mapping[str, Any], reg: Registry | None, findings: list[Finding],
            outcome: Outcome, observed: Observed) -> bool:
    """Decide garbage collection, compute the status and write what differs; fills outcome. False: not written
    because the status changed since body was read (only a result-recording write is guarded so)."""
    meta = body.get("metadata") or {}
    live_status = _usable_status(body.get("status"))
    outcome.previous_conditions = list(live_status.get("conditions") or [])
    gc = gc_schedule.decide(
        reg.spec.garbage_collection if reg is not None else None,
        annotations=meta.get("annotations"), live=live_status.get("garbageCollection"), now=observed.moment,
        spec_valid=reg is not None,
        uncollectable=_uncollectable(reg),
    )
    outcome.events, outcome.wake_at = gc.events, gc.wake_at
    if gc.pending is not None:
        findings.append(Finding("GarbageCollecting", gc_schedule.progress_message(gc.pending)))

    agents = {pod: rec for pod, rec in live_status["agents"].items() if isinstance(rec, Mapping)}
    live_pods = observed.live_pods
    if reg is not None and live_pods is not None and cluster.cached:
        live_pods = _confirm_pods(cluster, reg, live_pods, agents)
    pod_names = None if live_pods is None else [p["metadata"]["name"] for p in live_pods]
    serving = None if live_pods is None else tuple(p["metadata"]["name"] for p in live_pods if _serving(p))
    if serving is not None:  # a terminating pod's record is kept until it is gone, but no longer counted
        agents = {pod: rec for pod, rec in agents.items() if pod in serving}
    obs = Observation(
        generation=observed.generation,
        findings=tuple(findings),
        deployment=DeploymentState.from_manifest(observed.deployment),
        agents=agents,
        serving_pods=serving,
        unchecked=tuple(observed.unchecked),
    )
    wanted = status.operator_status(obs, live_status, now=format_time(observed.moment), url=observed.url,
                                    selector=observed.selector, storage=observed.storage,
                                    external_address=observed.external)
    outcome.conditions = wanted["conditions"]
    patch = status.status_patch(live_status, wanted, live_pods=pod_names)
    if gc.status_patch is not None:  # merged key by key: the runner's keys of garbageCollection stay its own
        patch = patch or {"status": {}}
        patch["status"]["garbageCollection"] = gc.status_patch
    raw_agents = (body.get("status") or {}).get("agents") if isinstance(body.get("status"), Mapping) else None
    if raw_agents is not None and not isinstance(raw_agents, Mapping):  # not a map of records: drop it whole
        patch = patch or {"status": {}}
        patch["status"]["agents"] = None
    if patch is None:
        return True
    guarded = gc.records_result and meta.get("resourceVersion") is not None
    if guarded:  # a merge patch carrying resourceVersion is refused (409) unless the object is still that version
        patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
    try:
        answer = cluster.patch(*REGISTRY, meta.get("namespace"), meta.get("name"), patch, subresource="status")
        outcome.status_written = True
        outcome.status_version = (answer.get("metadata") or {}).get("resourceVersion")
    except KubeError as exc:
        if guarded and exc.status == 409:
            outcome.events = []  # nothing of this decision was written: its Events are not true
            return False
        if exc.status != 404:
            raise
        outcome.gone = True
    return True
