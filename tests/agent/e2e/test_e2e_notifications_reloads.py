"""On 3.x a reload loses no notification. The real agent, berth-supervise and registry 3.1.1, a
real HTTP receiver that takes 1 s per request, skopeo pushes throughout, reloads (edits, and header-Secret rotations,
which the pod's outbox takes with no restart) among them: every manifest and blob event arrives, counted by event id
(duplicates counted apart). And an endpoint that is down: reloads still complete at once, the outbox holds the events
(pending, failing since) and delivers every one once the endpoint is back."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import RegistryPod, filesystem_spec, on_distribution, registry_object
from support.registries.registry import REGISTRY3_BINARY, make_oci_image, push_image, requires_registry3
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.services.notifications import running_receiver

pytestmark = [pytest.mark.e2e, requires_registry3]

TOKEN = "Bearer reload-n0tif1cation-token-{}"


def _spec_notifications(url: str) -> dict:
    return {"secretName": "hooks", "endpoints": [{
        "name": "scanner", "url": url, "timeout": "2s", "threshold": 3, "backoff": "1s",
        "ignore": {"actions": ["pull"]},  # a scanner's or an audit sink's: what was pushed (skopeo's HEADs are pulls)
        "headers": [{"name": "Authorization", "secretKey": "token"}]}]}


def _spec(pod: RegistryPod, url: str, level: str) -> dict:
    spec = on_distribution(filesystem_spec(pod.port, http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "10s"}),
                           "3")
    spec["config"]["log"]["level"] = level
    spec["config"]["notifications"] = _spec_notifications(url)
    return registry_object(spec)


def _start(pod: RegistryPod, url: str) -> None:
    write_secret_dir(pod.mounts / "notifications", {"token": TOKEN.format(0)})
    pod.write_registry_file(_spec(pod, url, "info"))
    pod.start_agent()
    pod.start_supervisor()
    pod.wait_serving()


def _applied(pod: RegistryPod) -> int:
    """Registry restarts, and renders that changed only the outbox's endpoints (no restart)."""
    return len(pod.actions("restarted")) + sum(1 for line in pod.actions("written") if line.get("action") == "outbox")


def _reload(pod: RegistryPod, url: str, index: int) -> None:
    """An edit (the log level: a registry restart) or a rotation of the header Secret (the outbox's alone),
    alternately; waits until it is applied."""
    applied = _applied(pod)
    if index % 2:
        swap_secret_dir(pod.mounts / "notifications", {"token": TOKEN.format(index)})
    else:
        pod.write_registry_file(_spec(pod, url, "warn" if index % 4 == 2 else "info"))
    wait_for(lambda: _applied(pod) > applied, timeout=60,
             what=lambda: f"reload {index}\n{pod.agent_log_text()[-3000:]}")


def _push_stream(host: str, repo: str, images: list, pushes: int, done: list[str],
                 pause: float = 0.5) -> threading.Thread:
    def run() -> None:
        for index in range(pushes):
            image = images[index // 5]  # a new image (new layer and config blobs) every 5th push
            push_image(image, host, f"{repo}:{index}")
            done.append(str(index))
            time.sleep(pause)  # 0: back to back, about 3 a second

    thread = threading.Thread(target=run, daemon=True, name="pushes")
    thread.start()
    return thread


def test_no_event_is_lost_across_twenty_reloads_with_a_slow_receiver(tmp_path):
    pod = RegistryPod(tmp_path / "pod", binary=REGISTRY3_BINARY)
    pushes, reloads = 40, 20
    images = [make_oci_image(tmp_path / f"image-{n}", layer_size=8 * 1024) for n in range(pushes // 5)]
    with running_receiver(delay=1.0) as receiver:
        try:
            _start(pod, receiver.url)
            done: list[str] = []
            pusher = _push_stream(pod.host, "demo/stream", images, pushes, done, pause=0.0)  # back to back
            for index in range(reloads):
                _reload(pod, receiver.url, index + 1)
                _next_pushes(done, pushes)
            _every_event(receiver, "demo/stream", pusher, done, pushes, images, [pod])
            wait_for(lambda: len(pod.supervisor.registries()) == 1, timeout=60, what="the old registries retired")
        finally:
            pod.stop()
    ids = Counter(e["id"] for _, e in receiver.events())
    log = (tmp_path / "pod" / "registry.log").read_text(errors="replace")
    print(f"v3, receiver 1 s per request: {pushes} pushes, {reloads} reloads, {len(ids)} events received "
          f"({sum(c - 1 for c in ids.values())} duplicates), {log.count('dropped')} drops in the supervisor's log, "
          f"waits ended: {log.count('which drains: empty after')} empty")
    assert "dropped" not in log
    assert "n0tif1cation" not in log + pod.agent_log_text()


def _next_pushes(done: list[str], pushes: int) -> None:
    """A reload every 2 pushes: they fall among the pushes."""
    if len(done) < pushes:
        count = min(pushes - 1, len(done) + 1)
        wait_for(lambda: len(done) > count, timeout=60, what="the next pushes")


def _every_event(receiver, repo: str, pusher: threading.Thread, done: list[str], pushes: int, images: list,
                 pods: list[RegistryPod]) -> None:
    """Every push made, and every manifest (by tag) and blob push event received."""
    pusher.join(300)
    assert len(done) == pushes, "a push failed"
    tags = {str(i) for i in range(pushes)}
    blobs = {digest for image in images for digest in image.blobs if digest != image.manifest_digest}

    def missing() -> tuple[set[str], set[str]]:
        events = receiver.events("push")
        got = {e["target"].get("tag") for _, e in events if e["target"].get("repository") == repo}
        return tags - got, blobs - {e["target"]["digest"] for _, e in events}

    def logs() -> str:
        lines = [line for pod in pods for line in (pod.root / "registry.log").read_text(errors="replace").splitlines()
                 if "berth-supervise" in line]
        return f"every event: missing {missing()}\n" + "\n".join(lines)[-4000:]

    wait_for(lambda: missing() == (set(), set()), timeout=240, interval=0.5, what=logs)


def test_an_endpoint_that_is_down_holds_no_reload_and_gets_every_event_once_it_is_back(tmp_path):
    pod = RegistryPod(tmp_path / "pod", binary=REGISTRY3_BINARY)
    port = free_port()
    down = f"http://127.0.0.1:{port}/events"  # nothing listens there yet
    image = make_oci_image(tmp_path / "image", layer_size=8 * 1024)
    try:
        _start(pod, down)
        for index in range(3):
            push_image(image, pod.host, f"demo/down:{index}")
            began = time.monotonic()
            _reload(pod, down, 2 * index + 2)  # log-level edits: registry restarts
            assert time.monotonic() - began < 30  # the reload is done at once
        # The old registries handed their events to the outbox: none waits for the endpoint, nothing is dropped.
        wait_for(lambda: len(pod.supervisor.registries()) == 1, timeout=60, what="the old registries retired")
        wait_for(lambda: pod.metric("notifications_pending", 'endpoint="scanner"') >= 3,
                 what=lambda: f"the events held\n{pod.metrics_text()[-3000:]}")
        assert pod.metric("notifications_failing_since_timestamp_seconds", 'endpoint="scanner"') > 0
        with running_receiver(port=port) as receiver:
            wait_for(lambda: {e["target"].get("tag") for _, e in receiver.events("push")} >= {"0", "1", "2"},
                     timeout=60, what="the held events delivered")
            wait_for(lambda: pod.metric("notifications_pending", 'endpoint="scanner"') == 0, what="nothing held")
        assert pod.metric("notifications_failing_since_timestamp_seconds", 'endpoint="scanner"') == 0
        assert "dropped" not in pod.supervisor.log() and not pod.actions("notification events dropped")
        assert "n0tif1cation" not in pod.supervisor.log() + pod.agent_log_text() + pod.metrics_text()
    finally:
        pod.stop()



def test_no_event_is_lost_on_two_replicas_behind_a_balancer(tmp_path, kube_api):
    """The same with two replicas (API mode, taking turns through the reload Lease) behind a balancer that follows
    each agent's /readyz, as the Service does: every push event arrives, whichever pod took the push."""
    from support.registries.replicas import backends, running_replicas
    from support.traffic.balancer import Balancer

    with running_receiver(delay=1.0) as receiver:
        port = free_port()
        spec = on_distribution(filesystem_spec(port, http={"addr": f"127.0.0.1:{port}", "drainTimeout": "10s"}), "3")
        spec["config"]["notifications"] = _spec_notifications(receiver.url)
        pushes, reloads = 20, 10
        images = [make_oci_image(tmp_path / f"image-{n}", layer_size=8 * 1024) for n in range(pushes // 5)]
        with running_replicas(tmp_path / "pods", kube_api, spec, count=2, binary=REGISTRY3_BINARY,
                              mounts={"notifications": {"token": TOKEN.format(0)}}) as pods:
            balancer = Balancer(backends(pods)).start()
            try:
                done: list[str] = []
                pusher = _push_stream(balancer.host, "demo/two", images, pushes, done)
                for index in range(1, reloads + 1):
                    counts = {name: _applied(pod) for name, pod in pods.items()}
                    if index % 2:
                        for pod in pods.values():
                            swap_secret_dir(pod.mounts / "notifications", {"token": TOKEN.format(index)})
                    else:
                        kube_api.patch("berth.dev/v1alpha1/registries", "default", "reg",
                                       {"spec": {"config": {"log": {"level": "warn" if index % 4 == 2 else "info"}}}})
                    wait_for(lambda counts=counts: all(_applied(pod) > counts[name] for name, pod in pods.items()),
                             timeout=60, what=f"reload {index} on both pods")
                    _next_pushes(done, pushes)
                _every_event(receiver, "demo/two", pusher, done, pushes, images, list(pods.values()))
            finally:
                balancer.stop()
        ids = Counter(e["id"] for _, e in receiver.events())
        print(f"v3, 2 replicas, receiver 1 s per request: {pushes} pushes, {reloads} reloads, {len(ids)} events "
              f"({sum(c - 1 for c in ids.values())} duplicates)")
        for pod in pods.values():
            assert "dropped" not in pod.supervisor.log()


def test_kept_alive_clients_lose_no_request_across_twenty_reloads(tmp_path):
    """Python's http.client reusing one connection with no retry (GET, and a blob upload whose PUT has
    a body) and skopeo pushes, across 20 reloads: 0 failed requests. The old registry is stopped only once its
    clients have closed their connections (at most 90 s; this run is shorter)."""
    from support.traffic.kept_alive import KeptAliveClient

    pod = RegistryPod(tmp_path / "pod", binary=REGISTRY3_BINARY)
    image = make_oci_image(tmp_path / "image", layer_size=8 * 1024)
    with running_receiver() as receiver:
        try:
            _start(pod, receiver.url)
            failed: list[str] = []
            pushed: list[int] = []

            def pushes() -> None:
                for index in range(1000):
                    if stop.is_set():
                        return
                    try:
                        push_image(image, pod.host, f"demo/kept:{index}")
                        pushed.append(index)
                    except RuntimeError as error:
                        failed.append(str(error)[-300:])

            stop = threading.Event()
            pusher = threading.Thread(target=pushes, daemon=True)
            with KeptAliveClient("127.0.0.1", pod.port) as first, KeptAliveClient("127.0.0.1", pod.port) as second:
                pusher.start()
                for index in range(1, 21):
                    _reload(pod, receiver.url, index)
                    time.sleep(0.3)
                stop.set()
                pusher.join(120)
            counts = [first.stats, second.stats]
        finally:
            pod.stop()
    print(f"kept-alive across 20 reloads: {sum(c.requests for c in counts)} requests on "
          f"{sum(c.connections for c in counts)} connections, failures {[c.failures[:3] for c in counts]}; "
          f"{len(pushed)} skopeo pushes, {len(failed)} failed")
    assert all(c.requests > 50 and not c.failures for c in counts), [c.failures[:5] for c in counts]
    assert pushed and not failed, failed[:3]
