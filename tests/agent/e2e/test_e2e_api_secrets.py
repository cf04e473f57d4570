"""Rotated credentials applied from the API, not at the kubelet's pace.

`berth-agent run --registry default/reg --api-secret cosi=registry-creds` as a subprocess against the kmock API
server (support.clusters.kube), with the real berth-supervise and docker-registry on S3 (moto, IAM enforced), and
the COSI Secret both in the API and mounted as a kubelet AtomicWriter volume (support.registries.secretdir). The
Secret is updated through the API only; the mount follows (or not) later, as the kubelet's 60-90 s sync would
(docs/upstream.md#k8s-secret-refresh).
"""

from __future__ import annotations

import base64
import json
import shutil
import time

import pytest

from support.clouds.s3 import REGION, running_moto
from support.common.polling import wait_for
from support.registries.pod import registry_object
from support.registries.registry import make_oci_image, push_image
from support.registries.secretdir import current_data, swap_secret_dir, write_secret_dir
from support.traffic.pull_loop import PullLoop

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

BUCKET = "registry-data"
CREDS = "registry-creds"
SECRETS = "v1/secrets"
SETTLE_SECONDS = 3.0  # longer than the debounce's maximum wait (2 s): time for any extra restart to show


def bucket_info(endpoint: str, key) -> str:
    return json.dumps({"metadata": {"name": "bc-7f3e"}, "spec": {
        "bucketName": BUCKET, "authenticationType": "Key", "protocols": ["S3"], "secretAzure": None,
        "secretS3": {"endpoint": endpoint, "region": REGION, "accessKeyID": key.access_key_id,
                     "accessSecretKey": key.secret_access_key}}})


def api_data(info: str) -> dict[str, str]:
    return {"BucketInfo": base64.b64encode(info.encode()).decode()}


def s3_spec(port: int) -> dict:
    return {
        "image": "docker.io/library/registry:2", "distribution": "2",
        "config": {"storage": {
            "objectStorage": {"bucketClaim": "data", "bucketAccess": "data-access"},
            # Presigned redirects fail under IAM enforcement (docs/upstream.md#parts-moto).
            "redirect": {"disabled": True},
        }},
        "http": {"addr": f"127.0.0.1:{port}", "drainTimeout": "5s"},
    }


def start(pod, kube_api, moto, key, *, in_api: bool = True) -> None:
    info = bucket_info(moto.endpoint, key)
    write_secret_dir(pod.mounts / "cosi", {"BucketInfo": info})
    if in_api:
        kube_api.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": api_data(info),
                         "metadata": {"name": CREDS, "namespace": "default"}})
    kube_api.create(registry_object(s3_spec(pod.port)))
    start_agent(pod, kube_api)
    pod.start_supervisor()
    pod.wait_serving()


def start_agent(pod, kube_api):
    return pod.start_agent(registry="default/reg", kube_host=kube_api.url, extra=["--api-secret", f"cosi={CREDS}"])


def config_key_id(pod) -> str:
    return json.dumps((pod.config_dir / "config.yml").read_text())


def only_one_registry(pod) -> bool:
    return len(pod.supervisor.registries()) == 1


def test_api_update_applies_at_once_and_the_mount_never_regresses(pod, kube_api, tmp_path):
    with running_moto(tmp_path / "moto") as moto:
        key1 = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        start(pod, kube_api, moto, key1)
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, pod.host, "demo/app:1")
        layer = image.layer_digests[0]
        loop = PullLoop(f"{pod.url}/v2/demo/app/blobs/{layer}", image.blobs[layer])
        loop.start()
        try:
            wait_for(lambda: loop.stats.successes >= 5, what="the pull loop to get going")

            # Rotate through the API only; the provisioner revokes the old key right away.
            key2 = moto.create_access_key("registry")
            kube_api.patch(SECRETS, "default", CREDS, {"data": api_data(bucket_info(moto.endpoint, key2))})
            moto.delete_access_key("registry", key1.access_key_id)
            wait_for(lambda: pod.actions("restarted"), what=lambda: f"a restart on the new key\n{pod.agent_log_text()}")
            wait_for(lambda: only_one_registry(pod), what="the old registry to finish draining")
            applied_at = len(loop.stats.failures)  # failures before this point: the revoked key, not yet replaced
            assert key2.access_key_id in config_key_id(pod)
            assert key1.access_key_id in current_data(pod.mounts / "cosi")["BucketInfo"].decode()  # mount untouched
            after = loop.stats.successes
            wait_for(lambda: loop.stats.successes >= after + 10, what="pulls with key 1 deleted")
            assert pod.metric("secret_changes_applied_total", 'path="api"') == 1
            assert pod.registry_starts() == 2 and pod.metric("reloads_total") == 1

            # The kubelet catches up with the same content: no second restart, and the lag is measured.
            swap_secret_dir(pod.mounts / "cosi", {"BucketInfo": bucket_info(moto.endpoint, key2)})
            wait_for(lambda: pod.metric("secret_mount_lag_seconds_count") == 1, what="the mount lag to be recorded")
            time.sleep(SETTLE_SECONDS)
            assert pod.registry_starts() == 2 and pod.metric("reloads_total") == 1

            # A mount that later shows an older payload (key 1) changes nothing either.
            renders = pod.metric("renders_total")
            swap_secret_dir(pod.mounts / "cosi", {"BucketInfo": bucket_info(moto.endpoint, key1)})
            wait_for(lambda: pod.metric("renders_total") > renders, what="the agent to look at the older mount")
            time.sleep(SETTLE_SECONDS)
            assert key2.access_key_id in config_key_id(pod)
            assert pod.registry_starts() == 2 and pod.metric("reloads_total") == 1
            after = loop.stats.successes
            wait_for(lambda: loop.stats.successes >= after + 5, what="pulls after the older mount")
        finally:
            stats = loop.stop()

        print(f"pull loop: {stats.requests} requests, {stats.successes} ok, {len(stats.failures)} failed before "
              f"the new key was applied, {len(stats.failures) - applied_at} after")
        assert stats.failures[applied_at:] == []
        assert pod.metric("secret_changes_applied_total", 'path="mount"') == 0
        events = json.dumps(kube_api.list("v1/events", "default"))
        assert "ConfigApplied" in events  # the Events were written, and carry no key
        text = pod.agent_log_text() + pod.metrics_text() + events
        for key in (key1, key2):
            assert key.secret_access_key not in text and key.access_key_id not in text
        record = kube_api.get("berth.dev/v1alpha1/registries", "default", "reg")["status"]["agents"]["pod-0"]
        assert not record.get("error") and key2.secret_access_key not in json.dumps(record)


@pytest.mark.parametrize("kept_copy", [False, True], ids=["api-list", "kept-copy"])
def test_agent_restarted_with_a_stale_mount_uses_the_api_copy_at_once(pod, kube_api, tmp_path, kept_copy):
    with running_moto(tmp_path / "moto") as moto:
        key1 = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        start(pod, kube_api, moto, key1)
        key2 = moto.create_access_key("registry")
        kube_api.patch(SECRETS, "default", CREDS, {"data": api_data(bucket_info(moto.endpoint, key2))})
        wait_for(lambda: pod.actions("restarted"), what=lambda: f"a restart on the new key\n{pod.agent_log_text()}")
        registry_pid = pod.registry_pid()

        pod.agent.kill()  # kill -9: no goodbye; the mount still shows key 1 (the kubelet has not synced)
        pod.agent.wait(10)
        if not kept_copy:
            shutil.rmtree(pod.config_dir / ".api-secrets")  # the API list alone must be enough
        else:
            # The API copy kept in the config volume (which outlives the agent container) holds even while the
            # API refuses the Secret (a Role not updated yet, a flaky API server).
            kube_api.fail_next(50, status=503, plural="secrets")
        start_agent(pod, kube_api)
        wait_for(lambda: pod.actions("config on disk is current"),
                 what=lambda: f"the restarted agent to adopt the running config\n{pod.agent_log_text()}")
        time.sleep(SETTLE_SECONDS)
        assert key2.access_key_id in config_key_id(pod)
        assert pod.registry_pid() == registry_pid and pod.registry_starts() == 2  # not restarted back onto key 1
        assert pod.metric("reloads_total") == 0


def test_secret_not_readable_over_the_api_leaves_the_mount_in_charge(pod, kube_api, tmp_path):
    with running_moto(tmp_path / "moto") as moto:
        key1 = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        start(pod, kube_api, moto, key1, in_api=False)  # the API has no such Secret: the watch reports not found
        key2 = moto.create_access_key("registry")
        swap_secret_dir(pod.mounts / "cosi", {"BucketInfo": bucket_info(moto.endpoint, key2)})
        wait_for(lambda: pod.actions("restarted"), what=lambda: f"a restart on the mounted key\n{pod.agent_log_text()}")
        assert key2.access_key_id in config_key_id(pod)
        wait_for(lambda: pod.metric("secret_changes_applied_total", 'path="mount"') == 1, what="the mount path counted")
        assert pod.metric("secret_changes_applied_total", 'path="api"') == 0
