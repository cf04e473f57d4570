"""Two replicas reload one at a time, each out of the Service first.

Two registry pods on this machine (agent subprocess + berth-supervise + docker-registry each), on their own
loopback addresses (127.0.0.2 and 127.0.0.3, same port), sharing the data directory (a ReadWriteMany claim)
and the http secret (the operator's generated Secret), watching one Registry (replicas: 2) on the test API
server and taking turns through its reload Lease (made by the operator's own builder): support.registries.replicas.
Clients go
through support.traffic.balancer, which sends new connections only to pods whose agent /readyz answers 200, as
endpoints do.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest

from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import RegistryPod, filesystem_spec
from support.registries.registry import make_oci_image, push_image
from support.registries.replicas import backends, running_replicas
from support.traffic.balancer import Balancer
from support.traffic.pull_loop import PullLoop
from support.traffic.upload import SlowUpload

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

REGISTRIES = "berth.dev/v1alpha1/registries"
PODS = ("pod-a", "pod-b")
EDITS = 20
LEAVE_SECONDS = 0.3  # > the balancer's readiness period (0.05 s), as the pod's value covers its probe's


def _record(kube_api, pod_name: str) -> dict:
    obj = kube_api.get(REGISTRIES, "default", "reg") or {}
    return ((obj.get("status") or {}).get("agents") or {}).get(pod_name) or {}


def _applied(kube_api, pod: RegistryPod, pod_name: str, generation: int, level: str) -> bool:
    try:
        config = (pod.config_dir / "config.yml").read_bytes()
    except OSError:
        return False
    record = _record(kube_api, pod_name)
    return (f"level: {level}".encode() in config and record.get("observedGeneration") == generation
            and record.get("configHash") == hashlib.sha256(config).hexdigest() and not record.get("error"))


class StatusWatcher(threading.Thread):
    """Records every status.agents.<pod>.waiting seen (polling the API as a user's `kubectl get -w` would)."""

    def __init__(self, kube_api):
        super().__init__(daemon=True)
        self.kube_api, self.seen = kube_api, set()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.05):
            obj = self.kube_api.get(REGISTRIES, "default", "reg") or {}
            for pod_name, record in ((obj.get("status") or {}).get("agents") or {}).items():
                if record.get("waiting"):
                    self.seen.add((pod_name, record["waiting"]))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


@pytest.fixture
def replicas(tmp_path, kube_api):
    port = free_port()
    spec = filesystem_spec(port, http={"addr": f"127.0.0.1:{port}", "drainTimeout": "30s"})
    spec["config"]["log"]["level"] = "info"
    with running_replicas(tmp_path / "pods", kube_api, spec, leave_seconds=LEAVE_SECONDS) as pods:
        yield pods


def test_two_replicas_reload_one_at_a_time_with_no_failed_or_refused_request(replicas, kube_api, tmp_path):
    pods = replicas
    balancer = Balancer(backends(pods), check_interval=0.05).start()
    watcher = StatusWatcher(kube_api)
    loops: list[PullLoop] = []
    try:
        image = make_oci_image(tmp_path / "image", layer_size=512 * 1024)
        push_image(image, balancer.host, "demo/app:1")
        layer = image.layer_digests[0]
        # retry_seconds=0: a refused or reset connection is a failure here, not something to retry.
        loops = [PullLoop(f"{balancer.url}/v2/demo/app/blobs/{layer}", image.blobs[layer], retry_seconds=0)
                 for _ in range(2)]
        for loop in loops:
            loop.start()
        watcher.start()
        upload = SlowUpload(balancer.url, "demo/slow", os.urandom(512 * 1024), seconds=8).start()
        assert upload.in_flight.wait(20)

        level = "info"
        for _edit in range(EDITS):
            level = "warn" if level == "info" else "info"
            updated = kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"config": {"log": {"level": level}}}})
            generation = updated["metadata"]["generation"]
            for name, pod in pods.items():
                wait_for(lambda pod=pod, name=name, generation=generation, level=level:
                         _applied(kube_api, pod, name, generation, level),
                         timeout=60,
                         what=lambda generation=generation, name=name, pod=pod:
                         f"{name} to apply generation {generation}\n{pod.agent_log_text()[-3000:]}")

        upload.join(60)
        stats = [loop.stop() for loop in loops]
        watcher.stop()
        read_back = upload.read_back()
    finally:
        for loop in loops:
            loop.stop()
        balancer.stop()

    # What reached the clients: nothing failed, nothing was refused or reset, the upload went through.
    assert upload.error is None, (upload.error, upload.statuses)
    assert read_back == upload.data
    assert all(s.successes > 0 for s in stats)
    # The balancer's own counts first: a reset it made (a backend it still took for ready refused, or none was
    # ready) names a different cause than a reset from a registry, and its readiness transitions say when.
    assert balancer.stats.refused == 0 and balancer.stats.no_backend == 0, (balancer.stats, stats)
    assert [s.failures for s in stats] == [[], []], (stats, balancer.stats)
    assert sum(s.refused_retries + s.reset_retries for s in stats) == 0, stats
    assert balancer.stats.min_ready == 1, balancer.stats  # one pod out at a time, never both

    # Only one registry restarts at a time: the Lease turns never overlap, and every restart is inside its
    # own pod's turn, while the pod was out of the Service.
    turns, restarts = [], {}
    for name, pod in pods.items():
        lines = pod.agent_lines()
        restarts[name] = [line for line in lines if line.get("msg") == "restarted"]
        turns += [(line["taken_at"], line["released_at"], name) for line in lines
                  if line.get("msg") == "reload turn" and line.get("held")]
        assert len(restarts[name]) == EDITS, [line.get("msg") for line in lines]
        assert all(line["drain_wait_seconds"] >= LEAVE_SECONDS for line in restarts[name])
        own = [(start, end) for start, end, who in turns if who == name]
        for line in restarts[name]:
            began, ended = line["restart_at"], line["restart_at"] + line["restart_seconds"]
            assert any(start <= began and ended <= end for start, end in own), (line, own)
    # The registry draining the slow upload handed over to its successor (an idle one just exits at once).
    assert any(line["handed_over"] for lines in restarts.values() for line in lines)
    turns.sort()
    assert len(turns) == 2 * EDITS
    for (_s1, end, first), (start, _e2, second) in zip(turns, turns[1:]):
        assert end <= start, f"{first} and {second} held the reload Lease at once"
    # Somebody waited for its turn, and status said so while it did (and says nothing now).
    assert any(line["lease_wait_seconds"] > 0 for lines in restarts.values() for line in lines)
    assert {pod for pod, _message in watcher.seen} <= set(PODS) and watcher.seen, watcher.seen
    assert all("holds Lease reg-reload" in message for _pod, message in watcher.seen)
    assert not any(_record(kube_api, name).get("waiting") for name in PODS)
    # Both end on the new config.
    for pod in pods.values():
        assert f"level: {level}" in (pod.config_dir / "config.yml").read_text()
    print(json.dumps({"balancer": {"connections": balancer.stats.connections, "refused": balancer.stats.refused},
                      "pulls": [s.successes for s in stats], "turns": len(turns)}))
