"""Pre-flight check of S3 credentials: the standard-library SigV4 signer against moto with IAM enforced."""

from __future__ import annotations

import datetime

import pytest

from berth_agent.apply import preflight_http
from berth_agent.apply.preflight import PreflightError, check_bucket, check_config, sign_v4
from berth_agent.render import Rendered
from berth_agent.render.targets import S3Target
from support.clouds.s3 import REGION, running_moto


def test_signature_matches_the_aws_documentation_example():
    # "Example: GET Bucket (List Objects)" of the AWS Signature Version 4 documentation for S3.
    headers = sign_v4(
        "GET", "examplebucket.s3.amazonaws.com", "/", {"max-keys": "2", "prefix": "J"}, "us-east-1",
        "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        now=datetime.datetime(2013, 5, 24, tzinfo=datetime.UTC),
    )
    assert headers["Authorization"].endswith(
        "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
    )
    assert headers["X-Amz-Date"] == "20130524T000000Z"


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    with running_moto(tmp_path_factory.mktemp("moto")) as server:
        server.user = server.create_s3_user("registry", bucket="registry-data")
        server.create_s3_user("other", bucket="other-data")
        server.enforce_iam()
        yield server


def _config(moto, key, bucket="registry-data") -> bytes:
    return (
        "version: 0.1\nstorage:\n  s3:\n"
        f"    accesskey: {key.access_key_id}\n    secretkey: {key.secret_access_key}\n"
        f"    region: {REGION}\n    regionendpoint: {moto.endpoint}\n    bucket: {bucket}\n"
        "    secure: false\n    v4auth: true\n"
    ).encode()


def _answers(monkeypatch) -> list:
    """The object store's answers to what check_config asks, as it asks."""
    answers, request = [], preflight_http.request

    def recorded(*args, **kwargs):
        answers.append(request(*args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(preflight_http, "request", recorded)
    return answers


def test_a_live_key_passes(moto, monkeypatch):
    answers = _answers(monkeypatch)
    check_config(Rendered(_config(moto, moto.user)))
    assert [answer.status for answer in answers] == [200]  # one signed ListObjectsV2, and the bucket said yes


def test_a_deleted_key_is_refused_and_the_error_holds_no_secret(moto):
    key = moto.create_access_key("registry")
    check_config(Rendered(_config(moto, key)))
    moto.delete_access_key("registry", key.access_key_id)
    with pytest.raises(PreflightError) as caught:
        check_config(Rendered(_config(moto, key)))
    message = str(caught.value)
    assert message.startswith("storage.s3: ") and "HTTP 403" in message and "InvalidAccessKeyId" in message
    assert key.access_key_id not in message and key.secret_access_key not in message


def test_a_wrong_secret_is_refused(moto):
    target = S3Target("registry-data", REGION, moto.user.access_key_id, "not-the-secret", moto.endpoint, False)
    with pytest.raises(PreflightError, match="HTTP 403"):
        check_bucket(target)


def test_a_key_for_another_bucket_is_refused(moto):
    with pytest.raises(PreflightError, match="'other-data' refused the new credentials"):
        check_config(Rendered(_config(moto, moto.user, bucket="other-data")))


def test_an_unreachable_endpoint_is_reported(moto):
    target = S3Target("registry-data", REGION, "id", "secret", "http://127.0.0.1:9", False)
    with pytest.raises(PreflightError, match="cannot reach the object store at http://127.0.0.1:9"):
        check_bucket(target, timeout=2)


def test_filesystem_storage_needs_no_check(monkeypatch):
    answers = _answers(monkeypatch)
    check_config(Rendered(b"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: /var/lib/registry\n"))
    assert answers == []  # nothing asked of anyone
