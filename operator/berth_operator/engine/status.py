"""The Registry's status, computed from what the operator observed. Pure: no API calls, no clock.

Three conditions, each always present:
- Degraded: something needs a human (InvalidSpec, ApplyFailed, Missing*, VolumeShrinkRefused,
  VolumeExpansionNotAllowed, ReplicasCapped, AgentFailed, and why a pod cannot run: ImagePullFailed, Unschedulable,
  ContainerConfigError, OOMKilled, CrashLoopBackOff; RolloutFallback: a roll that could not surge stops the old pod
  first).
- Progressing: the registry is on its way (WaitingForPVC, WaitingForBucketAccess, WaitingForPods, ...,
  ResizingPVC and WaitingForFileSystemResize, which leave Ready as it is: a claim grows online), or busy with
  garbage collection (GarbageCollecting, which leaves Ready alone).
- Ready: every wanted pod is ready and its agent applied the current generation (reason Available).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.kinds import MISSING_API_REASONS

# Reasons, grouped by the condition they make True. The order inside each tuple is precedence:
# the first reason found names the condition, the messages of all of them are joined.
DEGRADED_REASONS = (
    "InvalidSpec",
    "ApplyFailed",
    "MissingSecret",
    "MissingSecretKey",
    "MissingConfigMap",
    "MissingConfigMapKey",
    "MissingPVC",
    "MissingCOSI",
    "MissingBucketClaim",
    "MissingBucketAccess",
    "MissingStorageClass",
    "MissingBucketClass",
    "MissingBucketAccessClass",
    "VolumeShrinkRefused",
    "VolumeExpansionNotAllowed",
    "Unsatisfiable",
    "ReplicasCapped",
    "AgentFailed",
    "RegistryBinaryMissing",
    # Why a pod cannot run (engine.pod_problems): the kubelet's or the scheduler's own words.
    "ImagePullFailed",
    "RolloutFallback",  # before Unschedulable, the cause it is the consequence of (both messages are joined)
    "Unschedulable",
    "ContainerConfigError",
    "OOMKilled",
    "CrashLoopBackOff",
    "MissingMonitoringCRD",
    "MissingGatewayAPI",
    "MissingCertManager",
)
PROGRESSING_REASONS = (
    "WaitingForPVC",
    "WaitingForBucket",
    "WaitingForBucketAccess",
    "WaitingForCertificate",
    "WaitingForPods",
    "WaitingForAgents",
    "ResizingPVC",
    "WaitingForFileSystemResize",
    "GarbageCollecting",
)
# Something the pods need that is not there: an object the spec names, or an optional API (the table of kinds'
# reasons). The Ready condition names one of them, or a pod problem, as the cause of a wait.
MISSING_REASONS = frozenset({
    "MissingSecret", "MissingSecretKey", "MissingConfigMap", "MissingConfigMapKey", "MissingPVC", "MissingBucketClaim",
    "MissingBucketAccess", "MissingStorageClass", "MissingBucketClass", "MissingBucketAccessClass",
}) | MISSING_API_REASONS
POD_PROBLEM_REASONS = frozenset({"ImagePullFailed", "Unschedulable", "ContainerConfigError", "OOMKilled",
                                 "CrashLoopBackOff", "RegistryBinaryMissing"})
# Findings with these reasons keep pods from serving at all: Ready is False while they last.
_NOT_SERVING = {"InvalidSpec", "ApplyFailed"}
# Progress that never stops serving, so Ready stays as it is: a claim grows online (expansion.py), and a
# registry read-only for garbage collection still serves every pull.
_SERVING_WHILE = {"ResizingPVC", "WaitingForFileSystemResize", "GarbageCollecting"}

MAX_MESSAGE = 32768
CONDITION_TYPES = ("Ready", "Progressing", "Degraded")
# Status keys the operator owns; status.agents belongs to the agents (the operator only prunes it).
OPERATOR_KEYS = ("observedGeneration", "conditions", "replicas", "readyReplicas", "selector", "url", "storage",
                 "externalAddress")


@dataclass(frozen=True)
class Finding:
    """One thing the operator noticed: a reason from DEGRADED_REASONS or PROGRESSING_REASONS and a message."""

    reason: str
    message: str

    def __post_init__(self) -> None:
        if self.reason not in DEGRADED_REASONS and self.reason not in PROGRESSING_REASONS:
            raise ValueError(f"unknown condition reason {self.reason!r}")

    @property
    def degrades(self) -> bool:
        return self.reason in DEGRADED_REASONS


@dataclass(frozen=True)
class DeploymentState:
    """The parts of the Deployment that tell whether its pods are up to date and ready."""

    wanted: int = 0  # spec.replicas after any cap
    replicas: int = 0
    ready: int = 0
    updated: int = 0
    current: bool = True  # status.observedGeneration has caught up with metadata.generation

    @classmethod
    def from_manifest(cls, deployment: Mapping[str, Any] | None) -> DeploymentState | None:
        if deployment is None:
            return None
        spec = deployment.get("spec") or {}
        status = deployment.get("status") or {}
        generation = (deployment.get("metadata") or {}).get("generation")
        observed = status.get("observedGeneration")
        return cls(
            wanted=int(spec.get("replicas", 1)),
            replicas=int(status.get("replicas") or 0),
            ready=int(status.get("readyReplicas") or 0),
            updated=int(status.get("updatedReplicas") or 0),
            current=generation is None or (observed is not None and observed >= generation),
        )


@dataclass(frozen=True)
class Observation:
    """Everything the conditions depend on."""

    generation: int | None
    findings: tuple[Finding, ...] = ()
    deployment: DeploymentState | None = None
    # status.agents of live pods: pod name -> record (observedGeneration, error)
    agents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The pods that must report the current generation (running, not terminating); None: not known (nothing
    # was listed), so only the records there are counted.
    serving_pods: tuple[str, ...] | None = None
    # What the operator could not check (a class its RBAC may not read: a namespaced install can leave that grant
    # out): said in the Ready condition's message, whatever its status; it changes no status.
    unchecked: tuple[str, ...] = ()


def _join(findings: Iterable[Finding]) -> str:
    return "; ".join(f.message for f in findings)[:MAX_MESSAGE]


def _first(findings: list[Finding], order: tuple[str, ...]) -> Finding:
    return min(findings, key=lambda f: order.index(f.reason))


BINARY_CONTAINER = "registry-binary"  # builders/pod.py: copies /bin/registry out of spec.image


def binary_findings(pods: list[Mapping[str, Any]], image: str) -> list[Finding]:
    """RegistryBinaryMissing when a pod's registry-binary init container failed: spec.image has no registry
    binary where the official images keep it (its termination message is cp's own words)."""
    failed: dict[str, str] = {}
    for pod in pods:
        for container in (pod.get("status") or {}).get("initContainerStatuses") or ():
            if container.get("name") != BINARY_CONTAINER:
                continue
            for state in ((container.get("state") or {}).get("terminated"),
                          (container.get("lastState") or {}).get("terminated")):
                if state and state.get("exitCode", 0) != 0:
                    said = " ".join(str(state.get("message") or state.get("reason") or "").split())[:200]
                    failed[(pod.get("metadata") or {}).get("name", "?")] = said or f"exit code {state['exitCode']}"
                    break
    if not failed:
        return []
    details = "; ".join(f"pod {name}: {said}" for name, said in sorted(failed.items()))
    return [Finding("RegistryBinaryMissing", f"spec.image {image} has no registry binary at /bin/registry "
                                             f"(the {BINARY_CONTAINER} init container failed: {details})")]


def _pod_findings(obs: Observation) -> list[Finding]:
    """WaitingForPods / WaitingForAgents / AgentFailed, from the Deployment and the agents' records."""
    dep = obs.deployment
    if dep is None:
        return [Finding("WaitingForPods", "the Deployment does not exist yet")]
    found: list[Finding] = []
    if not dep.current or dep.updated < dep.wanted or dep.ready < dep.wanted or dep.replicas > dep.wanted:
        found.append(Finding("WaitingForPods", f"{dep.ready} of {dep.wanted} pods ready, {dep.updated} up to date"))
    failed = sorted(name for name, rec in obs.agents.items() if rec.get("error"))
    if failed:
        details = ", ".join(f"{name}: {obs.agents[name]['error']}" for name in failed)
        found.append(Finding("AgentFailed", f"the agent could not apply the current spec in pod {details}"))
    if obs.generation is not None:
        # A pod has applied the current spec when its agent's record names this generation (or a newer one) and no error
        # (docs/decisions/0017-status-records-and-ready.md); a pod with no record has not.
        behind = sorted(
            {name for name, rec in obs.agents.items()
             if not rec.get("error") and (rec.get("observedGeneration") or 0) < obs.generation}
            | {name for name in obs.serving_pods or () if name not in obs.agents}
        )
        if behind:
            found.append(
                Finding(
                    "WaitingForAgents",
                    f"agents of {', '.join(behind)} have not applied generation {obs.generation}",
                )
            )
    return found


def conditions(obs: Observation) -> dict[str, tuple[str, str, str]]:
    """Condition type -> (status, reason, message), before transition times are merged in."""
    findings = list(obs.findings)
    if not any(f.reason in _NOT_SERVING for f in findings):
        findings += _pod_findings(obs)
    degraded = [f for f in findings if f.degrades]
    waiting = [f for f in findings if not f.degrades]

    if degraded:
        first = _first(degraded, DEGRADED_REASONS)
        degraded_c = ("True", first.reason, _join(degraded))
    else:
        degraded_c = ("False", "AsExpected", "")

    blocked = [f for f in degraded if f.reason in _NOT_SERVING]
    if blocked:
        first = _first(blocked, DEGRADED_REASONS)
        progressing_c = ("False", first.reason, _join(blocked))
    elif waiting:
        first = _first(waiting, PROGRESSING_REASONS)
        progressing_c = ("True", first.reason, _join(waiting))
    else:
        progressing_c = ("False", "Available", "")

    dep = obs.deployment
    waiting = [f for f in waiting if f.reason not in _SERVING_WHILE]
    if blocked:
        ready_c = ("False", progressing_c[1], progressing_c[2])
    elif dep is not None and dep.wanted == 0 and not waiting:
        ready_c = ("False", "ScaledToZero", "spec.replicas is 0")
    elif waiting:
        # A missing Secret or claim, or a pod that cannot run, is why the pods wait: name it rather than the symptom.
        causes = [f for f in degraded if f.reason in MISSING_REASONS or f.reason in POD_PROBLEM_REASONS]
        cause = _first(causes, DEGRADED_REASONS) if causes else _first(waiting, PROGRESSING_REASONS)
        ready_c = ("False", cause.reason, _join(causes or waiting))
    elif any(f.reason == "AgentFailed" for f in degraded):
        ready_c = ("False", "AgentFailed", degraded_c[2])
    else:
        ready_c = ("True", "Available", f"{dep.ready if dep else 0} of {dep.wanted if dep else 0} pods ready")
    if obs.unchecked:
        note = f"not checked: {'; '.join(obs.unchecked)}"
        ready_c = (ready_c[0], ready_c[1], f"{ready_c[2]}; {note}"[:MAX_MESSAGE] if ready_c[2] else note)
    return {"Ready": ready_c, "Progressing": progressing_c, "Degraded": degraded_c}


def merge_conditions(
    wanted: Mapping[str, tuple[str, str, str]],
    previous: Iterable[Mapping[str, Any]] | None,
    *,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """Condition dicts in CONDITION_TYPES order; lastTransitionTime moves only when the status flips."""
    before = {c.get("type"): c for c in previous or () if isinstance(c, Mapping)}
    result = []
    for ctype in CONDITION_TYPES:
        status, reason, message = wanted[ctype]
        old = before.get(ctype)
        since = old.get("lastTransitionTime") if old and old.get("status") == status else None
        cond: dict[str, Any] = {
            "type": ctype,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since or now,
        }
        if generation is not None:
            cond["observedGeneration"] = generation
        result.append(cond)
    return result


def url(name: str, namespace: str, port: int, *, tls: bool) -> str:
    return f"{'https' if tls else 'http'}://{name}.{namespace}.svc:{port}"


def selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def operator_status(
    obs: Observation,
    previous: Mapping[str, Any] | None,
    *,
    now: str,
    url: str | None,
    selector: str | None,
    storage: str | None,
    external_address: str | None = None,
) -> dict[str, Any]:
    """The status keys the operator owns (OPERATOR_KEYS), None values left out."""
    previous = previous or {}
    dep = obs.deployment
    wanted = conditions(obs)
    status = {
        "observedGeneration": obs.generation,
        "conditions": merge_conditions(wanted, previous.get("conditions"), generation=obs.generation, now=now),
        "replicas": dep.replicas if dep else 0,
        "readyReplicas": dep.ready if dep else 0,
        "selector": selector,
        "url": url,
        "storage": storage,
        "externalAddress": external_address,
    }
    return {key: value for key, value in status.items() if value is not None}


def status_patch(
    live: Mapping[str, Any] | None, wanted: Mapping[str, Any], *, live_pods: Iterable[str] | None
) -> dict[str, Any] | None:
    """A JSON merge patch body for /status, or None when nothing differs (no write at all).

    Keys of status.agents whose pod is gone are set to null (a merge patch deletes them); agents write
    their own keys only, so pruning by key never touches another pod's record. live_pods None: unknown,
    prune nothing.
    """
    live = live or {}
    patch: dict[str, Any] = {key: value for key, value in wanted.items() if live.get(key) != value}
    for key in OPERATOR_KEYS:
        if key not in wanted and live.get(key) is not None:
            patch[key] = None
    if live_pods is not None:
        pods = set(live_pods)
        stale = {name: None for name in (live.get("agents") or {}) if name not in pods}
        if stale:
            patch["agents"] = stale
    return {"status": patch} if patch else None


def degraded_changed(before: Iterable[Mapping[str, Any]] | None, after: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the Degraded condition's status, reason or message moved (so a Warning event is due)."""

    def key(conds: Iterable[Mapping[str, Any]] | None) -> tuple[Any, ...] | None:
        for c in conds or ():
            if c.get("type") == "Degraded":
                return (c.get("status"), c.get("reason"), c.get("message"))
        return None

    return key(before) != key(after)
