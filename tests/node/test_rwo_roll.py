"""A pod-template change of a one-replica Registry on a ReadWriteOnce claim, on the real node: the new
pod starts beside the old one on the claim's node and serves before the old one leaves its Service (preStop) and
drains, so a probe through the Service (a new connection every 20 ms, no retry) and an 8 s upload see nothing.
Before, every such change was Recreate: 18 to 20 s down. A ReadWriteOncePod claim stays Recreate (its cost is
printed, docs/guide/install.md "What rolls the pods"); a new pod that cannot be placed leaves the old one serving,
and the Registry says why."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import threading
import time
import urllib.parse

from berth_api import GC_REQUEST_ANNOTATION
from support.clusters.node import Node
from support.clusters.node_berth import (
    REGISTRIES,
    condition,
    create_registry,
    filesystem_claim,
    json_patch_spec,
    ready,
    registry,
    registry_pods,
    service_url,
    wait_for,
)
from support.registries.registry import http_get, make_oci_image, push_image
from support.traffic.new_connections import NewConnectionLoop
from support.traffic.upload import SlowUpload

SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def _spec(claim: str) -> dict:
    return {"image": "docker.io/library/registry:3", "http": {"drainTimeout": "30s"},
            "config": {"storage": {"filesystem": {"persistentVolumeClaim": claim}}},
            "rollout": {"progressDeadlineSeconds": 30}}


def _rolled(node: Node, namespace: str, name: str, old_uid: str) -> bool:
    """The roll is over: one pod, a new one, Ready, and nothing else of the Registry left (the old one gone)."""
    found = [p for p in node.api.request("GET", f"/api/v1/namespaces/{namespace}/pods", query={
        "labelSelector": f"app.kubernetes.io/instance={name},app.kubernetes.io/name=registry"})["items"]]
    return len(found) == 1 and found[0]["metadata"]["uid"] != old_uid and ready(found[0])


def _roll(node: Node, namespace: str, name: str, patch: dict, what: str) -> tuple[float, object]:
    """Apply `patch` under the probe and an 8 s upload; (seconds from the edit until a new pod serves, counts)."""
    (old,) = registry_pods(node, namespace, name)
    url = service_url(node, namespace, name)
    parts = urllib.parse.urlsplit(url)
    probe = NewConnectionLoop(parts.hostname, parts.port, pause=0.02).start()
    upload = SlowUpload(url, "demo/slow", os.urandom(512 * 1024), seconds=8).start()
    try:
        assert upload.in_flight.wait(30), "the upload did not start"
        began = time.monotonic()
        json_patch_spec(node, namespace, name, {"spec": patch})
        wait_for(lambda: any(p["metadata"]["uid"] != old["metadata"]["uid"] and ready(p)
                             for p in registry_pods(node, namespace, name)), f"{what}: the new pod Ready", 240, node)
        serving = time.monotonic() - began
        wait_for(lambda: _rolled(node, namespace, name, old["metadata"]["uid"]), f"{what}: the old pod gone", 240,
                 node)
        upload.join(120)
    finally:
        counts = probe.stop()
    print(f"{what}: the new pod served {serving:.1f} s after the edit; through the Service {counts.answered} "
          f"answered, {counts.refused} refused, {counts.closed_without_response} closed without a response, "
          f"{counts.failed} failed; upload {upload.error or 'completed'}")
    assert upload.error is None and upload.read_back() == upload.data, (upload.error, upload.statuses)
    return serving, counts


def test_template_changes_on_a_readwriteonce_claim_refuse_nothing(kube_node: Node, berth_image: str,
                                                                  node_namespace: str) -> None:
    ns = node_namespace
    filesystem_claim(kube_node, ns, "data", access_mode="ReadWriteOnce")
    create_registry(kube_node, ns, "disk", _spec("data"))
    deployment = kube_node.api.get("apps/v1/deployments", ns, "disk")
    assert deployment["spec"]["strategy"] == SURGE
    terms = deployment["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms[-1]["topologyKey"] == "kubernetes.io/hostname"
    for what, patch in (("spec.image", {"image": "docker.io/library/registry:3.1.1"}),
                        ("resources", {"resources": {"requests": {"cpu": "20m", "memory": "64Mi"}}})):
        _serving, counts = _roll(kube_node, ns, "disk", patch, what)
        assert counts.refused == 0 and counts.failed == 0 and counts.closed_without_response == 0, (what, counts)
        assert counts.answered > 100, (what, counts)

    # A new pod that cannot be placed beside the old one: the old one serves on, the Registry says why, and the
    # roll waits past its deadline (the default; spec.rollout.recreateAfterDeadline would stop the old pod).
    (old,) = registry_pods(kube_node, ns, "disk")
    json_patch_spec(kube_node, ns, "disk", {"spec": {"resources": {"requests": {"cpu": "64"}}}})
    wait_for(lambda: "keeps serving" in condition(registry(kube_node, ns, "disk"), "Degraded").get("message", ""),
             "the Registry to say why the new pod waits", 120, kube_node)
    message = condition(registry(kube_node, ns, "disk"), "Degraded")["message"]
    assert "Insufficient cpu" in message and old["metadata"]["name"] in message, message
    wait_for(lambda: any(c.get("reason") == "ProgressDeadlineExceeded" for c in (kube_node.api.get(
        "apps/v1/deployments", ns, "disk").get("status") or {}).get("conditions") or ()),
        "the Deployment past its progress deadline", 120, kube_node)
    time.sleep(5)
    assert kube_node.api.get("apps/v1/deployments", ns, "disk")["spec"]["strategy"] == SURGE
    assert any(p["metadata"]["uid"] == old["metadata"]["uid"] and ready(p)
               for p in registry_pods(kube_node, ns, "disk"))
    url = service_url(kube_node, ns, "disk")
    parts = urllib.parse.urlsplit(url)
    probe = NewConnectionLoop(parts.hostname, parts.port, pause=0.02).start()
    time.sleep(2)
    counts = probe.stop()
    assert counts.answered > 20 and counts.refused == 0 and counts.failed == 0, counts
    # Fixed: the roll goes on, surging.
    json_patch_spec(kube_node, ns, "disk", {"spec": {"resources": {"requests": {"cpu": "20m", "memory": "64Mi"}}}})
    wait_for(lambda: condition(registry(kube_node, ns, "disk"), "Ready").get("status") == "True"
             and len(registry_pods(kube_node, ns, "disk")) == 1, "the Registry Ready again", 240, kube_node)


def test_a_readwriteoncepod_claim_rolls_by_recreate(kube_node: Node, berth_image: str, node_namespace: str) -> None:
    ns = node_namespace
    filesystem_claim(kube_node, ns, "only", access_mode="ReadWriteOncePod")
    create_registry(kube_node, ns, "single", _spec("only"))
    deployment = kube_node.api.get("apps/v1/deployments", ns, "single")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    (old,) = registry_pods(kube_node, ns, "single")
    url = service_url(kube_node, ns, "single")
    parts = urllib.parse.urlsplit(url)
    probe = NewConnectionLoop(parts.hostname, parts.port, pause=0.02).start()
    began = time.monotonic()
    json_patch_spec(kube_node, ns, "single", {"spec": {"image": "docker.io/library/registry:3.1.1"}})
    wait_for(lambda: _rolled(kube_node, ns, "single", old["metadata"]["uid"]), "the new pod Ready", 240, kube_node)
    serving = time.monotonic() - began
    time.sleep(2)
    counts = probe.stop()
    # The cost docs/guide/install.md states: the registry is down from the old pod's stop until the new one serves.
    print(f"ReadWriteOncePod, spec.image: Recreate, the new pod Ready {serving:.1f} s after the edit; "
          f"{counts.answered} answered, {counts.refused} refused, {counts.failed} failed "
          f"(+{counts.closed_without_response} closed)")


class WriteProbe(threading.Thread):
    """Asks every registry pod of a Registry, by its own IP, to start an upload, over and over: 202 while it is
    writable, 405 while read-only. What garbage collection must never run beside is a 202."""

    def __init__(self, node: Node, namespace: str, name: str, port: int = 5000):
        super().__init__(name="write-probe", daemon=True)
        self.node, self.namespace, self.name, self.port = node, namespace, name, port
        self.samples: list[tuple[float, str, int]] = []  # (wall clock, pod, status)
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.node.keep_pod_logs(self.namespace)  # an old pod's logs go with it: kept as they grow
            for pod in registry_pods(self.node, self.namespace, self.name):
                address = (pod.get("status") or {}).get("podIP")
                if not address:
                    continue
                asked = time.time()  # when the request left: a 202 to one sent after T was served after T
                try:
                    answer = http_get(f"http://{address}:{self.port}/v2/probe/blobs/uploads/", method="POST",
                                      timeout=2)
                except OSError:
                    continue
                self.samples.append((asked, pod["metadata"]["name"], answer.status))
            self.stopping.wait(0.05)

    def stop(self) -> list[tuple[float, str, int]]:
        self.stopping.set()
        self.join(30)
        return self.samples


def _iso(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


def _agent_logs(node: Node, namespace: str, name: str) -> dict[str, list[dict]]:
    """Pod name -> its agent's JSON log lines, from the logs kept on the host (a deleted pod's too)."""
    kept = pathlib.Path(node.state.logs_dir) / "pods"
    found: dict[str, list[dict]] = {}
    for directory in kept.glob(f"{namespace}_{name}-*"):
        pod = directory.name.split("_")[1]
        for log in sorted((directory / "agent").glob("*.log")):
            for line in log.read_text(errors="replace").splitlines():
                text = line.split(" ", 3)[-1]  # CRI format: time stream tag message
                if text.startswith("{"):
                    found.setdefault(pod, []).append(json.loads(text))
    return found


def test_garbage_collection_requested_during_a_roll_runs_only_once_every_pod_is_read_only(
        kube_node: Node, berth_image: str, node_namespace: str, tmp_path: pathlib.Path) -> None:
    ns = node_namespace
    data = filesystem_claim(kube_node, ns, "data", access_mode="ReadWriteOnce")
    spec = {**_spec("data"), "garbageCollection": {}}
    spec["config"]["storage"]["delete"] = {"enabled": True}
    create_registry(kube_node, ns, "rolled", spec)
    url = service_url(kube_node, ns, "rolled")
    kept, dropped = make_oci_image(tmp_path / "kept"), make_oci_image(tmp_path / "dropped")
    push_image(kept, url.removeprefix("http://"), "berth/kept:1")
    push_image(dropped, url.removeprefix("http://"), "berth/dropped:1")
    assert http_get(f"{url}/v2/berth/dropped/manifests/{dropped.manifest_digest}", method="DELETE").status == 202
    (old,) = registry_pods(kube_node, ns, "rolled")
    probe = WriteProbe(kube_node, ns, "rolled")
    probe.start()
    json_patch_spec(kube_node, ns, "rolled", {"spec": {"resources": {"requests": {"cpu": "20m", "memory": "64Mi"}}}})
    wait_for(lambda: len(registry_pods(kube_node, ns, "rolled")) == 2, "the roll's new pod beside the old one", 120,
             kube_node, interval=0.1)
    asked = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube_node.api.patch(REGISTRIES, ns, "rolled", {"metadata": {"annotations": {GC_REQUEST_ANNOTATION: asked}}})

    def last_run() -> dict | None:
        run = ((registry(kube_node, ns, "rolled").get("status") or {}).get("garbageCollection") or {}).get("lastRun")
        return run if run and run.get("trigger") == "manual" else None

    run = wait_for(last_run, "the garbage collection run's result", 300, kube_node)
    # The agents' own words, in milliseconds (the record's startedAt is the runner's start, before the others
    # acknowledged, and whole seconds): each pod's "gc read-only" acknowledgement, the runner's command. The
    # runner logs "gc finished" after it records the run, and the kubelet's log file follows the container's
    # output: the line can come a moment after the status.

    def runner_logs() -> dict[str, list[dict]] | None:
        kube_node.keep_pod_logs(ns)
        found = _agent_logs(kube_node, ns, "rolled")
        said = {line.get("msg") for line in found.get(run["runner"], [])}
        return found if {"gc started", "gc finished"} <= said else None

    logs = wait_for(runner_logs, f"the runner {run['runner']}'s 'gc started' and 'gc finished' in its log", 30,
                    kube_node)
    command = {line["msg"]: _iso(line["time"]) for line in logs[run["runner"]] if line.get("msg") in (
        "gc started", "gc finished")}
    acks = {pod: max(_iso(line["time"]) for line in lines if line.get("msg") == "gc read-only")
            for pod, lines in logs.items() if any(line.get("msg") == "gc read-only" for line in lines)}
    wait_for(lambda: _rolled(kube_node, ns, "rolled", old["metadata"]["uid"]), "the roll done", 240, kube_node)
    samples = probe.stop()
    assert run["result"] == "Succeeded" and run["blobsDeleted"] >= 1, run
    # (An old pod stopped before the runner asked never acknowledges: the runner waits for the pods there are.)
    assert run["runner"] in acks and all(at < command["gc started"] for at in acks.values()), (acks, command)
    # From the last acknowledgement to the command's end every pod is read-only: no write is accepted there.
    window = (max(acks.values()), command["gc finished"])
    during = [(at, pod, status) for at, pod, status in samples if window[0] <= at <= window[1]]
    writable = [sample for sample in during if sample[2] == 202]
    pods_seen = {pod for _at, pod, _status in samples}
    print(f"GC during a roll: every pod read-only {window[1] - window[0]:.2f} s before the command ended (its "
          f"{command['gc finished'] - command['gc started']:.2f} s), by {run['runner']}; {len(samples)} write "
          f"probes of {sorted(pods_seen)}, {len(during)} in that window, {len(writable)} writable")
    assert len(pods_seen) == 2, pods_seen  # both pods were asked: the roll overlapped the request
    assert during and writable == [], (during, writable)
    (dropped_layer,), (kept_layer,) = dropped.layer_digests, kept.layer_digests
    assert not list(data.rglob(f"blobs/sha256/{dropped_layer[7:9]}/{dropped_layer[7:]}"))
    assert list(data.rglob(f"blobs/sha256/{kept_layer[7:9]}/{kept_layer[7:]}"))
