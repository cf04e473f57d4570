"""One replica of Distribution 3 on a real node (issue 29 acceptance): berth-supervise holds the registry's
listening socket, so 10 reloads under a pull load through the Service refuse no connection at all (no retry)."""

from __future__ import annotations

import urllib.parse

from support.new_connections import NewConnectionLoop
from support.node import Node
from support.node_berth import (
    applied_generation,
    create_registry,
    json_patch_spec,
    registry_pids,
    registry_pods,
    restart_counts,
    service_url,
    wait_for,
)

RELOADS = 10


def test_ten_reloads_of_one_replica_refuse_nothing_through_the_service(kube_node: Node, berth_image: str,
                                                                        node_namespace: str) -> None:
    spec = {"image": "docker.io/library/registry:3", "config": {"log": {"level": "info"}, "storage": {"inmemory": {}}}}
    create_registry(kube_node, node_namespace, "held", spec)
    (pod,) = registry_pods(kube_node, node_namespace, "held")
    counts = restart_counts(pod)
    name = pod["metadata"]["name"]
    url = urllib.parse.urlsplit(service_url(kube_node, node_namespace, "held"))
    loops = [NewConnectionLoop(url.hostname, url.port).start() for _ in range(3)]
    pids = set()
    try:
        wait_for(lambda: all(loop.counts.answered > 5 for loop in loops), "pulls through the Service", 30)
        for index in range(RELOADS):
            level = "debug" if index % 2 == 0 else "info"
            patch = {"spec": {"config": {"log": {"level": level}}}}
            generation = json_patch_spec(kube_node, node_namespace, "held", patch)
            wait_for(lambda generation=generation: applied_generation(kube_node, node_namespace, "held").get(name)
                     == generation, f"{name} to apply generation {generation}", 60, kube_node)
            pids.update(registry_pids(kube_node, pod))
    finally:
        totals = [loop.stop() for loop in loops]
    total = totals[0].add(totals[1]).add(totals[2])
    print(f"{RELOADS} reloads of one 3.x replica through its Service: {total.answered} answered, {total.refused} "
          f"refused, {total.closed_without_response} closed without a response, {total.failed} failed")
    assert total.refused == 0 and total.failed == 0, total
    assert total.answered > RELOADS * 10, total
    (after,) = registry_pods(kube_node, node_namespace, "held")
    assert after["metadata"]["uid"] == pod["metadata"]["uid"] and restart_counts(after) == counts
    assert len(pids) > RELOADS // 2, pids  # new registry processes, one per reload (sampled after each)
