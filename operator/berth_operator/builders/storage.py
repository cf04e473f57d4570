"""Decisions that follow from the storage backend: which claim and credentials the pod mounts, how many pods
may run, and how they are replaced."""

from __future__ import annotations

from typing import Any, Literal

from berth_api import Registry
from berth_api.kube_types import kube_dump

from . import bucket_access
from .context import ClusterFacts
from .meta import REGISTRY_COMPONENT, labels

READ_WRITE_MANY = "ReadWriteMany"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
HOSTNAME_KEY = "kubernetes.io/hostname"
# Who may mount the data claim read-write at once (kubernetes.io/docs/concepts/storage/persistent-volumes/
# #access-modes): no claim; every pod (ReadWriteMany); the pods of one node (ReadWriteOnce: "still can allow
# multiple pods to access ... that volume when the pods are running on the same node"); one pod (ReadWriteOncePod);
# not known yet (an existing claim the apply layer has not read).
ClaimMode = Literal["none", "shared", "node", "pod", "unknown"]
SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
RECREATE = {"type": "Recreate"}


def claim_mode(reg: Registry, facts: ClusterFacts) -> ClaimMode:
    """The claim created from storageClass is ReadWriteOnce; an existing one is what its accessModes say (the apply
    layer reads them), the widest mode listed."""
    filesystem = reg.spec.config.storage.filesystem
    if filesystem is None:
        return "none"
    if filesystem.persistent_volume_claim is None:
        return "node"
    modes = facts.pvc_access_modes
    if modes is None:
        return "unknown"
    if READ_WRITE_MANY in modes:
        return "shared"
    return "pod" if modes == (READ_WRITE_ONCE_POD,) else "node"


def single_writer(reg: Registry, facts: ClusterFacts) -> bool:
    """Filesystem storage on a claim not every pod may mount read-write (unknown modes: assume one pod)."""
    return claim_mode(reg, facts) not in ("none", "shared")


def placement_keeps_pods_apart(reg: Registry) -> str | None:
    """The field of the user's placement that forbids two of this Registry's pods on one node (a required hostname
    anti-affinity, a DoNotSchedule hostname spread), or None."""
    pod = reg.spec.pod
    anti = kube_dump(pod.affinity).get("podAntiAffinity", {}) if pod.affinity is not None else {}
    for index, term in enumerate(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ()):
        if term.get("topologyKey") == HOSTNAME_KEY and _may_select(term.get("labelSelector"), reg):
            return f"spec.pod.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{index}]"
    for index, constraint in enumerate(pod.topology_spread_constraints):
        spread = kube_dump(constraint)
        if spread.get("topologyKey") == HOSTNAME_KEY and spread.get("whenUnsatisfiable") == "DoNotSchedule":
            return f"spec.pod.topologySpreadConstraints[{index}]"
    return None


def _may_select(selector: dict[str, Any] | None, reg: Registry) -> bool:
    """Whether a label selector may match this Registry's pods (its matchLabels are among their labels; a
    selector with expressions is taken to match: the safe reading)."""
    if not selector:
        return False
    pod_labels = {**reg.spec.pod.labels, **labels(reg, REGISTRY_COMPONENT)}
    return all(pod_labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items())


def surges_on_one_node(reg: Registry, facts: ClusterFacts) -> bool:
    """A ReadWriteOnce claim: a template change starts the new pod beside the running one, on its node (a required
    pod affinity, pod.py), before the old one stops; unless the user's placement keeps the pods apart."""
    return claim_mode(reg, facts) == "node" and placement_keeps_pods_apart(reg) is None


def rollout_strategy(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    """Surge (the new pod serves before the old one stops) wherever two pods may share the data; Recreate where
    they may not (ReadWriteOncePod, an unknown claim, placement that keeps them apart), for inmemory (a new pod has
    none of the old one's data: two would serve different registries), and for a surge that could not start
    within the progress deadline (facts.rollout_fallback, until that roll is done)."""
    if surges_on_one_node(reg, facts):
        return RECREATE if facts.rollout_fallback else SURGE
    if single_writer(reg, facts) or pod_local_data(reg):
        return RECREATE
    return SURGE


def pod_local_data(reg: Registry) -> bool:
    """inmemory storage: every pod has its own data, so a second pod serves pulls for pushes it never saw."""
    return reg.spec.config.storage.inmemory is not None


def effective_replicas(reg: Registry, facts: ClusterFacts) -> int:
    """spec.replicas, capped at 1 where a second pod could not share the data (problems() says why)."""
    if single_writer(reg, facts) or pod_local_data(reg):
        return min(reg.spec.replicas, 1)
    return reg.spec.replicas


def cosi_secret(reg: Registry, facts: ClusterFacts) -> str | None:
    """The COSI credentials Secret the pod mounts; None when the backend is not objectStorage or when the
    credentials Secret of an existing BucketAccess is not known yet."""
    object_storage = reg.spec.config.storage.object_storage
    if object_storage is None:
        return None
    if object_storage.bucket_access is None:
        return bucket_access.secret_name(reg)
    return facts.bucket_access_secret


def waiting_for_credentials(reg: Registry, facts: ClusterFacts) -> bool:
    """objectStorage with an existing BucketAccess whose credentials Secret the apply layer has not found."""
    return reg.spec.config.storage.object_storage is not None and cosi_secret(reg, facts) is None
