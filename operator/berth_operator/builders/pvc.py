"""The PersistentVolumeClaim created from spec.config.storage.filesystem.storageClass; the one the spec names
(persistentVolumeClaim) or the class looked up (missing), and the claim's binding (waiting)."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import names
from .checks import Found, Reader, status
from .context import ClusterFacts
from .meta import data_meta
from .problems import Problem


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    filesystem = reg.spec.config.storage.filesystem
    if filesystem is None or filesystem.storage_class is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": data_meta(reg, names.pvc_name(reg), names.STORAGE_COMPONENT, filesystem.deletion_policy),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": filesystem.storage_class,
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": filesystem.size}},
        },
    }


def missing(reader: Reader, reg: Registry) -> Found:
    """The claim the spec names (its accessModes are a fact for the rollout strategy), or the class to make one."""
    fs, namespace = reg.spec.config.storage.filesystem, names.namespace(reg)
    if fs is not None and fs.persistent_volume_claim:
        claim = reader.get("v1", "PersistentVolumeClaim", namespace, fs.persistent_volume_claim)
        if claim is None:
            return Found([Problem(
                "MissingPVC",
                f"PersistentVolumeClaim {fs.persistent_volume_claim} "
                f"(spec.config.storage.filesystem.persistentVolumeClaim) not found in namespace {namespace}",
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
    fs = reg.spec.config.storage.filesystem
    if fs is None:
        return []
    claim_name = fs.persistent_volume_claim or names.pvc_name(reg)
    claim = reader.get("v1", "PersistentVolumeClaim", names.namespace(reg), claim_name)
    phase = status(claim).get("phase")
    if claim is not None and phase != "Bound":
        return [Problem("WaitingForPVC", f"PersistentVolumeClaim {claim_name} is {phase or 'Pending'}")]
    return []
