"""storage.s3 with temporary credentials ("an optional session token"), on moto with IAM enforced,
Distribution 2.8.2 and 3.1.1.

The s3 driver has no session token parameter in either version, so the agent writes the key, its secret and the
token to an AWS shared credentials file beside config.yml (none of them in config.yml), and berth-supervise names
it in each registry's AWS_SHARED_CREDENTIALS_FILE, leaving out the AWS keys of its own environment that the SDK
would ask first. STS AssumeRole gives each key; the role's policy is what moto enforces. A new token is applied
hot under a pull loop (no failed pull), and a key the bucket refuses is stopped by the pre-flight with the same
registry process.
"""

from __future__ import annotations

import pytest

from berth_agent.apply.preflight import check_bucket
from berth_agent.core.errors import PreflightError
from berth_agent.render.targets import S3Target
from support.clouds.s3 import REGION, AccessKey, running_moto
from support.common.polling import wait_for
from support.registries.pod import on_distribution, registry_object
from support.registries.registry import make_oci_image, pull_image, push_image, registry_binaries
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.traffic.pull_loop import PullLoop

pytestmark = pytest.mark.e2e

BUCKET = "registry-data"


def temporary(key: AccessKey) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": key.access_key_id, "AWS_SECRET_ACCESS_KEY": key.secret_access_key,
            "AWS_SESSION_TOKEN": key.session_token}


def spec(port: int, major: str, endpoint: str) -> dict:
    return on_distribution({
        "image": "docker.io/library/registry:2", "distribution": "2",
        "config": {"storage": {"s3": {
            "bucket": BUCKET, "region": REGION, "regionEndpoint": endpoint,
            "credentials": {"secretName": "s3-keys", "sessionTokenKey": "AWS_SESSION_TOKEN"}},
            "redirect": {"disabled": True}}},  # presigned URLs fail under IAM
        "http": {"addr": f"127.0.0.1:{port}", "drainTimeout": "5s"},
    }, major)


def test_the_preflight_signs_the_session_token(tmp_path):
    with running_moto(tmp_path / "moto") as moto:
        role = moto.create_s3_role("registry", bucket=BUCKET)
        moto.enforce_iam()
        key = moto.assume_role(role)
        check_bucket(S3Target(BUCKET, REGION, key.access_key_id, key.secret_access_key, moto.endpoint,
                              session_token=key.session_token))
        with pytest.raises(PreflightError, match="refused the new credentials"):  # the key alone is not enough
            check_bucket(S3Target(BUCKET, REGION, key.access_key_id, key.secret_access_key, moto.endpoint))


@pytest.mark.parametrize("dist", registry_binaries())
def test_temporary_credentials_serve_and_each_new_token_is_applied_hot(pod, tmp_path, dist):
    major = dist[0]
    rotations = 3
    with running_moto(tmp_path / "moto") as moto:
        role = moto.create_s3_role("registry", bucket=BUCKET)
        moto.enforce_iam()
        key = moto.assume_role(role)
        write_secret_dir(pod.mounts / "s3", temporary(key))
        pod.write_registry_file(registry_object(spec(pod.port, major, moto.endpoint)))
        pod.start_agent()
        # Keys in the container's own environment (a user's spec.env, a node's defaults) do not beat the Secret's.
        pod.start_supervisor(env={"AWS_ACCESS_KEY_ID": "AKIANOTTHEONE", "AWS_SECRET_ACCESS_KEY": "wrong"})
        pod.wait_serving()
        assert "accesskey" not in (pod.config_dir / "config.yml").read_text()
        assert key.session_token in (pod.config_dir / "s3" / "credentials").read_text()
        environment = open(f"/proc/{pod.registry_pid()}/environ", "rb").read().split(b"\0")
        assert f"AWS_SHARED_CREDENTIALS_FILE={pod.config_dir}/s3/credentials".encode() in environment
        assert not any(v.startswith(b"AWS_ACCESS_KEY_ID=") for v in environment)

        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, pod.host, "demo/app:1")
        assert pull_image(pod.host, "demo/app:1", tmp_path / "pulled").blobs == image.blobs
        layer = image.layer_digests[0]
        loop = PullLoop(f"{pod.url}/v2/demo/app/blobs/{layer}", image.blobs[layer])
        loop.start()
        wait_for(lambda: loop.stats.successes >= 5, what="the pull loop to get going")
        keys = [key]
        for turn in range(1, rotations + 1):
            keys.append(moto.assume_role(role, session=f"registry-{turn}"))
            swap_secret_dir(pod.mounts / "s3", temporary(keys[-1]))
            wait_for(lambda turn=turn: len(pod.actions("restarted")) >= turn, timeout=60,
                     what=lambda turn=turn: f"restart {turn}\n{pod.agent_log_text()[-3000:]}")
            after = loop.stats.successes
            wait_for(lambda after=after: loop.stats.successes >= after + 3, what="pulls on the new token")
        stats = loop.stop()
        assert stats.failures == [] and stats.successes == stats.requests, stats.failures
        push_image(image, pod.host, "demo/app:2")  # writes too, with the newest token

        pid = pod.registry_pid()
        unknown = AccessKey("nobody", "ASIA" + "Z" * 16, "x" * 40, keys[-1].session_token)
        swap_secret_dir(pod.mounts / "s3", temporary(unknown))
        wait_for(lambda: "refused the new credentials" in pod.agent_log_text(), timeout=60,
                 what=lambda: f"the pre-flight refusal\n{pod.agent_log_text()[-3000:]}")
        assert "from spec.config.storage.s3.credentials" in pod.agent_log_text()
        assert pod.registry_pid() == pid
        assert pull_image(pod.host, "demo/app:2", tmp_path / "pulled2").blobs == image.blobs
        log = pod.agent_log_text() + pod.supervisor.log()
        assert all(k.session_token not in log and k.secret_access_key not in log for k in keys)
