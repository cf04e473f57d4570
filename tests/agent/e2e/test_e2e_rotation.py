"""Credential rotation on S3 (moto, IAM enforced), both COSI Secret formats and
storage.s3's own Secret (the same code path, ten rotations).

Key 1 in a COSI Secret dir laid out as the kubelet's AtomicWriter does; push; create key 2, swap the Secret to
key 2, delete key 1 once the old registry drained (as docs/guide/rotation.md says). The registry restarts in place under
the same supervisor, the earlier image pulls back byte-identical, a new push works, and a pull loop running
through the swap sees no failed request. On Distribution 2.8 and on the real 3.1.1 (skipped without
BERTH_REGISTRY3_BIN).
"""

from __future__ import annotations

import json

import pytest

from support.clouds.s3 import REGION, running_moto
from support.common.polling import wait_for
from support.registries.pod import on_distribution, registry_object
from support.registries.registry import make_oci_image, pull_image, push_image, registry_binaries
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.traffic.pull_loop import PullLoop

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

BUCKET = "registry-data"


def cosi_secret(fmt: str, endpoint: str, key) -> dict[str, str]:
    if fmt == "s3":  # storage.s3.credentials, its own key names
        return {"id": key.access_key_id, "secret": key.secret_access_key}
    if fmt == "v1alpha1":
        info = {"metadata": {"name": "bc-7f3e"}, "spec": {
            "bucketName": BUCKET, "authenticationType": "Key", "protocols": ["S3"], "secretAzure": None,
            "secretS3": {"endpoint": endpoint, "region": REGION, "accessKeyID": key.access_key_id,
                         "accessSecretKey": key.secret_access_key}}}
        return {"BucketInfo": json.dumps(info)}
    return {"COSI_S3_BUCKET_ID": BUCKET, "COSI_S3_ENDPOINT": endpoint, "COSI_S3_REGION": REGION,
            "COSI_S3_ADDRESSING_STYLE": "path", "COSI_S3_ACCESS_KEY_ID": key.access_key_id,
            "COSI_S3_ACCESS_SECRET_KEY": key.secret_access_key}


def s3_spec(port: int, fmt: str = "v1alpha2", endpoint: str = "") -> dict:
    backend = {"s3": {"bucket": BUCKET, "region": REGION, "regionEndpoint": endpoint, "credentials": {
        "secretName": "s3-keys", "accessKeyIdKey": "id", "secretAccessKeyKey": "secret"}}} if fmt == "s3" else {
        "objectStorage": {"bucketClaim": "data", "bucketAccess": "data-access"}}
    return {
        "image": "docker.io/library/registry:2",
        "distribution": "2",
        "config": {"storage": {
            **backend,
            # Presigned redirects fail under IAM enforcement (docs/upstream.md#parts-moto): serve blobs through the
            # registry.
            "redirect": {"disabled": True},
        }},
        "http": {"addr": f"127.0.0.1:{port}", "drainTimeout": "5s"},
    }


def volume(fmt: str) -> str:
    return "s3" if fmt == "s3" else "cosi"


def serve_on_s3(pod, moto, fmt: str, dist, key):
    """The pod serving from moto with `key` in its `fmt` Secret: the supervisor."""
    write_secret_dir(pod.mounts / volume(fmt), cosi_secret(fmt, moto.endpoint, key))
    pod.write_registry_file(registry_object(on_distribution(s3_spec(pod.port, fmt, moto.endpoint), dist[0])))
    pod.start_agent()
    supervisor = pod.start_supervisor()
    pod.wait_serving()
    return supervisor


@pytest.mark.parametrize("dist", registry_binaries())
@pytest.mark.parametrize("fmt", ["v1alpha1", "v1alpha2", "s3"])
def test_rotation_restarts_in_place_with_no_failed_pull(pod, tmp_path, fmt, dist):
    with running_moto(tmp_path / "moto") as moto:
        key1 = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        supervisor = serve_on_s3(pod, moto, fmt, dist, key1)

        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, pod.host, "demo/app:1")
        layer = image.layer_digests[0]
        first_pid = pod.registry_pid()

        loop = PullLoop(f"{pod.url}/v2/demo/app/blobs/{layer}", image.blobs[layer])
        loop.start()
        wait_for(lambda: loop.stats.successes >= 5, what="the pull loop to get going")

        key2 = moto.create_access_key("registry")
        swap_secret_dir(pod.mounts / volume(fmt), cosi_secret(fmt, moto.endpoint, key2))
        wait_for(lambda: pod.actions("restarted"),
                 what=lambda: f"the agent to restart the registry\n{pod.agent_log_text()}")
        # Revoke key 1 as docs/guide/rotation.md says: once the old registry finished the pulls it had (with key 1) and
        # exited. A pull it still streams fails mid-body when its key disappears under it.
        wait_for(lambda: len(pod.supervisor.registries()) == 1, what="the old registry to finish draining")
        moto.delete_access_key("registry", key1.access_key_id)
        # Keep pulling on the new registry with key 1 gone: every blob read now goes through key 2.
        after = loop.stats.successes
        wait_for(lambda: loop.stats.successes >= after + 10, what="pulls after key 1 was deleted")
        stats = loop.stop()

        print(f"pull loop ({fmt}): {stats.requests} requests, {stats.successes} ok, "
              f"retried: {stats.refused_retries} refused, {stats.reset_retries} reset before any response; "
              f"failures {stats.failures}")
        assert stats.failures == []
        assert stats.successes == stats.requests

        # In place: same supervisor process, a new registry child, one restart.
        assert supervisor.alive() and pod.supervisor.pid == supervisor.pid
        assert pod.registry_pid() not in (None, first_pid)
        assert pod.registry_starts() == 2
        assert pod.metric("reloads_total") == 1

        pulled = pull_image(pod.host, "demo/app:1", tmp_path / "pulled")
        assert pulled.blobs == image.blobs
        second = make_oci_image(tmp_path / "image2", layer_size=32 * 1024)
        push_image(second, pod.host, "demo/app:2")
        assert pull_image(pod.host, "demo/app:2", tmp_path / "pulled2").blobs == second.blobs

        log = pod.agent_log_text()
        for key in (key1, key2):
            assert key.secret_access_key not in log and key.access_key_id not in log


@pytest.mark.parametrize("dist", registry_binaries())
def test_ten_rotations_of_a_secret_key_under_pulls(pod, tmp_path, dist):
    """storage.s3 with its key in a Secret: ten rotations while a pull loop runs, the old key deleted after each
    (once its registry drained, as docs/guide/rotation.md says), no failed pull, one registry restart per rotation."""
    rotations = 10
    with running_moto(tmp_path / "moto") as moto:
        key = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        supervisor = serve_on_s3(pod, moto, "s3", dist, key)
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, pod.host, "demo/app:1")
        layer = image.layer_digests[0]
        loop = PullLoop(f"{pod.url}/v2/demo/app/blobs/{layer}", image.blobs[layer])
        loop.start()
        wait_for(lambda: loop.stats.successes >= 5, what="the pull loop to get going")
        keys = [key]
        for turn in range(1, rotations + 1):
            new = moto.create_access_key("registry")
            swap_secret_dir(pod.mounts / "s3", cosi_secret("s3", moto.endpoint, new))
            wait_for(lambda turn=turn: len(pod.actions("restarted")) >= turn, timeout=60,
                     what=lambda turn=turn: f"restart {turn}\n{pod.agent_log_text()[-3000:]}")
            wait_for(lambda: len(pod.supervisor.registries()) == 1, timeout=60, what="the old registry to drain")
            moto.delete_access_key("registry", key.access_key_id)
            key = new
            keys.append(new)
            after = loop.stats.successes
            wait_for(lambda after=after: loop.stats.successes >= after + 3, what="pulls on the new key")
        stats = loop.stop()
        print(f"{rotations} rotations: {stats.requests} pulls, {stats.successes} ok, failures {stats.failures}")
        assert stats.failures == []
        assert stats.successes == stats.requests
        assert supervisor.alive() and pod.registry_starts() == rotations + 1
        assert pull_image(pod.host, "demo/app:1", tmp_path / "pulled").blobs == image.blobs
        log = pod.agent_log_text()
        assert all(k.secret_access_key not in log for k in keys)
