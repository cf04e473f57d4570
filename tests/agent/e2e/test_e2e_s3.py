"""storage.s3 on real parts: moto with IAM enforced, Distribution 2.8.2 and 3.1.1.

Every S3 option reaches the registry (it starts with all of them, serves a push and a pull, and SSE-KMS leaves
the blobs under the KMS key, as moto reports); a key the bucket refuses is stopped by the pre-flight with the
same registry process; a private CA given in storage.s3.ca is trusted by the registry and the pre-flight (and
the pre-flight without it names the field); web identity against moto's STS on 3.1.1. Rotation: test_e2e_rotation.
"""

from __future__ import annotations

import pytest

from berth_agent.apply.preflight import check_bucket
from berth_agent.core.errors import PreflightError
from berth_agent.render.targets import S3Target
from support.clouds.s3 import REGION, running_moto
from support.common.polling import wait_for
from support.registries.pod import on_distribution, registry_object
from support.registries.registry import (
    REGISTRY3_BINARY,
    make_oci_image,
    pull_image,
    push_image,
    registry_binaries,
    requires_registry3,
)
from support.registries.secretdir import swap_secret_dir, write_secret_dir

pytestmark = pytest.mark.e2e

BUCKET = "registry-data"
MIB = 1024 * 1024


def keys(key) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": key.access_key_id, "AWS_SECRET_ACCESS_KEY": key.secret_access_key}


def spec(port: int, major: str, s3: dict) -> dict:
    return on_distribution({
        "image": "docker.io/library/registry:2", "distribution": "2",
        "config": {"storage": {"s3": s3, "redirect": {"disabled": True}}},  # presigned URLs fail under IAM
        "http": {"addr": f"127.0.0.1:{port}", "drainTimeout": "5s"},
    }, major)


def every_option(endpoint: str, kms_key: str, major: str) -> dict:
    options = {
        "bucket": BUCKET, "region": REGION, "regionEndpoint": endpoint, "forcePathStyle": True,
        "credentials": {"secretName": "s3-keys"},
        "encrypt": True, "keyId": kms_key, "secure": False, "skipVerify": False, "v4auth": True,
        "chunkSize": 5 * MIB, "multipartCopyChunkSize": 5 * MIB, "multipartCopyMaxConcurrency": 4,
        "multipartCopyThresholdSize": 5 * MIB, "rootDirectory": "/berth", "storageClass": "STANDARD",
        "objectAcl": "private",
    }
    if major == "3":
        options |= {"useDualStack": False, "accelerate": False, "logLevel": "debugwithrequesterrors"}
    return options


@pytest.mark.parametrize("dist", registry_binaries())
def test_every_option_reaches_the_registry_and_a_wrong_key_is_refused_with_the_same_pid(pod, tmp_path, dist):
    major = dist[0]
    with running_moto(tmp_path / "moto") as moto:
        key = moto.create_s3_user("registry", bucket=BUCKET)
        kms_key = moto.create_kms_key()
        moto.enforce_iam()
        write_secret_dir(pod.mounts / "s3", keys(key))
        pod.write_registry_file(registry_object(spec(pod.port, major, every_option(moto.endpoint, kms_key, major))))
        pod.start_agent()
        pod.start_supervisor()
        pod.wait_serving()
        config = (pod.config_dir / "config.yml").read_text()
        for parameter in ("keyid", "multipartcopymaxconcurrency: 4", "rootdirectory: /berth", "storageclass",
                          "objectacl", *(("usedualstack", "accelerate", "loglevel") if major == "3" else ())):
            assert parameter in config

        # 12 MiB: above chunksize and the multipart copy threshold, so the upload and the commit copy go in parts.
        image = make_oci_image(tmp_path / "image", layer_size=12 * MIB)
        push_image(image, pod.host, "demo/app:1")
        assert pull_image(pod.host, "demo/app:1", tmp_path / "pulled").blobs == image.blobs
        s3 = moto.client("s3")
        blobs = [k for k in moto.list_objects(BUCKET) if k.startswith("berth/docker/registry/v2/blobs/")]
        assert len(blobs) >= 3  # the layer, the config and the manifest
        for blob in blobs:
            head = s3.head_object(Bucket=BUCKET, Key=blob)
            assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", kms_key), blob

        pid = pod.registry_pid()
        dead = moto.create_access_key("registry")
        moto.delete_access_key("registry", dead.access_key_id)
        swap_secret_dir(pod.mounts / "s3", keys(dead))
        wait_for(lambda: "refused the new credentials" in pod.agent_log_text(), timeout=60,
                 what=lambda: f"the pre-flight refusal\n{pod.agent_log_text()[-3000:]}")
        assert "from spec.config.storage.s3.credentials" in pod.agent_log_text()
        assert pod.registry_pid() == pid and pod.registry_starts() == 1
        assert pull_image(pod.host, "demo/app:1", tmp_path / "pulled2").blobs == image.blobs
        assert dead.secret_access_key not in pod.agent_log_text()


@pytest.mark.parametrize("dist", registry_binaries())
def test_a_private_ca_is_trusted_by_the_registry_and_the_preflight(pod, tmp_path, dist):
    major = dist[0]
    with running_moto(tmp_path / "moto", tls=True) as moto:
        key = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        ca = moto.ca_file.read_bytes()
        target = S3Target(BUCKET, REGION, key.access_key_id, key.secret_access_key, moto.endpoint)
        with pytest.raises(PreflightError, match=r"not trusted .*spec\.config\.storage\.s3\.ca"):
            check_bucket(target)
        check_bucket(S3Target(BUCKET, REGION, key.access_key_id, key.secret_access_key, moto.endpoint, ca=ca))

        write_secret_dir(pod.mounts / "s3", keys(key))
        write_secret_dir(pod.mounts / "s3-ca", {"ca.crt": ca.decode()})
        pod.write_registry_file(registry_object(spec(pod.port, major, {
            "bucket": BUCKET, "region": REGION, "regionEndpoint": moto.endpoint,
            "credentials": {"secretName": "s3-keys"}, "ca": {"configMap": {"name": "s3-ca", "field": "ca.crt"}}})))
        pod.start_agent()
        # What the operator gives the registry container (builders/pod.py s3_ca_env), with this pod's config dir.
        pod.start_supervisor(env={"SSL_CERT_DIR": f"{pod.config_dir}/s3-ca:/etc/ssl/certs"})
        pod.wait_serving()
        assert (pod.config_dir / "s3-ca" / "ca.crt").read_bytes() == ca
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, pod.host, "demo/app:1")
        assert pull_image(pod.host, "demo/app:1", tmp_path / "pulled").blobs == image.blobs


@pytest.mark.parametrize("dist", [("3", REGISTRY3_BINARY)], ids=["dist3"])
@requires_registry3
def test_web_identity_through_motos_sts_on_distribution_3(pod, tmp_path, dist):
    """No key: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE (what the EKS webhook sets). 3.1.1 sends
    AssumeRoleWithWebIdentity to regionendpoint, moto's STS; the assumed role's keys then sign every S3 request,
    enforced. moto cannot check the unsigned STS call under enforcement, so that one request is let through."""
    import json

    with running_moto(tmp_path / "moto") as moto:
        moto.create_bucket(BUCKET)
        iam = moto.client("iam")
        trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRoleWithWebIdentity",
                                                         "Principal": {"Federated": "arn:aws:iam::123456789012:oidc"}}]}
        role = iam.create_role(RoleName="registry", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        iam.put_role_policy(RoleName="registry", PolicyName="s3", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": [
                f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]}]}))
        token = tmp_path / "token"
        token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdDpyZWcifQ.c2ln")
        pod.write_registry_file(registry_object(spec(pod.port, "3", {
            "bucket": BUCKET, "region": REGION, "regionEndpoint": moto.endpoint})))
        pod.start_agent()
        pod.start_supervisor(env={"AWS_ROLE_ARN": role, "AWS_WEB_IDENTITY_TOKEN_FILE": str(token)})
        pod.wait_serving()
        assert "accesskey" not in (pod.config_dir / "config.yml").read_text()
        moto.enforce_iam(unchecked=1)  # the registry's first request is the STS call
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, pod.host, "demo/app:1")
        assert pull_image(pod.host, "demo/app:1", tmp_path / "pulled").blobs == image.blobs
        assert any(k.endswith("/data") for k in moto.list_objects(BUCKET))
