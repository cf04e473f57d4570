"""The pod's notification outbox on a real node: a Registry on Distribution 3.1.1 posts to a receiver on
the node's bridge address that is stalled (5 s per event) while 30 images are pushed, so about 30 events are held in
the pod's outbox (its agent's metrics say how many) when the pod is deleted, as a roll, an eviction or a drain
replaces it. The kubelet stops the registry container first, then the agent (a native sidecar), which delivers what
it holds before it exits (the receiver now takes 0.1 s per event): every push event arrives."""

from __future__ import annotations

import pathlib
import re

from berth_api.pod import AGENT_HEALTH_PORT
from support.clusters.node import GATEWAY, Node
from support.clusters.node_berth import create_registry, get_text, registry_pods, service_url, wait_for
from support.registries.registry import make_oci_image, push_image
from support.services.notifications import running_receiver

PUSHES = 30


def test_a_deleted_pod_delivers_the_events_its_outbox_holds(kube_node: Node, berth_image: str,
                                                            node_namespace: str, tmp_path: pathlib.Path) -> None:
    node, ns = kube_node, node_namespace
    with running_receiver(delay=5.0, host=GATEWAY) as receiver:
        create_registry(node, ns, "hooks", {
            "image": "docker.io/library/registry:3.1.1",
            "config": {"storage": {"inmemory": {}}, "notifications": {"endpoints": [{
                "name": "sink", "url": receiver.url, "timeout": "5s", "threshold": 3, "backoff": "1s",
                "ignore": {"actions": ["pull"]}}]}},
        })
        (pod,) = registry_pods(node, ns, "hooks")
        host = service_url(node, ns, "hooks").removeprefix("http://")
        image = make_oci_image(tmp_path / "image", layer_size=16 * 1024)
        for index in range(PUSHES):
            push_image(image, host, f"demo/roll:{index}")

        metrics = f"http://{pod['status']['podIP']}:{AGENT_HEALTH_PORT}/metrics"

        def held() -> float:
            status, text = get_text(metrics)
            match = re.search(r'^berth_agent_notifications_pending\{endpoint="sink"\} (\S+)$', text, re.M)
            return float(match.group(1)) if status == 200 and match else 0.0

        pending = wait_for(lambda: held() >= PUSHES - 2 and held(), "the events held in the outbox", 60, node)
        receiver.delay = 0.1
        node.api.delete("v1/pods", ns, pod["metadata"]["name"])  # the default grace period (the pod's: 300 s)

        def tags() -> set[str]:
            return {e["target"].get("tag") for _, e in receiver.events("push") if e["target"].get("tag")}

        wait_for(lambda: tags() >= {str(i) for i in range(PUSHES)}, "every push event from the deleted pod", 120,
                 node)
        assert {e["target"]["repository"] for _, e in receiver.events("push")} == {"demo/roll"}  # ours, and whole
    print(f"{PUSHES} pushes, {pending:g} events held when the pod was deleted: all {len(tags())} delivered")
