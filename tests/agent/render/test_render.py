"""The renderer as a pure function: mapping, the Distribution 2.8 / 3 differences, determinism, errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from berth_agent.core.errors import InputError
from berth_agent.mounted.mounts import GcsKey, MountedInputs, S3Credentials, parse_redis_url
from berth_agent.render.config import Rendered, RenderPaths, render
from berth_api import Registry
from support.registries.mountkit import load_example


def redis_at(url: str):
    """The redis URL as read_inputs hands it on: parsed, read from redis/url."""
    return parse_redis_url(url, "redis/url")

S3 = S3Credentials("bucket-1", "http://127.0.0.1:9000", "us-east-1", "AKIARENDERTEST000001", "render-secret-key")
HTPASSWD = b"alice:$2y$04$" + b"a" * 53 + b"\n"


def spec_of(**spec):
    spec.setdefault("config", {"storage": {"inmemory": {}}})
    return Registry.model_validate({"spec": spec}).spec


def parsed(rendered: Rendered) -> dict:
    return yaml.safe_load(rendered.config)


def test_defaults_render_a_complete_minimal_config():
    config = parsed(render(spec_of(), MountedInputs(), distribution="3"))
    assert config["version"] == "0.1"  # a string, as the registry requires
    assert config["log"] == {"level": "info"}
    assert config["storage"]["inmemory"] == {}
    assert config["http"]["draintimeout"] == "30s"  # always set, so a restart drains (docs/upstream.md#dist-drain)
    assert config["storage"]["maintenance"] == {
        "uploadpurging": {"enabled": True, "age": "168h", "interval": "24h", "dryrun": False},
        "readonly": {"enabled": False},
    }
    assert "secret" not in config["http"] and "auth" not in config and "redis" not in config


def test_same_inputs_same_bytes_and_the_same_identity():
    spec = load_example("full.yaml").spec
    inputs = MountedInputs(s3=S3, htpasswd=HTPASSWD, http_secret="s", redis=redis_at("redis://:pw@cache:6379"))
    first = render(spec, inputs)
    again = render(load_example("full.yaml").spec, MountedInputs(**{**inputs.__dict__}))
    assert first.config == again.config and first.files == again.files and first.identity == again.identity
    changed = render(spec, MountedInputs(**{**inputs.__dict__, "http_secret": "t"}))
    assert changed.identity != first.identity
    # With no file beside config.yml, the identity is config.yml's sha256 (what `sha256sum config.yml` says).
    bare = render(spec_of(), MountedInputs())
    assert bare.files == {} and bare.identity == hashlib.sha256(bare.config).hexdigest()


def test_the_identity_covers_every_file_the_registry_reads():
    """A TLS, trust bundle, JWKS or htpasswd change leaves config.yml as it was, and names a new state."""
    bundle = {"configMap": {"name": "trust", "field": "ca.pem"}}
    token = {"realm": "https://a.example/t", "service": "s", "issuer": "i", "rootCertBundle": bundle, "jwks": bundle}
    spec = spec_of(image="registry:3.1.1", config={"storage": {"inmemory": {}}, "auth": {"token": token}},
                   http={"tls": {"secretName": "t"}})
    base = MountedInputs(tls_cert=b"C1", tls_key=b"K1", token_bundle=b"B1", token_jwks=b'{"keys": []}')
    first = render(spec, base)
    seen = {first.identity}
    for key, value in (("tls_cert", b"C2"), ("tls_key", b"K2"), ("token_bundle", b"B2"), ("token_jwks", b"{}")):
        other = render(spec, MountedInputs(**{**base.__dict__, key: value}))
        assert other.config == first.config and other.identity not in seen, key
        seen.add(other.identity)
    users = spec_of(config={"storage": {"inmemory": {}, "auth": {"htpasswd": {"secret": {"name": "u", "field": "f"}}}}})
    one, two = (render(users, MountedInputs(htpasswd=h)) for h in (HTPASSWD, HTPASSWD + HTPASSWD))
    assert one.config == two.config and one.identity != two.identity
    # A file's name counts too: the same bytes as the certificate or as the key are two states.
    swapped = render(spec, MountedInputs(**{**base.__dict__, "tls_cert": b"K1", "tls_key": b"C1"}))
    assert swapped.identity != first.identity
    # Only digests go in: 64 hex digits, no input in it.
    assert len(first.identity) == 64 and int(first.identity, 16) >= 0


def test_filesystem_root_and_config_files_follow_render_paths(tmp_path):
    spec = spec_of(config={"storage": {"filesystem": {"persistentVolumeClaim": "data"},
                                       "auth": {"htpasswd": {"secret": {"name": "u", "field": "f"}}}}},
                   http={"tls": {"secretName": "t"}})
    inputs = MountedInputs(htpasswd=HTPASSWD, tls_cert=b"CERT", tls_key=b"KEY")
    rendered = render(spec, inputs, paths=RenderPaths(config_dir=tmp_path / "c", data_dir=tmp_path / "d"))
    config = parsed(rendered)
    assert config["storage"]["filesystem"] == {"rootdirectory": str(tmp_path / "d")}
    assert config["auth"]["htpasswd"]["path"] == str(tmp_path / "c" / "htpasswd")
    assert config["http"]["tls"] == {"certificate": str(tmp_path / "c/tls/tls.crt"),
                                     "key": str(tmp_path / "c/tls/tls.key")}
    assert rendered.files == {"htpasswd": HTPASSWD, "tls/tls.crt": b"CERT", "tls/tls.key": b"KEY"}
    defaults = parsed(render(spec, inputs))
    assert defaults["storage"]["filesystem"]["rootdirectory"] == "/var/lib/registry"
    assert defaults["auth"]["htpasswd"]["path"] == "/etc/berth/htpasswd"


def test_storage_options_map_to_registry_keys():
    spec = spec_of(config={"storage": {
        "inmemory": {}, "delete": {"enabled": True}, "redirect": {"disabled": True},
        "cache": {"blobdescriptor": "inmemory", "blobdescriptorsize": 500},
        "maintenance": {"readonly": {"enabled": True}},
    }})
    storage = parsed(render(spec, MountedInputs(), distribution="3"))["storage"]
    assert storage["delete"] == {"enabled": True}
    assert storage["redirect"] == {"disable": True}  # the registry spells it `disable`
    assert storage["cache"] == {"blobdescriptor": "inmemory", "blobdescriptorsize": 500}
    assert storage["maintenance"]["readonly"] == {"enabled": True}
    assert storage["maintenance"]["uploadpurging"]["enabled"] is True  # whole block even when only readonly set
    assert parsed(render(spec, MountedInputs(), distribution="2"))["storage"]["cache"] == {"blobdescriptor": "inmemory"}


def test_http_section():
    spec = spec_of(http={"addr": "0.0.0.0:5443", "host": "https://reg.example.com", "relativeURLs": True,
                         "drainTimeout": "2m", "http2": {"disabled": True}, "h2c": {"enabled": True}})
    http3 = parsed(render(spec, MountedInputs(http_secret="x: y # z"), distribution="3"))["http"]
    assert http3 == {"addr": "0.0.0.0:5443", "host": "https://reg.example.com", "secret": "x: y # z",
                     "relativeurls": True, "draintimeout": "2m", "http2": {"disabled": True}, "h2c": {"enabled": True}}
    http2 = parsed(render(spec, MountedInputs(http_secret="x: y # z"), distribution="2"))["http"]
    assert "h2c" not in http2  # no such key in 2.8


def test_health_and_validation():
    spec = spec_of(health={"storagedriver": {"enabled": True, "interval": "5s", "threshold": 2},
                           "tcp": [{"addr": "db:5432"}]},
                   validation={"manifests": {"urls": {"allow": ["^https://ok/"]}}})
    config = parsed(render(spec, MountedInputs()))
    assert config["health"] == {
        "storagedriver": {"enabled": True, "interval": "5s", "threshold": 2},
        "tcp": [{"addr": "db:5432", "timeout": "3s", "interval": "10s", "threshold": 3}],
    }
    assert config["validation"] == {"manifests": {"urls": {"allow": ["^https://ok/"]}}}
    assert "health" not in parsed(render(spec_of(), MountedInputs()))


S3_SPEC = {"config": {"storage": {"objectStorage": {"bucketClaim": "c", "bucketAccess": "a", "chunkSize": 6291456}}}}


@pytest.mark.parametrize("endpoint, style, forcepathstyle", [
    ("http://minio:9000", None, True),  # custom endpoint, style unknown: path (what 2.8 did)
    ("http://minio:9000", "path", True),
    ("https://s3.example.com", "virtual", False),
    (None, None, None),  # AWS itself: the driver's default
    (None, "path", True),
])
def test_s3_forcepathstyle_on_v3(endpoint, style, forcepathstyle):
    creds = S3Credentials("b", endpoint, "eu-west-1", "AKIA", "SECRET", style)
    s3_v3 = parsed(render(spec_of(**S3_SPEC), MountedInputs(s3=creds), distribution="3"))["storage"]["s3"]
    assert s3_v3.get("forcepathstyle") == forcepathstyle
    s3_v2 = parsed(render(spec_of(**S3_SPEC), MountedInputs(s3=creds), distribution="2"))["storage"]["s3"]
    assert "forcepathstyle" not in s3_v2  # 2.8 has no such key: path style follows from regionendpoint


def test_s3_keys():
    s3 = parsed(render(spec_of(**S3_SPEC), MountedInputs(s3=S3), distribution="2"))["storage"]["s3"]
    assert s3 == {"accesskey": S3.access_key_id, "secretkey": S3.secret_access_key, "region": "us-east-1",
                  "regionendpoint": "http://127.0.0.1:9000", "bucket": "bucket-1", "secure": False,
                  "v4auth": True, "chunksize": 6291456}
    https = S3Credentials("b", "https://s3.example.com", "r", "k", "s")
    assert parsed(render(spec_of(**S3_SPEC), MountedInputs(s3=https)))["storage"]["s3"]["secure"] is True
    aws = S3Credentials("b", None, "r", "k", "s")
    assert "regionendpoint" not in parsed(render(spec_of(**S3_SPEC), MountedInputs(s3=aws)))["storage"]["s3"]


REDIS = {"secret": {"name": "r", "field": "url"}, "db": 0, "dialtimeout": "10ms", "readtimeout": "20ms",
         "writetimeout": "30ms", "pool": {"maxidle": 4, "maxactive": 8, "idletimeout": "60s"}}


def test_redis_shape_differs_between_2_and_3():
    spec = spec_of(redis=REDIS)
    inputs = MountedInputs(redis=redis_at("redis://:pw@cache:6380/2"))
    assert parsed(render(spec, inputs, distribution="2"))["redis"] == {
        "addr": "cache:6380", "password": "pw", "db": 2, "dialtimeout": "10ms", "readtimeout": "20ms",
        "writetimeout": "30ms", "pool": {"maxidle": 4, "maxactive": 8, "idletimeout": "60s"},
    }
    assert parsed(render(spec, inputs, distribution="3"))["redis"] == {
        "addrs": ["cache:6380"], "password": "pw", "db": 2, "dialtimeout": "10ms", "readtimeout": "20ms",
        "writetimeout": "30ms", "maxidleconns": 4, "poolsize": 8, "connmaxidletime": "60s",
    }


def test_redis_tls_from_spec_or_rediss_scheme_on_3_is_rootcas():
    """3.1 has no redis.tls.enabled: TLS is on when rootcas is given (tests/agent/render/test_real_redis.py)."""
    bundle = {"rootcas": ["/etc/ssl/certs/ca-certificates.crt"]}
    enabled = render(spec_of(redis={**REDIS, "tls": {"enabled": True}}), MountedInputs(redis=redis_at("redis://cache:6379")),
                     distribution="3")
    assert parsed(enabled)["redis"]["tls"] == bundle
    assert parsed(render(spec_of(redis=REDIS), MountedInputs(redis=redis_at("rediss://cache:6379")),
                         distribution="3"))["redis"]["tls"] == bundle
    paths = RenderPaths(ca_bundle=Path("/trust/ca.pem"))
    assert parsed(render(spec_of(redis=REDIS), MountedInputs(redis=redis_at("rediss://c:1")), distribution="3",
                         paths=paths))["redis"]["tls"] == {"rootcas": ["/trust/ca.pem"]}
    plain = parsed(render(spec_of(redis=REDIS), MountedInputs(redis=redis_at("redis://c:1")), distribution="3"))
    assert "tls" not in plain["redis"]


@pytest.mark.parametrize("image", ["docker.io/library/registry:3.0.0", "registry:3.0",
                                   "example.com/r/registry:v3.0-rc"])
def test_redis_tls_is_refused_on_3_0(image):
    """3.0 turns TLS to redis on only with a client certificate; without one it would send the password in clear."""
    with pytest.raises(InputError) as caught:
        render(spec_of(image=image, redis={**REDIS, "tls": {"enabled": True}}),
               MountedInputs(redis=redis_at("redis://:pw@cache:6379")), distribution="3")
    assert caught.value.source == "spec.redis.tls.enabled" and "3.0" in caught.value.message
    assert "pw" not in str(caught.value)
    for newer in ("registry:3", "registry:3.1.1", "registry:30.0"):
        render(spec_of(image=newer, redis={**REDIS, "tls": {"enabled": True}}),
               MountedInputs(redis=redis_at("redis://:pw@cache:6379")), distribution="3")


@pytest.mark.parametrize("tls, url, source", [
    (True, "redis://:pw@cache:6379", "spec.redis.tls.enabled"),
    (False, "rediss://:pw@cache:6379", "redis/url"),
])
def test_redis_tls_is_refused_on_2(tls, url, source):
    """2.8.2 ignores redis.tls and would send the password in clear text (seen against a TLS-only redis)."""
    with pytest.raises(InputError) as caught:
        render(spec_of(redis={**REDIS, "tls": {"enabled": tls}}), MountedInputs(redis=redis_at(url)), distribution="2")
    assert caught.value.source == source and "Distribution 2" in caught.value.message
    assert "pw" not in str(caught.value)


def test_redis_user_needs_distribution_3_and_the_error_hides_the_password():
    spec = spec_of(redis=REDIS)
    inputs = MountedInputs(redis=redis_at("redis://svc:hunter2secret@cache:6379"))
    assert parsed(render(spec, inputs, distribution="3"))["redis"]["username"] == "svc"
    with pytest.raises(InputError) as caught:
        render(spec, inputs, distribution="2")
    assert caught.value.source == "redis/url" and "hunter2secret" not in str(caught.value)


def test_redis_db_in_spec_and_url_must_agree():
    with pytest.raises(InputError) as caught:
        render(spec_of(redis={**REDIS, "db": 1}), MountedInputs(redis=redis_at("redis://:pw@cache:6379/2")))
    assert caught.value.source == "spec.redis.db" and "pw" not in caught.value.message


@pytest.mark.parametrize("spec, field", [
    (S3_SPEC, "spec.config.storage.objectStorage"),
    ({"config": {"storage": {"inmemory": {}, "auth": {"htpasswd": {"secret": {"name": "u", "field": "f"}}}}}},
     "spec.config.storage.auth.htpasswd"),
    ({"config": {"storage": {"inmemory": {}}, "auth": {"htpasswd": {"secret": {"name": "u", "field": "f"}}}}},
     "spec.config.auth.htpasswd"),
    ({"http": {"secret": {"name": "h", "field": "f"}}}, "spec.http.secret"),
    ({"http": {"tls": {"secretName": "t"}}}, "spec.http.tls.secretName"),
    ({"redis": REDIS}, "spec.redis.secret"),
])
def test_missing_inputs_name_the_spec_field(spec, field):
    with pytest.raises(InputError) as caught:
        render(spec_of(**spec), MountedInputs())
    assert caught.value.source == field


def test_distribution_defaults_to_the_image_tag():
    spec = spec_of(image="registry.example.com/mirror/registry:2.8.3", redis=REDIS)
    assert "addr" in parsed(render(spec, MountedInputs(redis=redis_at("redis://cache:1"))))["redis"]
    spec3 = spec_of(redis=REDIS)  # default image registry:3
    assert "addrs" in parsed(render(spec3, MountedInputs(redis=redis_at("redis://cache:1"))))["redis"]


def test_restart_needed_ignores_an_htpasswd_only_change():
    spec = spec_of(config={"storage": {"inmemory": {}, "auth": {"htpasswd": {"secret": {"name": "u", "field": "f"}}}}},
                   http={"tls": {"secretName": "t"}})
    base = MountedInputs(htpasswd=HTPASSWD, tls_cert=b"C1", tls_key=b"K1")
    first = render(spec, base)
    assert first.restart_needed(None)
    assert not first.restart_needed(render(spec, base))
    assert not render(spec, MountedInputs(**{**base.__dict__, "htpasswd": HTPASSWD + HTPASSWD})).restart_needed(first)
    assert render(spec, MountedInputs(**{**base.__dict__, "tls_cert": b"C2"})).restart_needed(first)
    assert render(spec, MountedInputs(**{**base.__dict__, "tls_key": b"K2"})).restart_needed(first)
    assert render(spec_of(), MountedInputs()).restart_needed(first)


def test_a_render_retires_a_credential_when_a_key_token_or_side_file_changes():
    """The old registry is bounded by drainTimeout exactly when the new render retires a credential it
    served with: a storage key, the http or redis secret, a TLS or trust file, htpasswd; not on a log-level edit."""
    spec = spec_of(**S3_SPEC, redis=REDIS, http={"tls": {"secretName": "t"}, "secret": {"name": "h", "field": "k"}})
    base = MountedInputs(s3=S3, http_secret="one", redis=redis_at("redis://:pw1@cache:1"), tls_cert=b"C1",
                         tls_key=b"K1")
    first = render(spec, base)
    assert not first.retires_credential(None)
    assert not render(spec, base).retires_credential(first)
    quieter = spec_of(redis=REDIS, http={"tls": {"secretName": "t"}, "secret": {"name": "h", "field": "k"}},
                      config={**S3_SPEC["config"], "log": {"level": "warn"}})
    assert not render(quieter, base).retires_credential(first)
    rotated = S3Credentials(S3.bucket, S3.endpoint, S3.region, "AKIARENDERTEST000002", "render-secret-key-2")
    for changed in ({"s3": rotated}, {"http_secret": "two"}, {"redis": redis_at("redis://:pw2@cache:1")},
                    {"tls_cert": b"C2"}, {"tls_key": b"K2"}):
        assert render(spec, MountedInputs(**{**base.__dict__, **changed})).retires_credential(first), changed
    assert first.credentials != render(spec_of(), MountedInputs()).credentials


def test_reprs_hide_secrets():
    inputs = MountedInputs(s3=S3, htpasswd=HTPASSWD, http_secret="http-secret-value",
                           redis=redis_at("redis://:redis-pw@cache:1"), tls_key=b"-----BEGIN PRIVATE KEY-----")
    rendered = render(spec_of(**S3_SPEC, redis=REDIS), inputs)
    for text in (repr(inputs), str(inputs), repr(S3), str(S3), repr(rendered)):
        for value in (S3.access_key_id, S3.secret_access_key, "http-secret-value", "redis-pw", "PRIVATE"):
            assert value not in text


def test_every_example_renders_for_both_versions():
    gcs_key = GcsKey(b"{}", "r@p.iam.gserviceaccount.com", "id", "-----BEGIN PRIVATE KEY-----", "https://t", "gcs/k")
    inputs = MountedInputs(s3=S3, htpasswd=HTPASSWD, http_secret="s", redis=redis_at("redis://:pw@cache:6379"),
                            notification_headers={"token": "Bearer t"}, azure_secret="a2V5", gcs_key=gcs_key)
    for path in sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml")):
        spec = Registry.model_validate(yaml.safe_load(path.read_text())).spec
        # Azure and GCS are Distribution 3 only (refused on 2, test_render_cloud_storage.py), so is S3 through the
        # pod's identity
        s3 = spec.config.storage.s3
        v3_only = spec.config.storage.backend in ("azure", "gcs") or (s3 is not None and s3.credentials is None)
        for major in ("3",) if v3_only else ("2", "3"):
            rendered = render(spec, inputs, distribution=major)
            assert parsed(rendered)["version"] == "0.1"
            # The document render() hands on is the one its YAML holds: nobody needs to parse it again.
            assert rendered.document == yaml.safe_load(rendered.config)
            assert Rendered(rendered.config).document == rendered.document


@pytest.mark.parametrize("provider", [
    {"htpasswd": {"secret": {"name": "u", "field": "f"}}},
    {"silly": {"realm": "r", "service": "s"}},
    {"token": {"realm": "https://a.example/t", "service": "s", "issuer": "i",
               "rootCertBundle": {"configMap": {"name": "trust", "field": "ca.pem"}}}},
])
def test_auth_renders_the_same_from_either_place(provider, tmp_path):
    """spec.config.auth and spec.config.storage.auth are one field at two paths: the same config, byte for byte."""
    inputs = MountedInputs(htpasswd=HTPASSWD, token_bundle=b"-----BEGIN CERTIFICATE-----\nMIIB\n")
    paths = RenderPaths(config_dir=tmp_path)
    top = render(spec_of(config={"storage": {"inmemory": {}}, "auth": provider}), inputs, paths=paths)
    under = render(spec_of(config={"storage": {"inmemory": {}, "auth": provider}}), inputs, paths=paths)
    assert top.config == under.config and top.files == under.files
    assert set(parsed(top)["auth"]) == set(provider)


S3_SESSION_SPEC = {"config": {"storage": {"s3": {"bucket": "bucket-1", "regionEndpoint": "http://127.0.0.1:9000",
                                                "credentials": {"secretName": "k", "sessionTokenKey": "token"}}}}}


@pytest.mark.parametrize("distribution", ["2", "3"])
def test_a_session_token_moves_the_key_to_the_shared_credentials_file(distribution):
    """The s3 driver has no session token parameter: the key, its secret and the token go to the AWS shared
    credentials file that berth-supervise names in AWS_SHARED_CREDENTIALS_FILE, none of them to config.yml; the
    pre-flight's target reads them back, and a new token alone names a new state."""
    creds = S3Credentials("bucket-1", "http://127.0.0.1:9000", "us-east-1", "ASIARENDERTEST000001", "secret-1",
                          session_token="token-1")
    rendered = render(spec_of(**S3_SESSION_SPEC), MountedInputs(s3=creds), distribution=distribution)
    s3 = parsed(rendered)["storage"]["s3"]
    assert "accesskey" not in s3 and "secretkey" not in s3 and s3["bucket"] == "bucket-1"
    assert rendered.files["s3/credentials"] == (b"[default]\naws_access_key_id = ASIARENDERTEST000001\n"
                                                b"aws_secret_access_key = secret-1\naws_session_token = token-1\n")
    target = rendered.s3
    assert (target.access_key, target.secret_key, target.session_token) == ("ASIARENDERTEST000001", "secret-1",
                                                                            "token-1")
    assert "token-1" not in repr(target) and "token-1" not in repr(creds)
    renewed = S3Credentials("bucket-1", "http://127.0.0.1:9000", "us-east-1", "ASIARENDERTEST000001", "secret-1",
                            session_token="token-2")
    again = render(spec_of(**S3_SESSION_SPEC), MountedInputs(s3=renewed), distribution=distribution)
    assert again.config == rendered.config and again.identity != rendered.identity
    without = render(spec_of(**S3_SESSION_SPEC), MountedInputs(s3=S3), distribution=distribution)
    assert "s3/credentials" not in without.files and parsed(without)["storage"]["s3"]["accesskey"] == S3.access_key_id
