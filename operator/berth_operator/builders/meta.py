"""What every object the operator makes for a Registry shares: the Registry's name and namespace, the labels and
selectors (the label keys are berth_api's: a user's pod label may not collide with them), the owner reference;
and, for what holds data, the deletion policy that decides whether the Registry owns it. Each object's own name
is its builder module's (`name`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth_api import API_VERSION, KIND, Registry
from berth_api.pod_template import COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL, NAME_LABEL
from berth_api.storage import DELETE, DeletionPolicy

# Values of the component label.
REGISTRY_COMPONENT = "registry"
AGENT_COMPONENT = "agent"
STORAGE_COMPONENT = "storage"
HTTP_SECRET_COMPONENT = "http-secret"
METRICS_COMPONENT = "metrics"  # the metrics Service; a ServiceMonitor selects it by this label
EXPOSURE_COMPONENT = "exposure"  # the Ingress and the HTTPRoute
CERTIFICATE_COMPONENT = "certificate"  # the cert-manager Certificates

# On the claims Berth makes (filesystem claim, COSI BucketClaim and BucketAccess): the policy they were made or last
# switched under, for whoever finds one without an owner reference (docs/guide/uninstall.md).
DELETION_POLICY_ANNOTATION = "berth.dev/deletion-policy"


def registry_name(reg: Registry) -> str:
    try:
        return reg.metadata["name"]
    except KeyError:
        raise ValueError("the Registry has no metadata.name") from None


def namespace(reg: Registry) -> str:
    try:
        return reg.metadata["namespace"]
    except KeyError:
        raise ValueError(f"Registry {registry_name(reg)} has no metadata.namespace") from None


def selector_labels(reg: Registry) -> dict[str, str]:
    """Labels that pick this Registry's pods (Deployment, Service, PodDisruptionBudget). Never change them:
    a Deployment's selector is immutable."""
    return {NAME_LABEL: "registry", INSTANCE_LABEL: registry_name(reg)}


def selector_string(reg: Registry) -> str:
    """selector_labels as a label selector string, for status.selector (the scale subresource)."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector_labels(reg).items()))


def labels(reg: Registry, component: str) -> dict[str, str]:
    return {**selector_labels(reg), MANAGED_BY_LABEL: "berth", COMPONENT_LABEL: component}


def owner_reference(reg: Registry) -> dict[str, Any]:
    """Makes the Registry the controller of the object, so deleting the Registry deletes it (garbage collection)."""
    uid = reg.metadata.get("uid")
    if not uid:
        raise ValueError(f"Registry {registry_name(reg)} has no metadata.uid to own objects with")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": registry_name(reg),
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(reg: Registry, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace(reg),
        "labels": labels(reg, component),
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
    own = meta.get("labels") or {}
    return own.get(MANAGED_BY_LABEL) == "berth" and own.get(INSTANCE_LABEL) == registry_name(reg)
