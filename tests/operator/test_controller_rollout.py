"""A roll on a ReadWriteOnce claim: the new pod surges beside the running one; when it cannot start
there within spec.rollout.progressDeadlineSeconds, that roll goes on by Recreate (said in Degraded and an Event)
and the next one surges again. The Deployment controller's and the scheduler's parts are played through the
status subresources, as the API server would carry them."""

from __future__ import annotations

import time
from typing import Any

from support.clusters.operator_harness import wait_for

NS = "rollout"
SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def storage_class(kube_api) -> None:
    if kube_api.get("storage.k8s.io/v1/storageclasses", None, "standard") is None:
        kube_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
                         "provisioner": "example.com/disk"})


def registry(name: str, recreate: bool = True) -> dict[str, Any]:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
            "spec": {"config": {"storage": {"filesystem": {"storageClass": "standard"}}},
                     "rollout": {"progressDeadlineSeconds": 60, "recreateAfterDeadline": recreate}}}


def condition(harness, name: str, ctype: str) -> tuple[str, str, str]:
    cond = harness.condition(NS, name, ctype) or {}
    return cond.get("status"), cond.get("reason"), cond.get("message", "")


def deployment_status(kube_api, name: str, reason: str, status: str) -> None:
    dep = kube_api.get("apps/v1/deployments", NS, name)
    kube_api.patch("apps/v1/deployments", NS, name, {"status": {
        "observedGeneration": dep["metadata"]["generation"], "replicas": 2, "updatedReplicas": 1,
        "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [{"type": "Progressing", "status": status, "reason": reason, "message": "m"}]}},
        subresource="status")


def pod(kube_api, name: str, labels: dict[str, str], status: dict[str, Any]) -> None:
    kube_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
                     "spec": {"containers": [{"name": "registry", "image": "x"}]}})
    kube_api.patch("v1/pods", NS, name, {"status": status}, subresource="status")


UNSCHEDULABLE = {"phase": "Pending", "conditions": [{
    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
    "message": "0/1 nodes are available: 1 Insufficient memory."}]}
PULL_FAILS = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
              "containerStatuses": [{"name": "registry", "image": "x", "restartCount": 0, "state": {"waiting": {
                  "reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}}]}


def test_a_surge_that_cannot_be_placed_goes_on_by_recreate_once_past_its_deadline(operator_harness, kube_api):
    harness = operator_harness([NS], refresh_interval=0.3)
    storage_class(kube_api)
    kube_api.create(registry("disk"))
    harness.wait_reconciled(NS, "disk")
    dep = kube_api.get("apps/v1/deployments", NS, "disk")
    assert dep["spec"]["strategy"] == SURGE and dep["spec"]["progressDeadlineSeconds"] == 60
    labels = dep["spec"]["template"]["metadata"]["labels"]
    pod(kube_api, "disk-old", labels, {"phase": "Running"})
    pod(kube_api, "disk-new", labels, UNSCHEDULABLE)
    # Within the deadline: said at once, the old pod keeps serving, the roll waits.
    wait_for(lambda: condition(harness, "disk", "Degraded")[1] == "Unschedulable", "Unschedulable")
    assert "Insufficient memory" in condition(harness, "disk", "Degraded")[2]
    assert "pod disk-old keeps serving" in condition(harness, "disk", "Degraded")[2]
    deployment_status(kube_api, "disk", "ReplicaSetUpdated", "True")
    time.sleep(1)
    assert kube_api.get("apps/v1/deployments", NS, "disk")["spec"]["strategy"] == SURGE

    deployment_status(kube_api, "disk", "ProgressDeadlineExceeded", "False")
    wait_for(lambda: kube_api.get("apps/v1/deployments", NS, "disk")["spec"]["strategy"] == {"type": "Recreate"},
             "the fallback to Recreate")
    fallback = kube_api.get("apps/v1/deployments", NS, "disk")
    assert fallback["metadata"]["annotations"]["berth.dev/rollout-fallback"] == "true"
    assert fallback["spec"]["template"] == dep["spec"]["template"]  # the strategy only: nothing rolls for it
    wait_for(lambda: condition(harness, "disk", "Degraded")[2].find("spec.rollout.progressDeadlineSeconds") >= 0,
             "RolloutFallback in Degraded")
    wait_for(lambda: any(e["reason"] == "RolloutFallback" for e in harness.events(NS, "disk")), "its Event")

    # Recreate made progress (the old pod went, the new one started): still Recreate until the roll is done.
    kube_api.delete("v1/pods", NS, "disk-old")
    deployment_status(kube_api, "disk", "ReplicaSetUpdated", "True")
    time.sleep(1)
    assert kube_api.get("apps/v1/deployments", NS, "disk")["spec"]["strategy"] == {"type": "Recreate"}
    kube_api.patch("v1/pods", NS, "disk-new", {"status": {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"}]}}, subresource="status")
    deployment_status(kube_api, "disk", "NewReplicaSetAvailable", "True")
    wait_for(lambda: kube_api.get("apps/v1/deployments", NS, "disk")["spec"]["strategy"] == SURGE, "surge again")
    assert "berth.dev/rollout-fallback" not in (kube_api.get("apps/v1/deployments", NS, "disk")["metadata"]
                                                .get("annotations") or {})
    wait_for(lambda: condition(harness, "disk", "Degraded")[0] == "False", "Degraded cleared")


def _stalled(operator_harness, kube_api, name: str, new_pod: dict[str, Any], *, recreate: bool):
    """A RWO Registry whose roll passed its deadline: the old pod Running, the new one as `new_pod` says."""
    harness = operator_harness([NS], refresh_interval=0.3)
    storage_class(kube_api)
    kube_api.create(registry(name, recreate=recreate))
    harness.wait_reconciled(NS, name)
    labels = kube_api.get("apps/v1/deployments", NS, name)["spec"]["template"]["metadata"]["labels"]
    pod(kube_api, f"{name}-old", labels, {"phase": "Running"})
    pod(kube_api, f"{name}-new", labels, new_pod)
    deployment_status(kube_api, name, "ProgressDeadlineExceeded", "False")
    return harness


def test_by_default_a_stalled_surge_waits_and_the_old_pod_serves_on(operator_harness, kube_api):
    harness = _stalled(operator_harness, kube_api, "wait", UNSCHEDULABLE, recreate=False)
    wait_for(lambda: condition(harness, "wait", "Degraded")[1] == "Unschedulable", "Unschedulable")
    assert "pod wait-old keeps serving" in condition(harness, "wait", "Degraded")[2]
    time.sleep(1)
    assert kube_api.get("apps/v1/deployments", NS, "wait")["spec"]["strategy"] == SURGE


def test_a_surge_pod_that_cannot_pull_its_image_never_takes_the_old_pod_down(operator_harness, kube_api):
    harness = _stalled(operator_harness, kube_api, "pull", PULL_FAILS, recreate=True)
    wait_for(lambda: condition(harness, "pull", "Degraded")[1] == "ImagePullFailed", "ImagePullFailed")
    time.sleep(1)
    assert kube_api.get("apps/v1/deployments", NS, "pull")["spec"]["strategy"] == SURGE
