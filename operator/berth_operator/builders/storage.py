"""Decisions that follow from the storage backend: which claim and credentials the pod mounts, how many pods
may run, and how they are replaced."""

from __future__ import annotations

from berth_api import Registry

from . import names
from .context import ClusterFacts

READ_WRITE_MANY = "ReadWriteMany"


def claim_name(reg: Registry) -> str | None:
    """The PersistentVolumeClaim mounted at /var/lib/registry; None unless the backend is filesystem."""
    filesystem = reg.spec.config.storage.filesystem
    if filesystem is None:
        return None
    return filesystem.persistent_volume_claim or names.pvc_name(reg)


def single_writer(reg: Registry, facts: ClusterFacts) -> bool:
    """Filesystem storage on a claim only one node may mount read-write.

    The claim created from storageClass is ReadWriteOnce. An existing claim counts as ReadWriteOnce unless the
    apply layer saw ReadWriteMany among its accessModes (unknown modes: assume the safe case, one pod).
    """
    filesystem = reg.spec.config.storage.filesystem
    if filesystem is None:
        return False
    if filesystem.persistent_volume_claim is None:
        return True
    return READ_WRITE_MANY not in (facts.pvc_access_modes or ())


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
        return names.cosi_secret_name(reg)
    return facts.bucket_access_secret


def waiting_for_credentials(reg: Registry, facts: ClusterFacts) -> bool:
    """objectStorage with an existing BucketAccess whose credentials Secret the apply layer has not found."""
    return reg.spec.config.storage.object_storage is not None and cosi_secret(reg, facts) is None
