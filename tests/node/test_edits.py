"""A CR edit on a real node is applied in place on Distribution 2.8 (which binds its own listener, overlapped): the
same pod, the same container restart counts, a new registry process; and the registry's own metrics are scraped
through the pod's `reg-metrics` port across it. Distribution 3's in-place edit (the held socket) is
test_held_socket.py's case, with the same checks under load; the metrics helpers are
support.clusters.node_berth's."""

from __future__ import annotations

import re

from berth_api.pod import REGISTRY_METRICS_PORT
from support.clusters.node import Node
from support.clusters.node_berth import (
    applied_generation,
    base_gets,
    create_registry,
    get_text,
    json_patch_spec,
    registry_pids,
    registry_pods,
    restart_counts,
    service_url,
    wait_for,
)


def test_cr_edit_is_applied_in_place_and_reg_metrics_follow_the_new_process(kube_node: Node, berth_image: str,
                                                                             node_namespace: str) -> None:
    spec = {"image": "docker.io/library/registry:2.8.2",
            "config": {"log": {"level": "info"}, "storage": {"inmemory": {}}}}
    create_registry(kube_node, node_namespace, "edited", spec)
    (pod,) = registry_pods(kube_node, node_namespace, "edited")
    (before,) = wait_for(lambda: registry_pids(kube_node, pod), "the registry process", 30)
    counts = restart_counts(pod)
    assert set(counts.values()) == {0}, counts
    url = service_url(kube_node, node_namespace, "edited")
    metrics_url = f"http://{pod['status']['podIP']}:{REGISTRY_METRICS_PORT}/metrics"
    assert get_text(f"{url}/v2/")[0] == 200
    status, text = get_text(metrics_url)
    assert status == 200 and base_gets(text) >= 1, text[-2000:]

    generation = json_patch_spec(kube_node, node_namespace, "edited", {"spec": {"config": {"log": {"level": "debug"}}}})
    name = pod["metadata"]["name"]
    wait_for(lambda: applied_generation(kube_node, node_namespace, "edited").get(name) == generation,
             f"the agent of {name} to apply generation {generation}", 60, kube_node)
    (after_pod,) = registry_pods(kube_node, node_namespace, "edited")
    assert after_pod["metadata"]["uid"] == pod["metadata"]["uid"]  # the same pod
    assert restart_counts(after_pod) == counts  # no container restarted
    (after,) = wait_for(lambda: [p for p in registry_pids(kube_node, after_pod) if p != before] or None,
                        "a new registry process", 30)
    assert after != before
    assert before not in registry_pids(kube_node, after_pod)  # the old one drained and left
    # The Deployment's template did not change: the edit rolled nothing.
    (pod_now,) = registry_pods(kube_node, node_namespace, "edited")
    assert pod_now["metadata"]["labels"]["pod-template-hash"] == pod["metadata"]["labels"]["pod-template-hash"]

    # The stable metrics port now answers for the new process: its counters start again from its own requests.
    assert get_text(f"{url}/v2/")[0] == 200
    status, text = get_text(metrics_url)
    assert status == 200 and re.search(r"^registry_http_requests_total\{", text, re.M), text[-2000:]
    assert base_gets(text) >= 1
