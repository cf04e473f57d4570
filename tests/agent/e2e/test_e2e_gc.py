"""Garbage collection end to end in one pod.

`berth-agent run --registry default/reg` against the test API server, the real berth-supervise and the real
registry (Distribution 2.8, and 3.1.1 with BERTH_REGISTRY3_BIN), on filesystem storage and on S3 (moto, IAM
enforced, through a COSI Secret). Images A and B share a layer; B's manifest is deleted over the registry API.
A run is asked for as a user and the operator do it (support.registries.gc.request_gc: spec, annotation, the operator's
own gc_schedule.decide writing status.garbageCollection.request). First a dry run: it reports what a real run
deletes and deletes nothing. Then the real run: B's three blobs (manifest, config, own layer) leave the disk or
the bucket, A's four stay and A pulls back byte-identical with skopeo, and lastRun says Succeeded with the
counts (and the bytes freed, on filesystem storage). The real run's command is held at its start
(support.registries.gc.GatedRegistry) so the test sees the registry read-only and status.active while it runs.
"""

from __future__ import annotations

import contextlib
import json
import signal

import pytest

from support.clouds.s3 import REGION, running_moto
from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.gc import (
    GatedRegistry,
    agent_records,
    blob_upload_status,
    blobs_in_bucket,
    blobs_on_disk,
    delete_manifest,
    gc_processes,
    gc_status,
    images_a_b,
    request_gc,
    running_gc_pods,
    start_agent_again,
    wait_last_run,
    writable,
)
from support.registries.pod import filesystem_spec, on_distribution
from support.registries.registry import REGISTRY_BINARY, manifest_status, pull_image, push_image, registry_binaries

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

BUCKET = "registry-data"
POD = "pod-a"


def filesystem_gc_spec(port: int, major: str) -> dict:
    spec = filesystem_spec(port, major=major)
    spec["config"]["storage"]["delete"] = {"enabled": True}
    return spec


def s3_gc_spec(port: int, major: str) -> dict:
    return on_distribution({
        "config": {"log": {"level": "info"}, "storage": {
            "objectStorage": {"bucketClaim": "data", "bucketAccess": "data-access"},
            # Presigned redirects fail under IAM enforcement (docs/upstream.md#parts-moto).
            "redirect": {"disabled": True},
            "delete": {"enabled": True},
        }},
        "http": {"addr": f"127.0.0.1:{port}", "drainTimeout": "5s"},
    }, major)


def cosi_secret(endpoint: str, key) -> dict[str, str]:
    info = {"metadata": {"name": "bc-7f3e"}, "spec": {
        "bucketName": BUCKET, "authenticationType": "Key", "protocols": ["S3"], "secretAzure": None,
        "secretS3": {"endpoint": endpoint, "region": REGION, "accessKeyID": key.access_key_id,
                     "accessSecretKey": key.secret_access_key}}}
    return {"BucketInfo": json.dumps(info)}


def counts(run: dict) -> tuple:
    return tuple(run.get(key) for key in ("blobsMarked", "manifestsMarked", "blobsDeleted", "manifestsDeleted"))


@pytest.mark.parametrize("dist", registry_binaries())
@pytest.mark.parametrize("storage", ["filesystem", "s3"])
def test_dry_run_then_gc_removes_only_the_deleted_images_blobs(storage, dist, tmp_path, kube_api):
    major, binary = dist
    gated = GatedRegistry(tmp_path / "bin", binary)
    port = free_port()
    with contextlib.ExitStack() as stack:
        stack.callback(gated.release)  # nothing stays held if the test fails midway
        if storage == "s3":
            moto = stack.enter_context(running_moto(tmp_path / "moto"))
            key = moto.create_s3_user("registry", bucket=BUCKET)
            moto.enforce_iam()
            spec, mounts = s3_gc_spec(port, major), {"cosi": cosi_secret(moto.endpoint, key)}

            def stored() -> set[str]:
                return blobs_in_bucket(moto, BUCKET)
        else:
            spec, mounts = filesystem_gc_spec(port, major), {}

            def stored() -> set[str]:
                return blobs_on_disk(tmp_path / "pods" / "data")
        pod = stack.enter_context(running_gc_pods(tmp_path / "pods", kube_api, spec, binary=str(gated.path),
                                                  mounts=mounts))[POD]

        def logs() -> str:
            return pod.agent_log_text()[-6000:]

        a, b = images_a_b(tmp_path / "images")
        push_image(a, pod.host, "demo/app:a")
        push_image(b, pod.host, "demo/app:b")
        delete_manifest(pod.url, "demo/app", b.manifest_digest)
        b_unique = set(b.blobs) - set(a.blobs)  # B's manifest, config and own layer; the shared layer is A's too
        before = stored()
        assert set(a.blobs) | b_unique <= before, before

        # The dry run: what the real run will delete, and nothing deleted.
        dry_request = request_gc(kube_api, dry_run=True)
        dry = wait_last_run(kube_api, dry_request["id"], context=logs)
        assert dry["result"] == "Succeeded", dry
        assert (dry["dryRun"], dry["deleteUntagged"], dry["trigger"], dry["runner"]) == (True, False, "manual", POD)
        assert counts(dry) == (4, 1, 3, 0), dry
        assert dry.get("bytesFreed") in (None, 0), dry  # nothing was freed
        assert stored() == before
        (_pid, _started, dry_args), = gated.invocations()
        assert "--dry-run" in dry_args and "--delete-untagged" not in dry_args, dry_args
        wait_for(lambda: writable(pod.url), lambda: f"writable after the dry run\n{logs()}", 60, interval=0.1)

        # The real run, its command held at its start: the registry serves read-only, status says Collecting.
        gated.hold()
        request = request_gc(kube_api)
        assert request["id"] != dry_request["id"] and request["dryRun"] is False
        wait_for(lambda: len(gated.invocations()) == 2,
                 lambda: f"the garbage-collect command\n{logs()}", 60, interval=0.1)
        gc_pid, _started, args = gated.invocations()[1]
        assert "--dry-run" not in args and "--delete-untagged" not in args, args
        assert blob_upload_status(pod.url) == 405  # read-only while it runs
        assert agent_records(kube_api)[POD].get("readOnlyFor") == request["id"]
        active = gc_status(kube_api).get("active") or {}
        assert (active.get("id"), active.get("runner"), active.get("phase")) == (request["id"], POD, "Collecting")
        pulled_during = pull_image(pod.host, "demo/app:a", tmp_path / "pulled-during")  # pulls go on
        assert pulled_during.blobs == a.blobs
        gated.release()

        run = wait_last_run(kube_api, request["id"], context=logs)
        assert run["result"] == "Succeeded", run
        assert (run["dryRun"], run["runner"]) == (False, POD)
        assert counts(run) == counts(dry) == (4, 1, 3, 0), run
        assert run.get("startedAt") and run.get("finishedAt"), run
        after = stored()
        assert after == before - b_unique, (sorted(before - after), sorted(b_unique))
        if storage == "filesystem":
            assert run["bytesFreed"] == sum(len(b.blobs[digest]) for digest in b_unique), run
        else:
            assert run.get("bytesFreed") is None, run  # not measurable on S3
        assert not gc_processes(pod.config_dir / "config.yml")

        # Writable again; A pulls back byte-identical, B's manifest is gone, a push works.
        wait_for(lambda: writable(pod.url), lambda: f"writable after the run\n{logs()}", 60, interval=0.1)
        wait_for(lambda: agent_records(kube_api)[POD].get("readOnlyFor") is None,
                 lambda: f"readOnlyFor cleared\n{agent_records(kube_api)}",
                 30, interval=0.1)  # written just after the reload
        assert gc_status(kube_api).get("active") is None
        assert pull_image(pod.host, "demo/app:a", tmp_path / "pulled").blobs == a.blobs
        assert manifest_status(pod.url, "demo/app", b.manifest_digest) == 404
        push_image(b, pod.host, "demo/app:b-again")
        assert pull_image(pod.host, "demo/app:b-again", tmp_path / "b-again").blobs == b.blobs

        # What the agent said about it: both runs started and finished, with their flags and counts.
        started = {line["request_id"]: line for line in pod.actions("gc started")}
        finished = {line["request_id"]: line for line in pod.actions("gc finished")}
        assert started[dry_request["id"]]["dry_run"] is True and started[request["id"]]["dry_run"] is False
        assert finished[request["id"]]["result"] == "Succeeded"
        assert finished[request["id"]]["blobs_deleted"] == 3
        assert pod.metric("gc_runs_total", 'result="Succeeded"') == 2
        reasons = [event.get("reason") for event in kube_api.list("v1/events", "default")]
        assert reasons.count("GarbageCollectionStarted") == 2, reasons
        print(json.dumps({"storage": storage, "dist": major, "dry": counts(dry), "run": counts(run),
                          "bytesFreed": run.get("bytesFreed"), "gc_pid": gc_pid}))


def test_an_agent_restarted_mid_run_records_its_dead_run_and_goes_writable(tmp_path, kube_api):
    """One replica (the common case): kill -9 of the agent while its command runs, restarted at once as the
    kubelet does. The restarted agent is the next taker of its own gc Lease: the orphaned command in its pod is
    stopped, the run recorded Interrupted, the registry writable again, and no new run starts."""
    gated = GatedRegistry(tmp_path / "bin", REGISTRY_BINARY)
    port = free_port()
    with running_gc_pods(tmp_path / "pods", kube_api, filesystem_gc_spec(port, "2"), binary=str(gated.path)) as pods:
        pod = pods[POD]
        try:
            a, b = images_a_b(tmp_path / "images")
            push_image(a, pod.host, "demo/app:a")
            push_image(b, pod.host, "demo/app:b")
            delete_manifest(pod.url, "demo/app", b.manifest_digest)
            before = blobs_on_disk(tmp_path / "pods" / "data")
            gated.hold()
            request = request_gc(kube_api)
            wait_for(gated.invocations,
                     lambda: f"the garbage-collect command\n{pod.agent_log_text()[-4000:]}", 60, interval=0.1)
            pod.agent.send_signal(signal.SIGKILL)
            pod.agent.wait(10)
            assert gc_processes(pod.config_dir / "config.yml"), "the command outlives its agent for now"
            start_agent_again(pod, POD, kube_api)

            run = wait_last_run(kube_api, request["id"], timeout=60, context=lambda: pod.agent_log_text()[-6000:])
            assert (run["result"], run["runner"]) == ("Interrupted", POD), run
            # A7: the orphan is stopped first, then the run recorded (not left to the supervisor's watchdog).
            assert not gc_processes(pod.config_dir / "config.yml")
            wait_for(lambda: writable(pod.url),
                     lambda: f"writable again\n{pod.agent_log_text()[-4000:]}", 60, interval=0.1)
            assert len(gated.invocations()) == 1, gated.invocations()  # no second run
            assert blobs_on_disk(tmp_path / "pods" / "data") == before  # it never got past its start
            assert gc_status(kube_api).get("active") is None
        finally:
            gated.release()


@pytest.mark.parametrize("dist", registry_binaries())
def test_delete_untagged_removes_a_manifest_whose_tag_moved_only_when_asked(dist, tmp_path, kube_api):
    """spec.garbageCollection.deleteUntagged reaches the command: B was `latest` until A was pushed as `latest`
    too. A run without the flag keeps B (still pullable by digest); a run with it deletes B's manifest and its
    unique blobs, and A, tagged twice, stays whole."""
    major, binary = dist
    port = free_port()
    with running_gc_pods(tmp_path / "pods", kube_api, filesystem_gc_spec(port, major), binary=binary) as pods:
        pod = pods[POD]

        def logs() -> str:
            return pod.agent_log_text()[-6000:]

        def stored() -> set[str]:
            return blobs_on_disk(tmp_path / "pods" / "data")

        a, b = images_a_b(tmp_path / "images")
        push_image(a, pod.host, "demo/app:a")
        push_image(b, pod.host, "demo/app:latest")
        push_image(a, pod.host, "demo/app:latest")  # the tag moves: B's manifest stays, untagged
        b_unique = set(b.blobs) - set(a.blobs)
        before = stored()
        assert set(a.blobs) | b_unique <= before, before

        kept = wait_last_run(kube_api, request_gc(kube_api)["id"], context=logs)
        assert (kept["result"], kept["deleteUntagged"]) == ("Succeeded", False), kept
        assert (kept["blobsDeleted"], kept["manifestsDeleted"]) == (0, 0), kept
        assert stored() == before
        wait_for(lambda: writable(pod.url), lambda: f"writable after the first run\n{logs()}", 60, interval=0.1)
        assert manifest_status(pod.url, "demo/app", b.manifest_digest) == 200

        run = wait_last_run(kube_api, request_gc(kube_api, delete_untagged=True)["id"], context=logs)
        assert (run["result"], run["deleteUntagged"]) == ("Succeeded", True), run
        assert (run["blobsDeleted"], run["manifestsDeleted"]) == (3, 1), run
        assert stored() == before - b_unique, (sorted(before - stored()), sorted(b_unique))
        assert run["bytesFreed"] == sum(len(b.blobs[digest]) for digest in b_unique), run
        wait_for(lambda: writable(pod.url), lambda: f"writable after the second run\n{logs()}", 60, interval=0.1)
        assert manifest_status(pod.url, "demo/app", b.manifest_digest) == 404
        for tag in ("a", "latest"):
            assert pull_image(pod.host, f"demo/app:{tag}", tmp_path / f"pulled-{tag}").blobs == a.blobs
