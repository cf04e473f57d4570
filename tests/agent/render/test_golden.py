"""Distribution 3 rendering against golden files, and every rendered key against the configuration references.

Debian packages no v3 registry (docs/upstream.md#parts-debian-registry); the real 3.1.1 binary runs the rendered
configs where it is given (BERTH_REGISTRY3_BIN: tests/agent/render/test_real_registry.py, test_real_redis.py). Here the
output is checked two ways, with or without it:
byte-for-byte against the reviewed golden files in tests/agent/render/golden/, whose headers name each difference
from the 2.8 render of the same inputs (the test recomputes them, so the names cannot go stale); and key by
key against the key sets of each version's configuration reference, written down below from
docs/content/about/configuration.md (v3) and configuration/configuration.go + docs/configuration.md (v2.8).

Regenerate after an intended change with: BERTH_UPDATE_GOLDEN=1 python -m pytest tests/agent/render/test_golden.py
then review the diff against the v3 reference before committing.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import yaml

from berth_agent.mounted.mounts import GcsKey, MountedInputs, S3Credentials, parse_redis_url
from berth_agent.render.config import render
from berth_api import Registry
from support.registries.mountkit import EXAMPLES

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("BERTH_UPDATE_GOLDEN") == "1"

# Fixed, fake inputs so the golden bytes are stable.
S3_PATH = S3Credentials("registry-data", "http://minio.storage.svc:9000", "us-east-1", "AKIAGOLDEN0000000001",
                        "golden-secret-access-key")
S3_VIRTUAL = S3Credentials("registry-data", "https://s3.eu-west-1.amazonaws.com", "eu-west-1",
                           "AKIAGOLDEN0000000001", "golden-secret-access-key", "virtual")
INPUTS = MountedInputs(
    s3=S3_PATH,
    htpasswd=b"alice:$2y$05$" + b"A" * 53 + b"\n",
    http_secret="golden-http-secret",
    redis=parse_redis_url("redis://:golden-redis-password@redis.cache.svc:6379/0", "redis/url"),
    notification_headers={"token": "Bearer golden-notification-token"},
    azure_secret="Z29sZGVuLWF6dXJlLWFjY291bnQta2V5",
    gcs_key=GcsKey(b'{"type": "service_account"}\n', "registry@golden.iam.gserviceaccount.com", "golden-key-id",
                   "-----BEGIN PRIVATE KEY-----", "https://oauth2.googleapis.com/token", "gcs/key.json"),
)

# Everything the API can turn on, for Distribution 3 only keys in particular.
FEATURES = {
    "apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "features"},
    "spec": {
        "config": {"log": {"level": "warn"}, "storage": {
            "objectStorage": {"bucketClass": "c", "bucketAccessClass": "a", "chunkSize": 10485760},
            "delete": {"enabled": True}, "redirect": {"disabled": True},
            "cache": {"blobdescriptor": "redis", "blobdescriptorsize": 2000},
            "maintenance": {"uploadpurging": {"enabled": False}, "readonly": {"enabled": True}},
            "auth": {"htpasswd": {"secret": {"name": "users", "field": "htpasswd"}}},
        }},
        "http": {"addr": ":5443", "host": "https://registry.example.com", "relativeURLs": True,
                 "drainTimeout": "2m", "http2": {"disabled": True}, "h2c": {"enabled": True},
                 "tls": {"secretName": "registry-tls"}},
        "redis": {"secret": {"name": "r", "field": "url"}, "db": 0, "dialtimeout": "100ms",
                  "pool": {"maxidle": 8, "maxactive": 32, "idletimeout": "5m"}, "tls": {"enabled": True}},
        "health": {"storagedriver": {"enabled": True}, "tcp": [{"addr": "redis.cache.svc:6379"}]},
        "validation": {"manifests": {"urls": {"allow": ["^https://"], "deny": ["^https://bad\\.example/"]}}},
    },
}
FEATURE_INPUTS = MountedInputs(
    s3=S3_VIRTUAL, htpasswd=INPUTS.htpasswd, http_secret=INPUTS.http_secret,
    redis=parse_redis_url("rediss://:golden-redis-password@redis.cache.svc:6380/1", "redis/url"),
    tls_cert=b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
    tls_key=b"-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
)



def example_inputs(document: dict) -> MountedInputs:
    """INPUTS, with storage.s3's bucket from the example and the fixed key (none for the pod's identity)."""
    s3 = Registry.model_validate(document).spec.config.storage.s3
    if s3 is None:
        return INPUTS
    key = (INPUTS.s3.access_key_id, INPUTS.s3.secret_access_key) if s3.credentials else ("", "")
    return dataclasses.replace(INPUTS, s3=S3Credentials(
        s3.bucket, s3.region_endpoint, s3.region, *key, addressing_style="path" if s3.path_style else "virtual"))


CASES = {path.stem: (document, example_inputs(document))
         for path in sorted(EXAMPLES.glob("*.yaml")) for document in [yaml.safe_load(path.read_text())]}
CASES["features"] = (FEATURES, FEATURE_INPUTS)

# Key paths ("a.b.c"; list items as "a[]") of each version's configuration reference that the renderer may use.
_COMMON = {
    "version", "log.level", "storage.filesystem.rootdirectory", "storage.inmemory",
    "storage.s3.accesskey", "storage.s3.secretkey", "storage.s3.region", "storage.s3.regionendpoint",
    "storage.s3.bucket", "storage.s3.secure", "storage.s3.v4auth", "storage.s3.chunksize",
    # the s3 options (s3-aws/s3.go FromParameters at v2.8.2 and v3.1.1), filesystem's maxthreads
    *(f"storage.s3.{key}" for key in ("encrypt", "keyid", "skipverify", "multipartcopychunksize",
                                      "multipartcopymaxconcurrency", "multipartcopythresholdsize", "rootdirectory",
                                      "storageclass", "objectacl")),
    "storage.filesystem.maxthreads",
    "storage.delete.enabled", "storage.redirect.disable", "storage.cache.blobdescriptor",
    "storage.maintenance.uploadpurging.enabled", "storage.maintenance.uploadpurging.age",
    "storage.maintenance.uploadpurging.interval", "storage.maintenance.uploadpurging.dryrun",
    "storage.maintenance.readonly.enabled", "auth.htpasswd.realm", "auth.htpasswd.path",
    "http.addr", "http.host", "http.secret", "http.relativeurls", "http.draintimeout",
    "http.tls.certificate", "http.tls.key", "http.http2.disabled",
    "redis.password", "redis.db", "redis.dialtimeout", "redis.readtimeout", "redis.writetimeout",
    "health.storagedriver.enabled", "health.storagedriver.interval", "health.storagedriver.threshold",
    "health.tcp[].addr", "health.tcp[].timeout", "health.tcp[].interval", "health.tcp[].threshold",
    "validation.manifests.urls.allow", "validation.manifests.urls.deny",
    # notifications (configuration.go Endpoint at v2.8.3 and v3.1.1; docs/upstream.md#dist-notifications); headers is
    # a map of any header names, written here as "headers.*"
    "notifications.endpoints[].name", "notifications.endpoints[].disabled", "notifications.endpoints[].url",
    "notifications.endpoints[].headers.*", "notifications.endpoints[].timeout", "notifications.endpoints[].threshold",
    "notifications.endpoints[].backoff", "notifications.endpoints[].ignoredmediatypes",
}
V2_REFERENCE = _COMMON | {
    "redis.addr", "redis.pool.maxidle", "redis.pool.maxactive", "redis.pool.idletimeout",
}
V3_REFERENCE = _COMMON | {
    "storage.s3.forcepathstyle", "storage.cache.blobdescriptorsize", "http.h2c.enabled",
    "storage.s3.usedualstack", "storage.s3.accelerate", "storage.s3.loglevel",
    # v3.1 turns redis TLS on with rootcas; `tls.enabled` in its configuration.md example is not a key of its
    # parser (configuration.go v3.1.1) and is ignored (tests/agent/render/test_real_redis.py)
    "redis.tls.rootcas",
    # go-redis UniversalOptions, inline under redis
    "redis.addrs", "redis.username", "redis.maxidleconns", "redis.poolsize", "redis.connmaxidletime",
    "notifications.endpoints[].ignore.mediatypes", "notifications.endpoints[].ignore.actions",
    "notifications.events.includereferences",
    # azure and gcs (3 only): the drivers' own parameters, registry/storage/driver/azure/parser.go and
    # registry/storage/driver/gcs/gcs.go FromParameters at v3.1.1
    *(f"storage.azure.{key}" for key in ("accountname", "container", "accountkey", "credentials.type",
                                         "credentials.clientid", "credentials.tenantid", "credentials.secret",
                                         "realm", "serviceurl", "rootdirectory", "max_retries", "retry_delay")),
    *(f"storage.gcs.{key}" for key in ("bucket", "keyfile", "rootdirectory", "chunksize")),
}


def key_paths(node, prefix: str = "") -> set[str]:
    if isinstance(node, dict):
        if not node and prefix:
            return {prefix}
        paths: set[str] = set()
        for key, value in node.items():
            if prefix.endswith(".headers"):  # notifications headers: a map of any header names
                key = "*"
            paths |= key_paths(value, f"{prefix}.{key}" if prefix else str(key))
        return paths
    if isinstance(node, list) and node and isinstance(node[0], dict):
        return set().union(*(key_paths(item, prefix + "[]") for item in node))
    return {prefix}


def v3_only(name: str) -> bool:
    """A Distribution 3 only spec (azure, gcs, s3 with the pod's identity): refused on 2.8, so there is no 2.8
    render to compare."""
    storage = Registry.model_validate(CASES[name][0]).spec.config.storage
    return storage.backend in ("azure", "gcs") or (storage.s3 is not None and storage.s3.credentials is None)


def render_case(name: str, major: str) -> bytes:
    document, inputs = CASES[name]
    if major == "2" and name == "features":
        # Redis TLS is refused for 2.8 (it would connect in clear text): compare with the nearest 2.8 config.
        document = {**document, "spec": {**document["spec"], "redis": {**document["spec"]["redis"], "tls": {}}}}
        inputs = dataclasses.replace(inputs, redis=dataclasses.replace(inputs.redis, tls=False))  # redis://
    return render(Registry.model_validate(document).spec, inputs, distribution=major).config


def header(name: str) -> str:
    source = f"examples/{name}.yaml" if name != "features" else "FEATURES in tests/agent/render/test_golden.py"
    lines = [
        f"# Distribution 3 config rendered from {source} with the fixed inputs of tests/agent/render/test_golden.py.\n",
        "# Reviewed against the Distribution 3 configuration reference (docs/content/about/configuration.md).\n",
    ]
    if v3_only(name):
        return "".join([*lines, "# Not rendered for Distribution 2.8: its storage backend is Distribution 3 only.\n"])
    v2 = key_paths(yaml.safe_load(render_case(name, "2")))
    v3 = key_paths(yaml.safe_load(render_case(name, "3")))
    return "".join([
        *lines,
        "# Differences from the Distribution 2.8 render of the same inputs:\n",
        f"#   only in 3:   {', '.join(sorted(v3 - v2)) or 'none'}\n",
        f"#   only in 2.8: {', '.join(sorted(v2 - v3)) or 'none'}\n",
    ])


@pytest.mark.parametrize("name", sorted(CASES))
def test_distribution_3_render_matches_golden(name):
    path = GOLDEN / f"{name}.v3.yml"
    expected = header(name).encode() + render_case(name, "3")
    if UPDATE:
        path.write_bytes(expected)
    assert path.exists(), f"missing golden file {path}; run with BERTH_UPDATE_GOLDEN=1 and review it"
    assert path.read_bytes() == expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_rendered_key_exists_in_its_version_reference(name):
    v2 = set() if v3_only(name) else key_paths(yaml.safe_load(render_case(name, "2")))
    v3 = key_paths(yaml.safe_load(render_case(name, "3")))
    assert v2 <= V2_REFERENCE, f"not 2.8 config keys: {sorted(v2 - V2_REFERENCE)}"
    assert v3 <= V3_REFERENCE, f"not 3.x config keys: {sorted(v3 - V3_REFERENCE)}"


def test_features_golden_shows_every_named_difference():
    v2 = key_paths(yaml.safe_load(render_case("features", "2")))
    v3 = key_paths(yaml.safe_load(render_case("features", "3")))
    assert v3 - v2 == {
        "storage.s3.forcepathstyle", "storage.cache.blobdescriptorsize", "http.h2c.enabled",
        "redis.addrs", "redis.maxidleconns", "redis.poolsize", "redis.connmaxidletime", "redis.tls.rootcas",
    }
    assert v2 - v3 == {"redis.addr", "redis.pool.maxidle", "redis.pool.maxactive", "redis.pool.idletimeout"}
    v3_config = yaml.safe_load(render_case("features", "3"))
    assert v3_config["storage"]["s3"]["forcepathstyle"] is False  # COSI said virtual
    assert v3_config["redis"]["tls"] == {"rootcas": ["/etc/ssl/certs/ca-certificates.crt"]}
