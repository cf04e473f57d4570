"""The operator's leader handover on a real node: the leader pod deleted (the kubelet's SIGTERM, as a drain or a
rollout does), the standby takes the Lease, and a Registry edit made then is applied by the new leader."""

from __future__ import annotations

import time

from support.clusters.node import Node
from support.clusters.node_berth import (
    OPERATOR_NAMESPACE,
    OPERATOR_SELECTOR,
    create_registry,
    deployment_available,
    json_patch_spec,
    lease_holder,
    operator_pods,
    pods,
    registry_ready,
    wait_for,
)


def test_deleting_the_leader_pod_hands_over_and_an_edit_is_still_applied(kube_node: Node, berth_image: str,
                                                                           node_namespace: str) -> None:
    create_registry(kube_node, node_namespace, "led", {"config": {"storage": {"inmemory": {}}}})
    operators = wait_for(lambda: operator_pods(kube_node), "the operator's 2 pods Ready", 180, kube_node)
    names = {pod["metadata"]["name"] for pod in operators}
    leader = wait_for(lambda: lease_holder(kube_node) in names and lease_holder(kube_node), "a leader among them", 60)
    (standby,) = names - {leader}

    deleted = time.monotonic()
    kube_node.api.delete("v1/pods", OPERATOR_NAMESPACE, leader)
    holder = wait_for(lambda: (h := lease_holder(kube_node)) not in (None, leader) and h,
                      "the standby to take the Lease", 60, kube_node)
    took = time.monotonic() - deleted
    print(f"the Lease taken by {holder} {took:.1f} s after the leader pod's deletion")
    assert holder == standby, (holder, standby, f"{took:.1f} s after the deletion")
    # An edit only the operator acts on (the Service's annotations; the agent never touches the Service), made
    # once the old leader released the Lease (it then no longer writes): only the new leader can apply it.
    patch = {"spec": {"service": {"annotations": {"berth.test/handover": leader}}}}
    generation = json_patch_spec(kube_node, node_namespace, "led", patch)
    wait_for(lambda: ((kube_node.api.get("v1/services", node_namespace, "led") or {}).get("metadata", {})
                      .get("annotations") or {}).get("berth.test/handover") == leader,
             "the edit applied to the Service", 120, kube_node)
    wait_for(lambda: registry_ready(kube_node, node_namespace, "led"), f"Ready at generation {generation}", 120,
             kube_node)
    # The Deployment replaces the deleted pod, which stands by: the Lease stays with the new leader.
    wait_for(lambda: deployment_available(kube_node, OPERATOR_NAMESPACE, "berth-operator", 2),
             "the operator's replacement pod Ready", 180, kube_node)
    now = {p["metadata"]["name"] for p in pods(kube_node, OPERATOR_NAMESPACE, OPERATOR_SELECTOR)
           if not p["metadata"].get("deletionTimestamp")}
    assert leader not in now and standby in now and len(now) == 2, now
    assert lease_holder(kube_node) == standby
