"""The PersistentVolumeClaim created from spec.config.storage.filesystem.storageClass; the one the spec names
(persistentVolumeClaim) or the class looked up (missing), the claim's binding (waiting), and its growth
(pvc_growth.py)."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import pvc_growth
from .behaviour import Behaviour
from .checks import Checks, Found, Grow, Problem, Reader, status
from .context import ClusterFacts
from .meta import STORAGE_COMPONENT, data_meta, namespace, registry_name


def name(reg: Registry) -> str:
    """The claim Berth makes from spec.config.storage.filesystem.storageClass."""
    return f"{registry_name(reg)}-data"


def claim_name(reg: Registry) -> str | None:
    """The claim mounted at /var/lib/registry: the one the spec names, or the one Berth makes; None unless the
    backend is filesystem."""
    filesystem = reg.spec.config.storage.filesystem
    if filesystem is None:
        return None
    return filesystem.persistent_volume_claim or name(reg)


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    filesystem = reg.spec.config.storage.filesystem
    if filesystem is None or filesystem.storage_class is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": data_meta(reg, name(reg), STORAGE_COMPONENT, filesystem.deletion_policy),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": filesystem.storage_class,
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": filesystem.size}},
        },
    }


def missing(reader: Reader, reg: Registry) -> Found:
    """The claim the spec names (its accessModes are a fact for the rollout strategy), or the class to make one."""
    fs, ns = reg.spec.config.storage.filesystem, namespace(reg)
    if fs is not None and fs.persistent_volume_claim:
        claim = reader.get("v1", "PersistentVolumeClaim", ns, fs.persistent_volume_claim)
        if claim is None:
            return Found([Problem(
                "MissingPVC",
                f"PersistentVolumeClaim {fs.persistent_volume_claim} "
                f"(spec.config.storage.filesystem.persistentVolumeClaim) not found in namespace {ns}",
            )])
        modes = (claim.get("spec") or {}).get("accessModes")
        return Found(facts={"pvc_access_modes": tuple(modes) if modes else None})
    if fs is not None and fs.storage_class and reader.class_missing("storage.k8s.io/v1", "StorageClass",
                                                                     fs.storage_class):
        return Found([Problem(
            "MissingStorageClass",
            f"StorageClass {fs.storage_class} (spec.config.storage.filesystem.storageClass) not found",
        )])
    return Found()


def waiting(reader: Reader, reg: Registry) -> list[Problem]:
    mounted = claim_name(reg)
    if mounted is None:
        return []
    claim = reader.get("v1", "PersistentVolumeClaim", namespace(reg), mounted)
    phase = status(claim).get("phase")
    if claim is not None and phase != "Bound":
        return [Problem("WaitingForPVC", f"PersistentVolumeClaim {mounted} is {phase or 'Pending'}")]
    return []


# The claim is created, never applied; the one Berth made grows in place (its one patch).
BEHAVIOURS = (Behaviour("v1", "PersistentVolumeClaim", builders=(build,),
                        checks=Checks(missing, waiting, Grow(claim_name, pvc_growth.plan))),)
