"""metadata shared by every object the operator makes: namespace, labels and the owner reference."""

from __future__ import annotations

from typing import Any

from berth_api import API_VERSION, KIND, Registry

from . import names


def owner_reference(reg: Registry) -> dict[str, Any]:
    """Makes the Registry the controller of the object, so deleting the Registry deletes it (garbage collection)."""
    uid = reg.metadata.get("uid")
    if not uid:
        raise ValueError(f"Registry {names.registry_name(reg)} has no metadata.uid to own objects with")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": names.registry_name(reg),
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(reg: Registry, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": names.namespace(reg),
        "labels": names.labels(reg, component),
        "ownerReferences": [owner_reference(reg)],
    }
