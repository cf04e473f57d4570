"""metadata shared by every object the operator makes: namespace, labels and the owner reference; and, for what
holds data, the deletion policy that decides whether the Registry owns it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth_api import API_VERSION, KIND, Registry
from berth_api.storage import DELETE, DeletionPolicy

from . import names

# On the claims Berth makes (filesystem claim, COSI BucketClaim and BucketAccess): the policy they were made or last
# switched under, for whoever finds one without an owner reference (docs/guide/uninstall.md).
DELETION_POLICY_ANNOTATION = "berth.dev/deletion-policy"


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


def data_meta(reg: Registry, name: str, component: str, policy: DeletionPolicy) -> dict[str, Any]:
    """An object holding data: owned by the Registry (deleted with it) only under Delete. Under Retain it keeps
    Berth's labels, which name the Registry: one created again with that name adopts it (the caches find it by
    label, and the pod mounts it by name)."""
    meta = object_meta(reg, name, component)
    meta["annotations"] = {DELETION_POLICY_ANNOTATION: policy}
    if policy != DELETE:
        del meta["ownerReferences"]
    return meta


def made_for(obj: Mapping[str, Any], reg: Registry) -> bool:
    """Whether Berth made obj for this Registry: its controller reference names the Registry's uid, or (a retained
    claim, or one a namesake left under Retain: no controller) Berth's labels name the Registry."""
    meta = obj.get("metadata") or {}
    controllers = [ref.get("uid") for ref in meta.get("ownerReferences") or () if ref.get("controller")]
    if controllers:
        return controllers == [reg.metadata.get("uid")] and reg.metadata.get("uid") is not None
    labels = meta.get("labels") or {}
    return (labels.get(names.MANAGED_BY_LABEL) == "berth"
            and labels.get(names.INSTANCE_LABEL) == names.registry_name(reg))
