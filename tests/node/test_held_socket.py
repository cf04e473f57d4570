"""One replica of Distribution 3 on a real node: berth-supervise holds the registry's
listening socket, so 10 reloads under a pull load through the Service refuse no connection at all (no retry).
Each reload is a CR edit applied in place, checked as test_edits.py checks 2.8's: the same pod, template and
restart counts, new registry processes, the first one gone, and the registry's metrics through `reg-metrics`
from the new process."""

from __future__ import annotations

import json
import re
import urllib.parse
from datetime import datetime

from berth_api.pod import AGENT_HEALTH_PORT, REGISTRY_METRICS_PORT
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
from support.registries.readyz import ReadyzProbe
from support.traffic.new_connections import NewConnectionLoop

RELOADS = 10


def test_ten_reloads_of_one_replica_refuse_nothing_through_the_service(kube_node: Node, berth_image: str,
                                                                        node_namespace: str) -> None:
    spec = {"image": "docker.io/library/registry:3", "config": {"log": {"level": "info"}, "storage": {"inmemory": {}}}}
    create_registry(kube_node, node_namespace, "held", spec)
    (pod,) = registry_pods(kube_node, node_namespace, "held")
    counts = restart_counts(pod)
    assert set(counts.values()) == {0}, counts
    name = pod["metadata"]["name"]
    (first,) = wait_for(lambda: registry_pids(kube_node, pod), "the registry process", 30)
    metrics_url = f"http://{pod['status']['podIP']}:{REGISTRY_METRICS_PORT}/metrics"
    assert get_text(f"{service_url(kube_node, node_namespace, 'held')}/v2/")[0] == 200
    status, text = get_text(metrics_url)
    assert status == 200 and base_gets(text) >= 1, text[-2000:]
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
    # None is closed: the supervisor holds every registry's socket until that registry has exited, so
    # the program always names the serving one (before: 1 to 5 per 10 reloads under CI's load,
    # docs/design.md §5.9).
    assert total.refused == 0 and total.failed == 0 and total.closed_without_response == 0, total
    assert total.answered > RELOADS * 10, total
    (after,) = registry_pods(kube_node, node_namespace, "held")
    assert after["metadata"]["uid"] == pod["metadata"]["uid"] and restart_counts(after) == counts
    # The edits rolled nothing: the Deployment's template is the same.
    assert after["metadata"]["labels"]["pod-template-hash"] == pod["metadata"]["labels"]["pod-template-hash"]
    assert len(pids - {first}) > RELOADS // 2, pids  # new registry processes, one per reload (sampled after each)
    assert first not in registry_pids(kube_node, after)  # the first drained and left
    # The stable metrics port answers for the newest process: its counters start again from its own requests.
    assert get_text(f"{service_url(kube_node, node_namespace, 'held')}/v2/")[0] == 200
    status, text = get_text(metrics_url)
    assert status == 200 and re.search(r"^registry_http_requests_total\{", text, re.M), text[-2000:]
    assert base_gets(text) >= 1


def test_kill_9_of_the_supervisor_restarts_the_container_and_the_socket_is_held_again(
        kube_node: Node, berth_image: str, node_namespace: str) -> None:
    """The known cost (docs/decisions/0007-held-socket-handover.md): the kubelet restarts the registry container, whose
    new supervisor creates the socket again; connections are refused until its registry answers."""
    import os
    import signal
    import time

    from support.clusters.node_berth import container_pid

    spec = {"image": "docker.io/library/registry:3", "config": {"log": {"level": "info"}, "storage": {"inmemory": {}}}}
    create_registry(kube_node, node_namespace, "killed", spec)
    (pod,) = registry_pods(kube_node, node_namespace, "killed")
    counts = restart_counts(pod)
    url = urllib.parse.urlsplit(service_url(kube_node, node_namespace, "killed"))
    supervisor = container_pid(kube_node, pod, "registry")
    # The agent's /readyz, asked every 10 ms at the pod's own address, never says 200 once the agent has
    # logged that nothing serves, until it logs the supervisor back.
    with ReadyzProbe(AGENT_HEALTH_PORT, host=pod["status"]["podIP"]) as probe, \
            NewConnectionLoop(url.hostname, url.port, timeout=2.0) as loop:
        wait_for(lambda: loop.counts.answered > 5, "pulls through the Service", 30)
        os.kill(supervisor, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: restart_counts(registry_pods(kube_node, node_namespace, "killed")[0])["registry"]
                 == counts["registry"] + 1, "the registry container restarted", 60, kube_node)
        before = loop.counts.answered
        wait_for(lambda: loop.counts.answered > before + 20, "answers again after the restart", 60)
        back_after = time.monotonic() - killed_at
    counts_after = loop.counts
    agent_log = [json.loads(line) for line in kube_node.kubectl(
        "logs", "-n", node_namespace, pod["metadata"]["name"], "-c", "agent").splitlines() if line.startswith("{")]
    missing = [_wall(line) for line in agent_log if line.get("msg") == "registry problem"]
    back = [_wall(line) for line in agent_log if line.get("msg") == "supervisor is back"]
    # The probe's /readyz finds the supervisor gone and wakes the agent's watch: the gap is reported even when the
    # kubelet restarts the container quicker than a look (once, before that wake, it was missed).
    told = [line for line in agent_log if "supervisor" in (line.get("msg") or "") + str(line.get("error") or "")]
    assert missing, f"the agent logged the missing supervisor: {told}"
    assert not [line for line in agent_log if line.get("msg") == "supervisor restarted"], told  # it saw the gap
    until = min([t for t in back if t > missing[0]] or [float("inf")])
    asked = probe.answers_after(missing[0], until)
    print(f"/readyz asked {len(asked)} times between the agent's 'registry problem' and 'supervisor is back': "
          f"{sorted({status for _, status in asked}, key=str)}")
    assert asked and all(status != 200 for _, status in asked), [a for a in asked if a[1] == 200][:5]
    print(f"kill -9 of berth-supervise: the container restarted, answers again within {back_after:.1f} s; "
          f"{counts_after.refused} refused, {counts_after.closed_without_response} closed without a response, "
          f"{counts_after.failed} failed meanwhile")
    (after,) = registry_pods(kube_node, node_namespace, "killed")
    assert after["metadata"]["uid"] == pod["metadata"]["uid"]
    assert container_pid(kube_node, after, "registry") != supervisor


def _wall(line: dict) -> float:
    return datetime.fromisoformat(line["time"]).timestamp()
