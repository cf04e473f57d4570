"""The PersistentVolumeClaim created from spec.config.storage.filesystem.storageClass."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import names
from .context import ClusterFacts
from .meta import object_meta


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    filesystem = reg.spec.config.storage.filesystem
    if filesystem is None or filesystem.storage_class is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": object_meta(reg, names.pvc_name(reg), names.STORAGE_COMPONENT),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": filesystem.storage_class,
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": filesystem.size}},
        },
    }
