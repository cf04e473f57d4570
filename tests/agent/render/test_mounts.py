"""Reading the mounted Secrets: both COSI formats, key selection from the spec, and clear errors for bad input.

Every error must name the source directory and key (and the JSON path inside BucketInfo), and must not carry
any secret value, in str(), repr() or anything logged.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from berth_agent.core.errors import InputError
from berth_agent.mounted.cosi import read_cosi
from berth_agent.mounted.mounts import MountedInputs, parse_redis_url, read_inputs
from berth_api import Registry
from support.registries.mountkit import S3Target, cosi_secret, htpasswd_entry, load_example
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.services.certs import self_signed_pair

ACCESS_KEY_ID = "AKIAMOUNTTESTKEY0001"
SECRET_KEY = "mount-test-secret-key/with+chars"
TARGET = S3Target("http://127.0.0.1:9000", "bucket-1", ACCESS_KEY_ID, SECRET_KEY, region="eu-west-1")
SECRETS = (ACCESS_KEY_ID, SECRET_KEY)
REDIS_PW = "redis-pw-0123456789"


def spec_with(**spec):
    base = {"config": {"storage": {"inmemory": {}}}}
    base.update(spec)
    return Registry.model_validate({"spec": base}).spec


COSI_SPEC = load_example("cosi-existing.yaml").spec


@pytest.mark.parametrize("form", ["v1alpha1", "v1alpha2-cosi", "v1alpha2-kep"])
def test_every_cosi_format_gives_the_same_credentials(form, tmp_path):
    write_secret_dir(tmp_path / "cosi", cosi_secret(TARGET, form))
    creds = read_inputs(COSI_SPEC, tmp_path).s3
    assert (creds.bucket, creds.endpoint, creds.region) == ("bucket-1", "http://127.0.0.1:9000", "eu-west-1")
    assert (creds.access_key_id, creds.secret_access_key) == SECRETS
    assert creds.addressing_style is None


@pytest.mark.parametrize("auth_type", ["Key", "KEY"])
def test_bucket_info_accepts_both_spellings_of_key(auth_type, tmp_path):
    info = json.loads(cosi_secret(TARGET)["BucketInfo"])
    info["spec"]["authenticationType"] = auth_type
    write_secret_dir(tmp_path / "cosi", {"BucketInfo": json.dumps(info)})
    assert read_cosi(tmp_path / "cosi").bucket == "bucket-1"


def test_cosi_defaults_region_and_takes_a_bare_endpoint_as_https(tmp_path):
    info = json.loads(cosi_secret(TARGET)["BucketInfo"])
    info["spec"]["secretS3"].update(endpoint="objects.example.internal:9000", region="")
    write_secret_dir(tmp_path / "cosi", {"BucketInfo": json.dumps(info)})
    creds = read_cosi(tmp_path / "cosi")
    assert creds.endpoint == "https://objects.example.internal:9000"
    assert creds.region == "us-east-1"


def test_cosi_v1alpha2_addressing_style_is_read(tmp_path):
    write_secret_dir(tmp_path / "cosi", cosi_secret(TARGET, "v1alpha2-cosi", addressing_style="virtual"))
    assert read_cosi(tmp_path / "cosi").addressing_style == "virtual"


def test_reads_follow_an_atomic_swap(tmp_path):
    volume = write_secret_dir(tmp_path / "cosi", cosi_secret(TARGET))
    rotated = S3Target(TARGET.endpoint, TARGET.bucket, "AKIAROTATED000000001", "rotated-secret")
    swap_secret_dir(volume, cosi_secret(rotated))
    assert read_cosi(volume).access_key_id == "AKIAROTATED000000001"


def test_keys_come_from_the_spec_fields(tmp_path):
    cert, key = self_signed_pair()
    spec = spec_with(
        config={"storage": {"inmemory": {},
                            "auth": {"htpasswd": {"secret": {"name": "u", "field": "users.htpasswd"}}}}},
        http={"secret": {"name": "h", "field": "shared"}, "tls": {"secretName": "t"}},
        redis={"secret": {"name": "r", "field": "url"}},
    )
    entry = htpasswd_entry("alice", "pw")
    write_secret_dir(tmp_path / "htpasswd", {"users.htpasswd": entry, "other": b"x"})
    write_secret_dir(tmp_path / "http-secret", {"shared": "the-http-secret\n", "secret": "not-this-one"})
    write_secret_dir(tmp_path / "redis", {"url": "rediss://user:pw@cache:6380/2\n"})
    write_secret_dir(tmp_path / "tls", {"tls.crt": cert, "tls.key": key})
    inputs = read_inputs(spec, tmp_path)
    assert inputs.htpasswd == entry
    assert inputs.http_secret == "the-http-secret"  # trailing newline of --from-file dropped
    redis = inputs.redis  # parsed where it was read: render takes the address, not the URL
    assert (redis.host, redis.port, redis.username, redis.password, redis.db, redis.tls, redis.source) == (
        "cache", 6380, "user", "pw", 2, True, "redis/url")
    assert (inputs.tls_cert, inputs.tls_key) == (cert, key)
    for text in (repr(inputs), str(inputs)):
        for value in ("the-http-secret", "pw@", "PRIVATE", entry.decode()):
            assert value not in text


def test_generated_http_secret_is_used_when_the_spec_names_none(tmp_path):
    write_secret_dir(tmp_path / "http-secret", {"secret": "generated"})
    assert read_inputs(spec_with(), tmp_path).http_secret == "generated"
    assert read_inputs(spec_with(), tmp_path / "elsewhere") == MountedInputs()


def test_sources_the_spec_does_not_use_are_not_read(tmp_path):
    write_secret_dir(tmp_path / "cosi", {"BucketInfo": "not json"})
    write_secret_dir(tmp_path / "redis", {"url": "nonsense"})
    assert read_inputs(spec_with(), tmp_path) == MountedInputs()


def test_redis_url_forms():
    plain = parse_redis_url("redis://cache:6379", "redis/url")
    assert (plain.addr, plain.password, plain.db, plain.tls) == ("cache:6379", None, None, False)
    full = parse_redis_url("rediss://svc:p%40ss@10.0.0.5:7000/3", "redis/url")
    assert (full.addr, full.username, full.password, full.db, full.tls) == ("10.0.0.5:7000", "svc", "p@ss", 3, True)
    assert parse_redis_url("redis://:only-pw@h", "redis/url").port == 6379
    assert "only-pw" not in repr(parse_redis_url("redis://:only-pw@h", "redis/url"))


def valid_bucket_info() -> dict:
    return json.loads(cosi_secret(TARGET)["BucketInfo"])


def bucket_info_with(mutate) -> dict[str, str]:
    info = valid_bucket_info()
    mutate(info)
    return {"BucketInfo": json.dumps(info)}


def _drop(path: str):
    def mutate(info: dict) -> None:
        *parents, last = path.split(".")
        node = info
        for part in parents:
            node = node[part]
        del node[last]
    return mutate


def _set(path: str, value):
    def mutate(info: dict) -> None:
        *parents, last = path.split(".")
        node = info
        for part in parents:
            node = node[part]
        node[last] = value
    return mutate


INMEMORY = {"config": {"storage": {"inmemory": {}}}}
HTPASSWD_SPEC = {"config": {"storage": {"inmemory": {},
                                        "auth": {"htpasswd": {"secret": {"name": "u", "field": "htpasswd"}}}}}}
REDIS_SPEC = {**INMEMORY, "redis": {"secret": {"name": "r", "field": "url"}}}
TLS_SPEC = {**INMEMORY, "http": {"tls": {"secretName": "t"}}}
HTTP_SECRET_SPEC = {**INMEMORY, "http": {"secret": {"name": "h", "field": "token"}}}
COSI = {"config": {"storage": {"objectStorage": {"bucketClaim": "c", "bucketAccess": "a"}}}}
PEM_CERT, PEM_KEY = self_signed_pair()

# (id, spec, {source: secret data} or {source: None} for an unmounted dir, expected source, expected message part)
MALFORMED = [
    ("bucketinfo-not-json", COSI, {"cosi": {"BucketInfo": f'{{"spec": {{"accessSecretKey": "{SECRET_KEY}"'}},
     "cosi/BucketInfo", "is not JSON"),
    ("bucketinfo-json-array", COSI, {"cosi": {"BucketInfo": json.dumps([SECRET_KEY])}}, "cosi/BucketInfo",
     "not a JSON object"),
    ("bucketinfo-empty", COSI, {"cosi": {"BucketInfo": "\n"}}, "cosi/BucketInfo", "is empty"),
    ("bucketinfo-no-spec", COSI, {"cosi": bucket_info_with(_drop("spec"))}, "cosi/BucketInfo: spec", "is missing"),
    ("bucketinfo-no-bucket", COSI, {"cosi": bucket_info_with(_drop("spec.bucketName"))},
     "cosi/BucketInfo: spec.bucketName", "is missing"),
    ("bucketinfo-no-access-key", COSI, {"cosi": bucket_info_with(_drop("spec.secretS3.accessKeyID"))},
     "cosi/BucketInfo: spec.secretS3.accessKeyID", "is missing"),
    ("bucketinfo-empty-secret-key", COSI, {"cosi": bucket_info_with(_set("spec.secretS3.accessSecretKey", ""))},
     "cosi/BucketInfo: spec.secretS3.accessSecretKey", "is empty"),
    ("bucketinfo-secret-key-not-string", COSI, {"cosi": bucket_info_with(_set("spec.secretS3.accessSecretKey", 42))},
     "cosi/BucketInfo: spec.secretS3.accessSecretKey", "is not a string"),
    ("bucketinfo-null-secrets3", COSI, {"cosi": bucket_info_with(_set("spec.secretS3", None))},
     "cosi/BucketInfo: spec.secretS3", "is empty"),
    ("bucketinfo-iam", COSI, {"cosi": bucket_info_with(_set("spec.authenticationType", "IAM"))},
     "cosi/BucketInfo: spec.authenticationType", "IAM"),
    ("bucketinfo-unknown-auth", COSI, {"cosi": bucket_info_with(_set("spec.authenticationType", "Token"))},
     "cosi/BucketInfo: spec.authenticationType", "expected Key"),
    ("bucketinfo-bad-endpoint", COSI, {"cosi": bucket_info_with(_set("spec.secretS3.endpoint", "ftp://x"))},
     "cosi/BucketInfo: spec.secretS3.endpoint", "not a valid http(s) URL"),
    ("cosi-not-mounted", COSI, {"cosi": None}, "cosi/", "not mounted"),
    ("cosi-no-known-keys", COSI, {"cosi": {"password": SECRET_KEY}}, "cosi/", "keys present: password"),
    ("cosi-v2-missing-secret", COSI, {"cosi": {k: v for k, v in cosi_secret(TARGET, "v1alpha2-cosi").items()
                                               if k != "COSI_S3_ACCESS_SECRET_KEY"}},
     "cosi/COSI_S3_ACCESS_SECRET_KEY", "is missing"),
    ("cosi-v2-empty-key-id", COSI, {"cosi": {**cosi_secret(TARGET, "v1alpha2-cosi"), "COSI_S3_ACCESS_KEY_ID": ""}},
     "cosi/COSI_S3_ACCESS_KEY_ID", "is empty"),
    ("cosi-v2-bad-style", COSI, {"cosi": cosi_secret(TARGET, "v1alpha2-cosi", addressing_style="sideways")},
     "cosi/COSI_S3_ADDRESSING_STYLE", "path or virtual"),
    ("kep-missing-bucket", COSI, {"cosi": {k: v for k, v in cosi_secret(TARGET, "v1alpha2-kep").items()
                                           if k != "BUCKET_NAME"}}, "cosi/BUCKET_NAME", "is missing"),
    ("htpasswd-not-mounted", HTPASSWD_SPEC, {"htpasswd": None}, "htpasswd/htpasswd", "not mounted"),
    ("htpasswd-wrong-key", HTPASSWD_SPEC, {"htpasswd": {"users": htpasswd_entry("a", SECRET_KEY)}},
     "htpasswd/htpasswd", "keys present: users"),
    ("htpasswd-empty", HTPASSWD_SPEC, {"htpasswd": {"htpasswd": ""}}, "htpasswd/htpasswd", "is empty"),
    ("htpasswd-plaintext", HTPASSWD_SPEC, {"htpasswd": {"htpasswd": f"alice:{SECRET_KEY}\n"}},
     "htpasswd/htpasswd", "line 1 is not a bcrypt"),
    ("http-secret-missing", HTTP_SECRET_SPEC, {"http-secret": {"secret": SECRET_KEY}}, "http-secret/token",
     "is missing"),
    ("http-secret-empty", HTTP_SECRET_SPEC, {"http-secret": {"token": "  \n"}}, "http-secret/token", "is empty"),
    ("redis-not-mounted", REDIS_SPEC, {"redis": None}, "redis/url", "not mounted"),
    ("redis-bad-scheme", REDIS_SPEC, {"redis": {"url": f"http://:{REDIS_PW}@h:1"}}, "redis/url", "redis://"),
    ("redis-bad-port", REDIS_SPEC, {"redis": {"url": f"redis://:{REDIS_PW}@h:port"}}, "redis/url",
     "not a valid redis URL"),
    ("redis-no-host", REDIS_SPEC, {"redis": {"url": "redis://"}}, "redis/url", "has no host"),
    ("redis-bad-db", REDIS_SPEC, {"redis": {"url": f"redis://:{REDIS_PW}@h:1/zero"}}, "redis/url", "database"),
    ("redis-not-utf8", REDIS_SPEC, {"redis": {"url": b"\xff\xfe" + REDIS_PW.encode()}}, "redis/url", "not UTF-8"),
    ("tls-no-key", TLS_SPEC, {"tls": {"tls.crt": PEM_CERT}}, "tls/tls.key", "is missing"),
    ("tls-key-not-pem", TLS_SPEC, {"tls": {"tls.crt": PEM_CERT, "tls.key": SECRET_KEY}}, "tls/tls.key",
     "PEM private key"),
    ("tls-cert-not-pem", TLS_SPEC, {"tls": {"tls.crt": SECRET_KEY, "tls.key": PEM_KEY}}, "tls/tls.crt",
     "PEM certificate"),
]


@pytest.mark.parametrize("spec, sources, source, message", [case[1:] for case in MALFORMED],
                         ids=[case[0] for case in MALFORMED])
def test_malformed_input_names_source_and_key_and_hides_values(spec, sources, source, message, tmp_path, caplog):
    for name, data in sources.items():
        if data is not None:
            write_secret_dir(tmp_path / name, data)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(InputError) as caught:
        read_inputs(Registry.model_validate({"spec": spec}).spec, tmp_path)
    error = caught.value
    assert error.source == source
    assert message in error.message
    assert str(error).startswith(source)
    texts = [str(error), repr(error), caplog.text]
    for value in (SECRET_KEY, ACCESS_KEY_ID, REDIS_PW, PEM_KEY.decode().splitlines()[1]):
        for text in texts:
            assert value not in text


def test_unreadable_file_is_an_input_error(tmp_path):
    # Root reads any mode, so an unreadable key is made a directory: read() fails with EISDIR.
    volume = write_secret_dir(tmp_path / "cosi", cosi_secret(TARGET))
    payload = volume / os.readlink(volume / "..data")
    (payload / "BucketInfo").unlink()
    (payload / "BucketInfo").mkdir()
    with pytest.raises(InputError) as caught:
        read_inputs(COSI_SPEC, tmp_path)
    assert caught.value.source == "cosi/BucketInfo"
    assert "is a directory, not a regular file" in caught.value.message


def test_dangling_key_after_a_swap_is_reported_missing(tmp_path):
    volume = write_secret_dir(tmp_path / "htpasswd", {"htpasswd": htpasswd_entry("a", "b")})
    swap_secret_dir(volume, {"renamed": htpasswd_entry("a", "b")})
    with pytest.raises(InputError, match="keys present: renamed"):
        read_inputs(Registry.model_validate({"spec": HTPASSWD_SPEC}).spec, tmp_path)


def test_a_session_token_key_named_in_the_spec_must_be_in_the_secret(tmp_path):
    spec = spec_with(config={"storage": {"s3": {"bucket": "data", "credentials": {
        "secretName": "keys", "sessionTokenKey": "token"}}}})
    write_secret_dir(tmp_path / "s3", {"AWS_ACCESS_KEY_ID": "ASIAMOUNTTEST0000001", "AWS_SECRET_ACCESS_KEY": "s"})
    with pytest.raises(InputError, match=r"s3/token.*spec\.config\.storage\.s3\.credentials"):
        read_inputs(spec, tmp_path)
    swap_secret_dir(tmp_path / "s3", {"AWS_ACCESS_KEY_ID": "ASIAMOUNTTEST0000001", "AWS_SECRET_ACCESS_KEY": "s",
                                      "token": "the-token\n"})
    assert read_inputs(spec, tmp_path).s3.session_token == "the-token"
    swap_secret_dir(tmp_path / "s3", {"AWS_ACCESS_KEY_ID": "ASIAMOUNTTEST0000001", "AWS_SECRET_ACCESS_KEY": "s",
                                      "token": "two\nlines"})
    with pytest.raises(InputError, match="white space") as refused:
        read_inputs(spec, tmp_path)
    assert "two" not in str(refused.value)
