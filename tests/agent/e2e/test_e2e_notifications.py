"""Webhook notifications with the real agent, berth-supervise and registry (2.8 and 3.1.1): a receiver on
127.0.0.1 gets the push and pull events of a real skopeo push and pull, with an Authorization header read from the
mounted notifications Secret, through the pod's outbox; rotating the Secret restarts no registry and later
events carry the new value; the value never appears in the agent's or the registry's log or metrics. And what a
reload costs in events: N pushes around a reload, all N push events received (the old registry's queue is handed to
the outbox within milliseconds), with a receiver that answers at once and one that takes 1 s."""

from __future__ import annotations

import threading
import time

import pytest

from support.common.polling import wait_for
from support.registries.pod import RegistryPod, filesystem_spec, on_distribution, registry_object
from support.registries.registry import make_oci_image, pull_image, push_image, registry_binaries
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.services.notifications import running_receiver

pytestmark = pytest.mark.e2e

TOKEN_1, TOKEN_2 = "Bearer first-n0tif1cation-token", "Bearer second-n0tif1cation-token"


def _spec(pod: RegistryPod, major: str, url: str, level: str = "info", manifests_only: bool = False) -> dict:
    spec = on_distribution(filesystem_spec(pod.port, http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "10s"}),
                           major)
    spec["config"]["log"]["level"] = level
    spec["config"]["notifications"] = {"secretName": "hooks", "endpoints": [{
        "name": "scanner", "url": url, "timeout": "2s", "threshold": 3, "backoff": "1s",
        "headers": [{"name": "Authorization", "secretKey": "token"}, {"name": "X-Source", "value": "berth-e2e"}]}]}
    if manifests_only:  # layer and config blobs are application/octet-stream: one event per manifest push
        spec["config"]["notifications"]["endpoints"][0]["ignoredMediaTypes"] = ["application/octet-stream"]
    return registry_object(spec)


@pytest.fixture(params=registry_binaries(), ids=lambda p: f"v{p[0]}")
def dist(request):
    return request.param


def _outbox_applied(pod: RegistryPod) -> list[dict]:
    """The agent's lines for a render that changed only the outbox's endpoints (no registry restart)."""
    return [line for line in pod.actions("written") if line.get("action") == "outbox"]


def _pushes(receiver, repo: str):
    return [(h, e) for h, e in receiver.events("push", manifests_only=True)
            if e.get("target", {}).get("repository") == repo]


def test_push_and_pull_events_reach_the_receiver_with_a_header_from_the_secret_rotated_hot(dist, tmp_path):
    major, binary = dist
    pod = RegistryPod(tmp_path / "pod", binary=binary)
    with running_receiver() as receiver:
        try:
            write_secret_dir(pod.mounts / "notifications", {"token": TOKEN_1 + "\n"})
            pod.write_registry_file(_spec(pod, major, receiver.url))
            pod.start_agent()
            pod.start_supervisor()
            pod.wait_serving()
            image = make_oci_image(tmp_path / "image", layer_size=32 * 1024)
            push_image(image, pod.host, "demo/app:1")
            pull_image(pod.host, "demo/app:1", tmp_path / "pulled")
            pushed = wait_for(lambda: _pushes(receiver, "demo/app"), what="the push event")
            pulled = wait_for(lambda: [(h, e) for h, e in receiver.events("pull")
                                       if e["target"]["repository"] == "demo/app"], what="the pull events")
            headers, event = pushed[0]
            assert event["target"]["digest"] == image.manifest_digest and event["target"].get("tag") == "1"
            assert headers["Authorization"] == TOKEN_1 and headers["X-Source"] == "berth-e2e"
            assert {e["target"]["digest"] for _, e in pulled} >= {image.manifest_digest}
            assert all(h["Authorization"] == TOKEN_1 for h, _ in receiver.events())

            # Rotate the Secret: the outbox's alone, no registry restart, and later events carry it.
            old_pid, applied = pod.registry_pid(), len(_outbox_applied(pod))
            swap_secret_dir(pod.mounts / "notifications", {"token": TOKEN_2 + "\n"})
            wait_for(lambda: len(_outbox_applied(pod)) > applied,
                     what=lambda: f"the new token applied\n{pod.agent_log_text()}")
            assert pod.registry_pid() == old_pid and not pod.actions("restarted") and pod.supervisor.alive()
            push_image(image, pod.host, "demo/app:2")
            second = wait_for(lambda: [(h, e) for h, e in _pushes(receiver, "demo/app")
                                       if e["target"].get("tag") == "2"], what="the second push event")
            assert second[0][0]["Authorization"] == TOKEN_2
            text = pod.agent_log_text() + pod.metrics_text()
            assert "n0tif1cation" not in text  # neither token in the log or the metrics
            # Nor in the registry container's log: the registry's one endpoint is the outbox, with no header.
            registry_log = (tmp_path / "pod" / "registry.log").read_text(errors="replace")
            assert "configuring endpoint berth-outbox" in registry_log and "scanner" not in registry_log
            assert "n0tif1cation" not in registry_log + (pod.config_dir / "registry-output").read_text()
        finally:
            pod.stop()


# With one replica a 2.8 restart can refuse a connection made in the instant the listener changes hands
# (docs/benchmarks.md: one replica has refused connections, retried by the client, and none failed). On 3.x
# (the held socket, new connections steered to the successor before the old registry's SIGTERM) none is refused.
_REFUSALS = ("connection refused", "connection reset by peer")


def _push_retrying_refusals(image, host: str, reference: str, retried: list[str], attempts: int = 5) -> None:
    """skopeo push; a refused or reset connection is retried (and recorded), anything else fails the test."""
    for attempt in range(attempts):
        try:
            push_image(image, host, reference)
            return
        except RuntimeError as error:
            if attempt == attempts - 1 or not any(refusal in str(error) for refusal in _REFUSALS):
                raise
            retried.append(reference)
            time.sleep(0.2)


@pytest.mark.parametrize("delay", [0.0, 1.0], ids=["fast-receiver", "slow-receiver"])
def test_what_a_reload_costs_in_events(dist, tmp_path, delay):
    """N pushes, a reload in the middle of them: all N push events arrive. The registry's queue is in memory
    (distribution#2422) and the old process's would die with it; its one endpoint is the outbox, which answers as
    soon as an event is on disk, so nothing waits in that queue, even for a receiver that takes 1 s per request."""
    major, binary = dist
    pod = RegistryPod(tmp_path / "pod", binary=binary)
    pushes = 16
    with running_receiver(delay=delay) as receiver:
        try:
            write_secret_dir(pod.mounts / "notifications", {"token": TOKEN_1})
            pod.write_registry_file(_spec(pod, major, receiver.url, manifests_only=True))
            pod.start_agent()
            pod.start_supervisor()
            pod.wait_serving()
            image = make_oci_image(tmp_path / "image", layer_size=16 * 1024)
            push_image(image, pod.host, "demo/warm:0")  # the blobs exist: each push below is a manifest PUT
            done: list[str] = []
            retried: list[str] = []

            def push_all():
                for index in range(pushes):
                    _push_retrying_refusals(image, pod.host, f"demo/loss:{index}", retried)
                    done.append(str(index))
                    time.sleep(0.1)  # so that the reload falls among the pushes

            pusher = threading.Thread(target=push_all, daemon=True)
            pusher.start()
            wait_for(lambda: len(done) >= pushes // 2, timeout=120, what="half of the pushes")
            pod.write_registry_file(_spec(pod, major, receiver.url, level="warn", manifests_only=True))  # mid-way
            wait_for(lambda: pod.actions("restarted"), timeout=60, what="the reload")
            reloaded_after = len(done)
            pusher.join(180)
            assert len(done) == pushes  # every push succeeded across the reload (refused connections retried)
            # Settle: the slow receiver drains the new process's queue (1 s per event); none new for 3 s.
            settled = _Settled(receiver)
            wait_for(settled, timeout=90, interval=0.2, what="the events to settle")
            received = len({e["target"]["tag"] for _, e in _pushes(receiver, "demo/loss")})
        finally:
            pod.stop()
    print(f"v{major}, receiver delay {delay}s: {pushes} pushes, reload after push {reloaded_after}, "
          f"{received} push events received, {pushes - received} lost; {len(retried)} refused connections retried")
    tags = {e["target"]["tag"] for _, e in _pushes(receiver, "demo/loss")}
    assert tags == {str(i) for i in range(pushes)}, sorted(tags, key=int)


class _Settled:
    """True once the receiver has had no new event for 3 s."""

    def __init__(self, receiver) -> None:
        self.receiver, self.count, self.since = receiver, -1, time.monotonic()

    def __call__(self) -> bool:
        count, now = len(self.receiver.events()), time.monotonic()
        if count != self.count:
            self.count, self.since = count, now
            return False
        return now - self.since >= 3.0


def test_a_rotated_header_arrives_over_the_api_before_the_volume_follows(kube_api, tmp_path):
    """The API fast path (--api-secret notifications=NAME, as the operator wires it): the Secret changed through the
    API only (the mounted copy untouched, as during the kubelet's 60-90 s) reaches the outbox, with no restart."""
    import base64

    from support.registries.registry import REGISTRY_BINARY

    pod = RegistryPod(tmp_path / "pod", binary=REGISTRY_BINARY)
    with running_receiver() as receiver:
        try:
            write_secret_dir(pod.mounts / "notifications", {"token": TOKEN_1})
            kube_api.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                             "metadata": {"name": "hooks", "namespace": "default"},
                             "data": {"token": base64.b64encode(TOKEN_1.encode()).decode()}})
            kube_api.create(_spec(pod, "2", receiver.url, manifests_only=True))
            pod.start_agent(registry="default/reg", kube_host=kube_api.url,
                            extra=["--api-secret", "notifications=hooks"])
            pod.start_supervisor()
            pod.wait_serving()
            image = make_oci_image(tmp_path / "image", layer_size=16 * 1024)
            push_image(image, pod.host, "demo/api:1")
            first = wait_for(lambda: _pushes(receiver, "demo/api"), what="the first push event")
            assert first[0][0]["Authorization"] == TOKEN_1

            def told() -> dict | None:  # status.agents.<pod>.notifications: the outbox's counts, by endpoint
                agents = (kube_api.get("berth.dev/v1alpha1/registries", "default", "reg").get("status") or {}).get(
                    "agents") or {}
                return ((agents.get("pod-0") or {}).get("notifications") or {}).get("scanner")

            record = wait_for(lambda: (lambda r: r if r and r["pending"] == 0 and r["delivered"] >= 1 else None)(
                told()), what="the endpoint's record in status")
            assert record["dropped"] == 0 and "failingSince" not in record and record["checkedAt"]
            kube_api.patch("v1/secrets", "default", "hooks",
                           {"data": {"token": base64.b64encode(TOKEN_2.encode()).decode()}})
            wait_for(lambda: _outbox_applied(pod),
                     what=lambda: f"the API copy applied\n{pod.agent_log_text()}")
            assert (pod.mounts / "notifications" / "token").read_text() == TOKEN_1  # the volume has not followed
            push_image(image, pod.host, "demo/api:2")
            second = wait_for(lambda: [(h, e) for h, e in _pushes(receiver, "demo/api") if e["target"]["tag"] == "2"],
                              what="the second push event")
            assert second[0][0]["Authorization"] == TOKEN_2
            assert pod.metric("secret_changes_applied_total", 'path="api"') == 1
            assert "n0tif1cation" not in pod.agent_log_text() + pod.metrics_text()
        finally:
            pod.stop()
