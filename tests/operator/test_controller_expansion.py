"""Volume expansion, the operator in process against the test API server: a larger
spec.config.storage.filesystem.size grows the claim Berth created, and only that claim; shrinking and a
class without allowVolumeExpansion are Degraded with the field and the class named; resize progress on
the claim is Progressing; the Deployment never changes."""

from __future__ import annotations

import json
from typing import Any

from berth_operator.builders.pvc_growth import decide
from berth_operator.engine.status import Finding
from support.clusters.operator_harness import REGISTRIES_PATH, wait_for

NS = "grow"
PVCS = "v1/persistentvolumeclaims"
SIZE_FIELD = "spec.config.storage.filesystem.size"


def storage_class(name: str, *, expandable: bool | None) -> dict[str, Any]:
    sc: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                          "provisioner": "example.com/disk"}
    if expandable is not None:
        sc["allowVolumeExpansion"] = expandable
    return sc


def registry(name: str, filesystem: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
            "spec": {"config": {"storage": {"filesystem": filesystem}}}}


def set_size(kube_api, name: str, size: str) -> None:
    kube_api.patch(REGISTRIES_PATH, NS, name, {"spec": {"config": {"storage": {"filesystem": {"size": size}}}}})


def requested(kube_api, claim: str) -> str:
    return kube_api.get(PVCS, NS, claim)["spec"]["resources"]["requests"]["storage"]


def claim_writes(kube_api, claim: str, mark: int = 0) -> list[tuple[str, str]]:
    return [(method, path) for method, path in kube_api.requests()[mark:]
            if method != "GET" and f"/persistentvolumeclaims/{claim}" in path.split("?")[0]]


def condition(harness, name: str, ctype: str) -> tuple[str, str, str]:
    cond = harness.condition(NS, name, ctype) or {}
    return cond.get("status"), cond.get("reason"), cond.get("message", "")


def canonical(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True)


def running(kube_api, harness, name: str) -> None:
    """Play the cluster: the claim binds and the Deployment's pod is ready, so Ready is True."""
    kube_api.patch(PVCS, NS, f"{name}-data", {"status": {"phase": "Bound", "capacity": {"storage": "10Gi"}}},
                   subresource="status")
    deployment = kube_api.get("apps/v1/deployments", NS, name)
    kube_api.patch("apps/v1/deployments", NS, name, {"status": {
        "observedGeneration": deployment["metadata"]["generation"], "replicas": 1, "readyReplicas": 1,
        "updatedReplicas": 1, "availableReplicas": 1}}, subresource="status")
    wait_for(lambda: condition(harness, name, "Ready")[0] == "True", f"Registry {name} Ready")


def seed(kube_api) -> None:
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    kube_api.create(storage_class("expandable", expandable=True))
    kube_api.create(storage_class("fixed", expandable=None))
    # The user's own claim (persistentVolumeClaim): Berth mounts it and never writes to it.
    kube_api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": "team-data", "namespace": NS},
                     "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                              "resources": {"requests": {"storage": "1Gi"}}}})


def test_a_larger_size_grows_only_the_claim_berth_created(operator_harness, kube_api):
    seed(kube_api)
    kube_api.create(registry("big", {"storageClass": "expandable", "size": "10Gi"}))
    kube_api.create(registry("team", {"persistentVolumeClaim": "team-data", "size": "10Gi"}))
    harness = operator_harness([NS], refresh_interval=0.3)
    harness.wait_reconciled(NS, "big")
    harness.wait_reconciled(NS, "team")
    assert requested(kube_api, "big-data") == "10Gi"
    running(kube_api, harness, "big")
    deployment_before = canonical(kube_api.get("apps/v1/deployments", NS, "big"))
    team_claim_before = kube_api.get(PVCS, NS, "team-data")

    mark = len(kube_api.requests())
    set_size(kube_api, "big", "20Gi")
    set_size(kube_api, "team", "50Gi")  # size does not apply to the user's claim
    harness.wait_reconciled(NS, "big")
    harness.wait_reconciled(NS, "team")
    wait_for(lambda: requested(kube_api, "big-data") == "20Gi", "the claim to grow")
    assert len(claim_writes(kube_api, "big-data", mark)) == 1, "one patch, not one per reconcile"
    wait_for(lambda: [e for e in harness.events(NS, "big") if e["reason"] == "Updated"
                      and "PersistentVolumeClaim big-data" in e["message"]], "the Normal event of the patch")

    # The Deployment is byte for byte what it was (no rollout for a size edit).
    assert canonical(kube_api.get("apps/v1/deployments", NS, "big")) == deployment_before
    # The user's claim was neither patched nor touched in any other way.
    assert claim_writes(kube_api, "team-data") == []
    assert kube_api.get(PVCS, NS, "team-data") == team_claim_before
    assert condition(harness, "team", "Degraded")[:2] == ("False", "AsExpected")

    # The cluster resizes: its conditions show as Progressing with a reason, then clear.
    kube_api.patch(PVCS, NS, "big-data", {"status": {"conditions": [{"type": "Resizing", "status": "True"}]}},
                   subresource="status")
    wait_for(lambda: condition(harness, "big", "Progressing")[:2] == ("True", "ResizingPVC"), "Progressing ResizingPVC")
    assert condition(harness, "big", "Ready")[0] == "True", "a claim grows online: the registry keeps serving"
    kube_api.patch(PVCS, NS, "big-data", {"status": {"conditions": [
        {"type": "FileSystemResizePending", "status": "True"}]}}, subresource="status")
    wait_for(lambda: condition(harness, "big", "Progressing")[:2] == ("True", "WaitingForFileSystemResize"),
             "Progressing WaitingForFileSystemResize")
    assert "big-data" in condition(harness, "big", "Progressing")[2]
    kube_api.patch(PVCS, NS, "big-data", {"status": {"capacity": {"storage": "20Gi"}, "conditions": None}},
                   subresource="status")
    wait_for(lambda: condition(harness, "big", "Progressing")[1] not in ("ResizingPVC", "WaitingForFileSystemResize"),
             "the resize to finish")
    assert condition(harness, "big", "Degraded")[:2] == ("False", "AsExpected")
    assert condition(harness, "big", "Progressing")[:2] == ("False", "Available")
    assert len(claim_writes(kube_api, "big-data", mark)) == 1
    assert canonical(kube_api.get("apps/v1/deployments", NS, "big")) == deployment_before


def test_shrinking_is_refused_with_the_field_and_class_named(operator_harness, kube_api):
    seed(kube_api)
    kube_api.create(registry("small", {"storageClass": "expandable", "size": "10Gi"}))
    harness = operator_harness([NS])
    harness.wait_reconciled(NS, "small")
    deployment_before = canonical(kube_api.get("apps/v1/deployments", NS, "small"))
    mark = len(kube_api.requests())

    set_size(kube_api, "small", "5Gi")
    harness.wait_reconciled(NS, "small")
    status, reason, message = condition(harness, "small", "Degraded")
    assert (status, reason) == ("True", "VolumeShrinkRefused")
    assert SIZE_FIELD in message and "StorageClass expandable" in message and "10Gi" in message
    events = wait_for(lambda: [e for e in harness.events(NS, "small")
                               if e["type"] == "Warning" and e["reason"] == "VolumeShrinkRefused"], "the Warning")
    assert SIZE_FIELD in events[0]["message"]
    assert requested(kube_api, "small-data") == "10Gi" and claim_writes(kube_api, "small-data", mark) == []
    assert canonical(kube_api.get("apps/v1/deployments", NS, "small")) == deployment_before

    # Back to the claim's size: nothing to refuse any more.
    set_size(kube_api, "small", "10Gi")
    harness.wait_reconciled(NS, "small")
    assert condition(harness, "small", "Degraded")[:2] == ("False", "AsExpected")


def test_a_class_without_volume_expansion_is_reported(operator_harness, kube_api):
    seed(kube_api)
    kube_api.create(registry("stuck", {"storageClass": "fixed", "size": "10Gi"}))
    harness = operator_harness([NS])
    harness.wait_reconciled(NS, "stuck")
    deployment_before = canonical(kube_api.get("apps/v1/deployments", NS, "stuck"))
    mark = len(kube_api.requests())

    set_size(kube_api, "stuck", "30Gi")
    harness.wait_reconciled(NS, "stuck")
    status, reason, message = condition(harness, "stuck", "Degraded")
    assert (status, reason) == ("True", "VolumeExpansionNotAllowed")
    assert SIZE_FIELD in message and "StorageClass fixed" in message and "allowVolumeExpansion" in message
    assert requested(kube_api, "stuck-data") == "10Gi" and claim_writes(kube_api, "stuck-data", mark) == []
    assert canonical(kube_api.get("apps/v1/deployments", NS, "stuck")) == deployment_before

    # The administrator allows expansion on the class: the next reconcile grows the claim.
    kube_api.patch("storage.k8s.io/v1/storageclasses", None, "fixed", {"allowVolumeExpansion": True})
    kube_api.patch(REGISTRIES_PATH, NS, "stuck", {"metadata": {"labels": {"touched": "1"}}})
    wait_for(lambda: requested(kube_api, "stuck-data") == "30Gi", "the claim to grow once the class allows it")
    wait_for(lambda: condition(harness, "stuck", "Degraded")[:2] == ("False", "AsExpected"), "Degraded to clear")


# ---- decide(), the pure part


def _claim(size: str, cls: str = "standard") -> dict[str, Any]:
    return {"metadata": {"name": "r-data"}, "spec": {"storageClassName": cls, "resources": {"requests": {
        "storage": size}}}}


def test_decide_compares_quantities_by_value():
    expandable = storage_class("standard", expandable=True)
    assert decide(_claim("10Gi"), "10240Mi", expandable).grow_to is None
    assert decide(_claim("10Gi"), "10Gi", expandable).findings == ()
    assert decide(_claim("10Gi"), "0.5Ti", expandable).grow_to == "0.5Ti"
    assert decide(_claim("1G"), "1Gi", expandable).grow_to == "1Gi"  # 1 G < 1 Gi


def test_decide_refuses_what_the_cluster_cannot_do():
    [shrink] = decide(_claim("10Gi"), "9Gi", storage_class("standard", expandable=True)).findings
    assert shrink.reason == "VolumeShrinkRefused" and Finding(*shrink).degrades
    [fixed] = decide(_claim("10Gi"), "11Gi", storage_class("standard", expandable=False)).findings
    assert fixed.reason == "VolumeExpansionNotAllowed" and "StorageClass standard" in fixed.message
    # A class that does not exist is MissingStorageClass's to report; one we may not read: try, the API decides.
    assert decide(_claim("10Gi"), "11Gi", None) == decide(_claim("10Gi"), "10Gi", None)
    assert decide(_claim("10Gi"), "11Gi", None, False).grow_to == "11Gi"
