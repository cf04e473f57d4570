"""Uninstall and data safety on the real node (docs/guide/uninstall.md), where the real garbage collector and
namespace controller run:

- the documented uninstall (`kubectl delete -k deploy`, of the overlay the install applied) removes the operator
  only: for a minute after its namespace is gone, pulls and pushes with skopeo through a Registry's Service all
  succeed; the Registry, its pods and their UIDs are unchanged; installing again replaces no pod and the new
  operator reconciles the Registry to Ready. It removes the operator every other node test relies on, so it runs
  alone (node_exclusive) and always installs Berth again (`finally`).
- deleting a namespace deletes the Registry and its claim; a volume under `persistentVolumeReclaimPolicy: Retain`
  stays Released with the data on the host, and the guide's steps bind it to a claim in a new namespace, where a
  new Registry pulls the image pushed before (same digest).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support.clusters.node import Node
from support.clusters.node_berth import (
    OPERATOR_NAMESPACE,
    REGISTRIES,
    create_registry,
    filesystem_claim,
    install_berth,
    json_patch_spec,
    registry,
    registry_pods,
    registry_ready,
    restart_counts,
    service_url,
    uninstall_berth,
    wait_for,
)
from support.common.doc_commands import block, commands
from support.registries.registry import OciImage, make_oci_image, manifest_status, pull_image, push_image

SPEC = {"image": "docker.io/library/registry:3",
        "config": {"storage": {"filesystem": {"persistentVolumeClaim": "data"}}}}


class PullsAndPushes(threading.Thread):
    """skopeo through the Service, back to back: a pull of the image pushed before (its blobs compared), then a
    push of a new small image (its manifest then found by digest). Every outcome counts; nothing is retried."""

    def __init__(self, host: str, pulled: OciImage, workdir: Path):
        super().__init__(name="pulls-and-pushes", daemon=True)
        self.host, self.pulled, self.workdir = host, pulled, workdir
        self.pulls = self.pushes = 0
        self.failures: list[str] = []
        self.stopping = threading.Event()

    def counts(self) -> tuple[int, int, int]:
        return self.pulls, self.pushes, len(self.failures)

    def run(self) -> None:
        turn = 0
        while not self.stopping.is_set():
            turn += 1
            here = self.workdir / f"turn-{turn}"
            here.mkdir(parents=True)  # skopeo makes the layout's directory, not its parents
            try:
                got = pull_image(self.host, "demo/kept:1", here / "pulled")
                assert got.blobs == self.pulled.blobs, "the pulled image differs"
                self.pulls += 1
            except (AssertionError, RuntimeError, subprocess.TimeoutExpired) as error:
                self.failures.append(f"{time.strftime('%X')} pull {turn}: {error}")
            try:
                new = make_oci_image(here / "push", layer_size=16 * 1024)
                push_image(new, self.host, f"demo/during:{turn}")
                status = manifest_status(f"http://{self.host}", "demo/during", new.manifest_digest)
                assert status == 200, f"the pushed manifest answers {status}"
                self.pushes += 1
            except (AssertionError, RuntimeError, OSError, subprocess.TimeoutExpired) as error:
                self.failures.append(f"{time.strftime('%X')} push {turn}: {error}")
            shutil.rmtree(here, ignore_errors=True)

    def stop(self) -> tuple[int, int, int]:
        self.stopping.set()
        self.join(180)
        return self.counts()


def _operator_namespace_settled(node: Node) -> bool:
    """Gone or not terminating: an install may go on (a terminating namespace refuses new objects)."""
    found = node.api.get("v1/namespaces", None, OPERATOR_NAMESPACE)
    return found is None or not found["metadata"].get("deletionTimestamp")


@pytest.mark.node_exclusive
@pytest.mark.timeout(1500)
def test_the_documented_uninstall_leaves_the_registry_serving_and_a_reinstall_replaces_no_pod(
        kube_node: Node, berth_image: str, node_namespace: str, tmp_path: Path) -> None:
    node, ns = kube_node, node_namespace
    filesystem_claim(node, ns, "data", access_mode="ReadWriteOnce")
    before = create_registry(node, ns, "kept", SPEC)
    host = service_url(node, ns, "kept").removeprefix("http://")
    image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
    push_image(image, host, "demo/kept:1")
    pods = {p["metadata"]["uid"]: restart_counts(p) for p in registry_pods(node, ns, "kept")}
    (command,) = commands("uninstall")  # install.md and uninstall.md: kubectl delete -k deploy

    traffic = PullsAndPushes(host, image, tmp_path / "traffic")
    traffic.start()
    try:
        took = uninstall_berth(node, command)
        gone_at = traffic.counts()
        # The operator went, all of it; the CRD and the Registry did not.
        assert node.api.get("rbac.authorization.k8s.io/v1/clusterroles", None, "berth-operator") is None
        assert node.api.get("apiextensions.k8s.io/v1/customresourcedefinitions", None,
                            "registries.berth.dev") is not None
        time.sleep(60)
        pulls, pushes, failed = traffic.counts()
        during = registry(node, ns, "kept")
        pods_during = {p["metadata"]["uid"]: restart_counts(p) for p in registry_pods(node, ns, "kept")}
        owned_during = [node.api.get(path, ns, "kept") for path in ("apps/v1/deployments", "v1/services")]
    finally:
        counts = traffic.stop()
        wait_for(lambda: _operator_namespace_settled(node), f"the namespace {OPERATOR_NAMESPACE} gone", 300, node)
        install_berth(node)  # whatever happened: every other node test needs its operator
    print(f"uninstall: `{command}` took {took:.1f} s; {gone_at[0]} pulls and {gone_at[1]} pushes until the "
          f"operator's namespace was gone, {pulls - gone_at[0]} pulls and {pushes - gone_at[1]} pushes in the "
          f"60 s with no operator; {counts[0]} pulls, {counts[1]} pushes, {counts[2]} failed in all")
    assert traffic.failures == [], traffic.failures
    assert pulls - gone_at[0] >= 10 and pushes - gone_at[1] >= 10, (gone_at, pulls, pushes)
    assert during["metadata"]["uid"] == before["metadata"]["uid"]
    assert during["metadata"]["generation"] == before["metadata"]["generation"]
    assert pods_during == pods, (pods, pods_during)
    assert all(owned_during), "the Registry's Deployment or Service went with the operator"

    # Installed again: the new operator picks the Registry up (an edit it must reconcile: Ready at the new
    # generation), and no pod is replaced.
    generation = json_patch_spec(node, ns, "kept", {"spec": {"config": {"log": {"level": "debug"}}}})
    wait_for(lambda: registry_ready(node, ns, "kept")
             and registry(node, ns, "kept")["metadata"]["generation"] == generation,
             "the Registry Ready at its new generation under the reinstalled operator", 180, node)
    after = {p["metadata"]["uid"]: restart_counts(p) for p in registry_pods(node, ns, "kept")}
    assert after == pods, (pods, after)
    assert pull_image(host, "demo/kept:1", tmp_path / "after").blobs == image.blobs


def _sh(node: Node, command: str, cwd: Path) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KUBECONFIG": node.kubeconfig})
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    return done.stdout


def _namespace_gone(node: Node, name: str) -> bool:
    return node.api.get("v1/namespaces", None, name) is None


@pytest.mark.timeout(1200)
def test_a_namespace_deletion_leaves_a_retain_volume_released_and_the_guide_binds_it_again(
        kube_node: Node, berth_image: str, tmp_path: Path) -> None:
    node = kube_node
    old = node.namespace()
    new = f"{old}-again"
    volume = f"{old}-data"  # filesystem_claim's name for the volume
    try:
        path = filesystem_claim(node, old, "data", access_mode="ReadWriteOnce")
        assert node.api.get("v1/persistentvolumes", None, volume)["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        create_registry(node, old, "kept", SPEC)
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, service_url(node, old, "kept").removeprefix("http://"), "demo/kept:1")

        node.keep_pod_logs(old)
        began = time.monotonic()
        node.api.delete("v1/namespaces", None, old)
        wait_for(lambda: _namespace_gone(node, old), f"the namespace {old} gone", 300, node)
        deleted = time.monotonic() - began
        assert node.api.list(REGISTRIES, old) == [] and node.api.list("v1/persistentvolumeclaims", old) == []
        released = node.api.get("v1/persistentvolumes", None, volume)
        assert released is not None and released["status"]["phase"] == "Released", released
        blob = path / "docker/registry/v2/blobs/sha256" / image.manifest_digest[7:9] / image.manifest_digest[7:]
        assert (blob / "data").read_bytes() == image.blobs[image.manifest_digest]  # the data, on the host

        # uninstall.md, "Binding a released volume again", as written.
        (listing,) = [_sh(node, c, tmp_path) for c in commands("uninstall-find-released")]
        row = next(line.split() for line in listing.splitlines() if line.startswith(volume + " "))
        assert "Released" in row and f"{old}/data" in row, listing
        (tmp_path / "claim.yaml").write_text(re.sub(r"\bPV\b", volume, block("uninstall-rebind-claim")))
        for command in commands("uninstall-rebind"):
            _sh(node, re.sub(r"\bPV\b", volume, command).replace("NAMESPACE", new), tmp_path)
        wait_for(lambda: ((node.api.get("v1/persistentvolumeclaims", new, "data") or {}).get("status") or {})
                 .get("phase") == "Bound", f"the claim {new}/data Bound to {volume}", 60, node)
        assert node.api.get("v1/persistentvolumeclaims", new, "data")["spec"]["volumeName"] == volume

        began = time.monotonic()
        create_registry(node, new, "again", SPEC)
        print(f"namespace deletion: {old} gone in {deleted:.1f} s, its volume Released; bound again in {new}, "
              f"whose Registry was Ready in {time.monotonic() - began:.1f} s")
        pulled = pull_image(service_url(node, new, "again").removeprefix("http://"), "demo/kept:1",
                            tmp_path / "pulled")
        assert pulled.manifest_digest == image.manifest_digest and pulled.blobs == image.blobs
    finally:
        for namespace in (new, old):
            if not _namespace_gone(node, namespace):
                node.delete_namespace(namespace)  # and the volume bound to its claim
        if node.api.get("v1/persistentvolumes", None, volume) is not None:
            node.api.delete("v1/persistentvolumes", None, volume)
