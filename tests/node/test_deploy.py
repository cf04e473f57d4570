"""`kubectl apply -k deploy` on a real node: the operator's two pods Ready, one leader, a Registry Ready."""

from __future__ import annotations

from support.clusters.node import Node
from support.clusters.node_berth import create_registry, lease_holder, operator_pods, registry_pods, wait_for


def test_apply_k_deploy_runs_two_operators_one_leader_and_a_registry(kube_node: Node, berth_image: str,
                                                                     node_namespace: str) -> None:
    operators = wait_for(lambda: operator_pods(kube_node), "the operator's 2 pods Ready", 180, kube_node)
    assert {pod["spec"]["containers"][0]["image"] for pod in operators} == {berth_image}
    # Read-only root, UID 65532, as deploy/ runs it: the image must work that way.
    for pod in operators:
        assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["securityContext"]["runAsUser"] == 65532
    names = {pod["metadata"]["name"] for pod in operators}
    # One of them leads (wait_for: a handover of test_leader_handover's may be under way).
    wait_for(lambda: lease_holder(kube_node) in names, f"the Lease held by one of {names}", 60, kube_node)

    create_registry(kube_node, node_namespace, "scratch", {"config": {"storage": {"inmemory": {}}}})
    (pod,) = registry_pods(kube_node, node_namespace, "scratch")
    images = {c["name"]: c["image"] for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]}
    # The registry runs in the Berth image (berth-supervise), its binary copied out of spec.image.
    assert images == {"agent": berth_image, "registry-binary": "docker.io/library/registry:3", "registry": berth_image}
    statuses = {s["name"]: s for s in [*pod["status"]["initContainerStatuses"], *pod["status"]["containerStatuses"]]}
    assert statuses["agent"]["ready"] and statuses["registry"]["ready"], statuses
    assert statuses["registry-binary"]["state"]["terminated"]["exitCode"] == 0, statuses
