"""Three replicas of Distribution 3.1.1 on held sockets: no pod leaves its Service to reload, so an
edit reaches all three in a few seconds (it took 3 x (2 x leave + restart) = about 31 s with the pod's 5 s leave).

Real agents (API mode on the test API server, taking turns through the reload Lease) with berth-supervise and the
real 3.1.1, the pod template's --leave-seconds 5 kept: each edit must be applied, at its generation, by every pod
within 5 s, and /readyz never goes false."""

from __future__ import annotations

import hashlib
import threading
import time
import urllib.error
import urllib.request

import pytest

from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import filesystem_spec, on_distribution
from support.registries.registry import REGISTRY3_BINARY, requires_registry3
from support.registries.replicas import running_replicas

pytestmark = [pytest.mark.e2e, requires_registry3]

REGISTRIES = "berth.dev/v1alpha1/registries"
POD_LEAVE_SECONDS = 5  # the pod template's (operator builders/pod.py LEAVE_SECONDS)
BOUND_SECONDS = 5.0
EDITS = 3


def _applied(kube_api, pod, name: str, generation: int, level: str) -> bool:
    try:
        config = (pod.config_dir / "config.yml").read_bytes()
    except OSError:
        return False
    obj = kube_api.get(REGISTRIES, "default", "reg") or {}
    record = ((obj.get("status") or {}).get("agents") or {}).get(name) or {}
    return (f"level: {level}".encode() in config and record.get("observedGeneration") == generation
            and record.get("configHash") == hashlib.sha256(config).hexdigest() and not record.get("error"))


class Unready(threading.Thread):
    """Counts the looks at each agent's /readyz that did not answer 200, and keeps what each of them was (a status,
    or no answer within 2 s)."""

    def __init__(self, pods) -> None:
        super().__init__(daemon=True)
        self.pods, self.looks, self.unready = pods, 0, 0
        self.failed: list[tuple[str, str]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.05):
            for name, pod in self.pods.items():
                self.looks += 1
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{pod.health_port}/readyz", timeout=2) as answer:
                        status = str(answer.status)
                except urllib.error.HTTPError as error:
                    status = str(error.code)
                except OSError as error:
                    status = f"no answer: {error}"
                if status != "200":
                    self.unready += 1
                    self.failed.append((name, status))

    def stop(self) -> None:
        self._done.set()
        self.join(5)


def test_an_edit_is_ready_at_its_generation_on_three_replicas_within_five_seconds(tmp_path, kube_api):
    port = free_port()
    spec = on_distribution(filesystem_spec(port, http={"addr": f"127.0.0.1:{port}", "drainTimeout": "5s"}), "3")
    spec["config"]["log"]["level"] = "info"
    with running_replicas(tmp_path / "pods", kube_api, spec, count=3, leave_seconds=POD_LEAVE_SECONDS,
                          binary=REGISTRY3_BINARY) as pods:
        for pod in pods.values():
            assert "holding the registry's listening socket" in pod.supervisor.log()
        watcher = Unready(pods)
        watcher.start()
        level, took = "info", []
        try:
            for _edit in range(EDITS):
                level = "warn" if level == "info" else "info"
                began = time.monotonic()
                updated = kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"config": {"log": {"level": level}}}})
                generation = updated["metadata"]["generation"]
                wait_for(lambda generation=generation, level=level: all(
                    _applied(kube_api, pod, name, generation, level) for name, pod in pods.items()),
                    timeout=BOUND_SECONDS,
                    what=f"all three pods at generation {generation} within {BOUND_SECONDS:g}s")
                took.append(time.monotonic() - began)
        finally:
            watcher.stop()
        print(f"3 replicas on held sockets, edit to all Ready at its generation: "
              f"{', '.join(f'{t:.2f}' for t in took)} s")
        assert len(took) == EDITS
        assert watcher.looks > 0 and watcher.unready == 0, (watcher.looks, watcher.failed)
        for pod in pods.values():
            restarted = pod.actions("restarted")
            assert len(restarted) == EDITS
            assert all(line["drain_wait_seconds"] == 0 and line["no_listener_seconds"] == 0.0 for line in restarted)
