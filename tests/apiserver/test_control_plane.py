"""support.clusters.control_plane does what a cluster's controller manager and scheduler do, as their own identities:
a Deployment makes a ReplicaSet and Pods, the scheduler marks them unschedulable (there is no node), the
garbage collector removes them with their owner, a namespace gets its default ServiceAccount."""

from __future__ import annotations

from typing import Any

from support.clusters.apiserver import service_account_user
from support.common.polling import wait_for


def deployment(namespace: str, replicas: int) -> dict[str, Any]:
    labels = {"app": "probe"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "probe", "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]}}}}


def unschedulable(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or ())


def test_a_deployment_makes_pods_the_scheduler_sees_and_the_collector_removes(kube_control_plane,
                                                                              control_plane_namespace):
    api, ns = kube_control_plane.api, control_plane_namespace
    assert api.get("v1/serviceaccounts", ns, "default") is not None  # the serviceaccount controller's
    mark = api.audit_mark()
    api.create(deployment(ns, 2))

    pods = wait_for(lambda: [p for p in api.list("v1/pods", ns) if unschedulable(p)] if len(
        api.list("v1/pods", ns)) == 2 else None, "2 pods marked Unschedulable by the scheduler", 60, 0.2)
    assert {p["status"]["phase"] for p in pods} == {"Pending"}
    [replica_set] = api.list("apps/v1/replicasets", ns)
    assert all(p["metadata"]["ownerReferences"][0]["uid"] == replica_set["metadata"]["uid"] for p in pods)
    wait_for(lambda: (api.get("apps/v1/deployments", ns, "probe").get("status") or {}).get("replicas") == 2,
             "the Deployment's status written by its controller", 60, 0.2)

    # Each controller as its own ServiceAccount (--use-service-account-credentials), the scheduler as its user.
    writers = {(e["user"]["username"], e["objectRef"]["resource"], e["objectRef"].get("subresource"))
               for e in api.audit(since=mark) if e["verb"] in ("create", "update", "patch")
               and (e.get("objectRef") or {}).get("namespace") == ns}
    assert (service_account_user("kube-system", "deployment-controller"), "replicasets", None) in writers
    assert (service_account_user("kube-system", "replicaset-controller"), "pods", None) in writers
    assert ("system:kube-scheduler", "pods", "status") in writers

    api.delete("apps/v1/deployments", ns, "probe")  # background propagation: the collector does the rest
    wait_for(lambda: not api.list("v1/pods", ns) and not api.list("apps/v1/replicasets", ns),
             "the ReplicaSet and pods garbage-collected", 60, 0.2)
