"""Garbage collection end to end in one pod (the agent's half): the real agent (API mode, the test API
server), the real berth-supervise and registry (2.8 and 3.1.1), the real `registry garbage-collect`.

The test plays the operator: it writes `status.garbageCollection.request` as gc_schedule would (the Leases come
from the operator's own builders, support.registries.replicas.create_registry). While the test itself holds the
`<registry>-gc` Lease, the pod turns read-only and acknowledges (a push is refused with 405); released, the agent
takes it, runs the command and records lastRun; the pod returns to writable and a push works again. B's unique
blobs are gone from the disk, A pulls back byte-identical.
"""

from __future__ import annotations

import os
import time

import pytest
import yaml

from berth_agent.gc import report as gc_report
from berth_agent.kube.lease import ReloadLease
from berth_api.leases import gc_lease_name
from support.common.polling import wait_for
from support.registries.pod import RegistryPod, filesystem_spec
from support.registries.registry import OciImage, http_get, oci_image_example, pull_image, push_image, registry_binaries
from support.registries.replicas import create_registry

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

REGISTRIES = "berth.dev/v1alpha1/registries"


def image(layout, shared: dict[str, bytes], unique: str) -> OciImage:
    digest, blobs = oci_image_example.write_layout(layout, [shared, {f"{unique}.bin": os.urandom(64 * 1024)}])
    return OciImage(layout, digest, blobs)


def blob_path(root, digest: str):
    hex_digest = digest.split(":", 1)[1]
    return root / gc_report.BLOBS_DIR / "sha256" / hex_digest[:2] / hex_digest / "data"


def stamp(offset: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset))


def status(kube_api) -> dict:
    return (kube_api.get(REGISTRIES, "default", "reg") or {}).get("status") or {}


def read_only(pod: RegistryPod) -> bool:
    config = yaml.safe_load((pod.config_dir / "config.yml").read_text())
    return config["storage"]["maintenance"]["readonly"]["enabled"]


@pytest.mark.parametrize("dist", registry_binaries())
def test_one_pod_turns_read_only_runs_gc_records_it_and_turns_writable(dist, tmp_path, kube_api):
    major, binary = dist
    pod = RegistryPod(tmp_path / "pod", binary=binary)
    spec = filesystem_spec(pod.port, major=major)
    spec["config"]["storage"]["delete"] = {"enabled": True}
    create_registry(kube_api, spec)  # and its Leases, as the operator creates them
    try:
        pod.start_agent(registry="default/reg", kube_host=kube_api.url, pod_name="pod-a")
        pod.start_supervisor()
        pod.wait_serving()
        shared = {"shared.bin": os.urandom(96 * 1024)}
        a, b = image(tmp_path / "a", shared, "a"), image(tmp_path / "b", shared, "b")
        push_image(a, pod.host, "demo/app:a")
        push_image(b, pod.host, "demo/app:b")
        deleted = http_get(f"{pod.url}/v2/demo/app/manifests/{b.manifest_digest}", method="DELETE")
        assert deleted.status == 202, deleted
        b_unique = set(b.blobs) - set(a.blobs)
        assert len(b_unique) == 3 and all(blob_path(pod.data_dir, d).exists() for d in b_unique)
        starts = pod.registry_starts()

        # The test holds the gc Lease: the pod turns read-only and acknowledges, but nothing runs yet.
        holder = ReloadLease(kube_api.agent_client(), "default", gc_lease_name("reg"), "the-test")
        assert holder.try_acquire(60)[0]
        request = {"id": "r1", "trigger": "manual", "requestedAt": stamp(0), "dryRun": False,
                   "deleteUntagged": False, "readOnlyTimeout": "10m", "deadline": stamp(720)}
        kube_api.patch(REGISTRIES, "default", "reg", {"status": {"garbageCollection": {"request": request}}},
                       subresource="status")
        wait_for(lambda: (status(kube_api).get("agents") or {}).get("pod-a", {}).get("readOnlyFor") == "r1",
                 timeout=60, what=lambda: f"pod-a to acknowledge r1\n{pod.agent_log_text()[-3000:]}")
        assert read_only(pod) and pod.registry_starts() == starts + 1
        refused = http_get(f"{pod.url}/v2/demo/app/blobs/uploads/", method="POST")
        assert refused.status == 405, refused  # writes refused, from the registry serving read-only
        layer = f"{pod.url}/v2/demo/app/blobs/{a.layer_digests[0]}"
        assert http_get(layer, method="HEAD").status == 200  # pulls go on
        assert pod.metric("gc_read_only") == 1
        assert status(kube_api).get("garbageCollection", {}).get("lastRun") is None

        holder.release()  # now the agent takes the Lease and runs it
        wait_for(lambda: (status(kube_api).get("garbageCollection", {}).get("lastRun") or {}).get("id") == "r1",
                 timeout=120, what=lambda: f"lastRun r1\n{pod.agent_log_text()[-3000:]}")
        gc = status(kube_api)["garbageCollection"]
        last = gc["lastRun"]
        assert gc.get("active") is None
        assert (last["result"], last["runner"], last["dryRun"]) == ("Succeeded", "pod-a", False), last
        assert (last["blobsDeleted"], last["manifestsDeleted"]) == (3, 0), last
        assert last["bytesFreed"] == sum(len(b.blobs[d]) for d in b_unique), last
        assert not any(blob_path(pod.data_dir, d).exists() for d in b_unique)

        # Writable again, by the agent's own round on lastRun (the operator would clear the request later).
        wait_for(lambda: (status(kube_api).get("agents") or {}).get("pod-a", {}).get("readOnlyFor") is None
                 and not read_only(pod), timeout=60, what=lambda: f"pod-a writable\n{pod.agent_log_text()[-3000:]}")
        pod.wait_serving()
        pulled = pull_image(pod.host, "demo/app:a", tmp_path / "pulled")
        assert pulled.blobs == a.blobs
        push_image(b, pod.host, "demo/app:b-again")  # pushes work again

        messages = [line["msg"] for line in pod.agent_lines()
                    if line.get("msg") in ("gc read-only", "gc started", "gc finished", "gc writable")]
        assert messages == ["gc read-only", "gc started", "gc finished", "gc writable"], messages
        assert pod.metric("gc_runs_total", 'result="Succeeded"') == 1
        assert pod.metric("gc_blobs_deleted_total") == 3 and pod.metric("gc_read_only") == 0
        events = [e for e in kube_api.list("v1/events", "default") if e["reason"] == "GarbageCollectionStarted"]
        assert len(events) == 1 and "r1" in events[0]["message"]
    finally:
        pod.stop()
