"""The Registry model rejects bad input naming the field, and the CRD rejects the same input where it can.

Each invalid case says which API path the model's error must name and whether the API server (the
committed CRD: schema, defaults, CEL, strict field validation) refuses it too. The cases the CRD lets through
are exactly the ones docs/design.md §5.1 lists as enforced by the model alone.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from api.admission import admit
from berth_api import DEFAULT_IMAGE, GC_STORAGE_MESSAGE, Registry, describe_validation_error


def registry(**spec: Any) -> dict[str, Any]:
    """A Registry document; spec defaults to the smallest valid one (in-memory storage)."""
    spec.setdefault("config", {"storage": {"inmemory": {}}})
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "r"}, "spec": spec}


def storage(**storage_spec: Any) -> dict[str, Any]:
    return registry(config={"storage": storage_spec})


def filesystem(**fs: Any) -> dict[str, Any]:
    return storage(filesystem=fs)


def object_storage(**bucket: Any) -> dict[str, Any]:
    return storage(objectStorage=bucket)


def collected(**gc: Any) -> dict[str, Any]:
    """A Registry with garbageCollection set, on storage GC can reach (not inmemory)."""
    return registry(config={"storage": {"filesystem": {"storageClass": "standard"}}}, garbageCollection=gc)


BUCKET = {"bucketClass": "s3", "bucketAccessClass": "s3-rw"}
HTPASSWD = {"secret": {"name": "users", "field": "htpasswd"}}
REDIS = {"secret": {"name": "redis", "field": "url"}}
BUNDLE = {"configMap": {"name": "issuer-trust", "field": "bundle.pem"}}
TOKEN = {"realm": "https://auth.example.com/token", "service": "registry.example.com", "issuer": "auth.example.com",
         "rootCertBundle": BUNDLE}


def auth(image: str = "registry:3", **providers: Any) -> dict[str, Any]:
    """Auth where the architecture document puts it (spec.config.storage.auth)."""
    return registry(image=image, config={"storage": {"inmemory": {}, "auth": providers}})


def top_auth(image: str = "registry:3", **providers: Any) -> dict[str, Any]:
    """Auth where Distribution's config.yml has it (spec.config.auth)."""
    return registry(image=image, config={"storage": {"inmemory": {}}, "auth": providers})


# (case id, Registry document, API path the model's error names, part of the message, CRD refuses it too)
INVALID = [
    # the pod overrides, env and the ServiceAccount's annotations; Berth's own names are refused
    *((f"pod label {key}", registry(pod={"labels": {key: "x"}}), "spec.pod.labels",
       "collides with Berth's own labels", True)
      for key in ("app.kubernetes.io/instance", "app.kubernetes.io/name", "app.kubernetes.io/managed-by",
                  "app.kubernetes.io/component", "pod-template-hash", "berth.dev/anything")),
    ("pod annotation berth.dev/", registry(pod={"annotations": {"berth.dev/gc-requested-at": "now"}}),
     "spec.pod.annotations", "collides with Berth's own annotations", True),
    ("serviceAccount annotation berth.dev/", registry(serviceAccount={"annotations": {"berth.dev/x": "y"}}),
     "spec.serviceAccount.annotations", "collides with Berth's own annotations", True),
    *((f"env {name}", registry(env=[{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                                    {"name": name, "value": "x"}]),
       "spec.env.1", "reserved by Berth", True)
      for name in ("REGISTRY_HTTP_ADDR", "REGISTRY_STORAGE", "BERTH_CONFIG", "BERTH_ANYTHING", "OTEL_TRACES_EXPORTER")),
    ("env value and valueFrom", registry(env=[{"name": "A", "value": "1", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}}}]), "spec.env.0", "exactly one of value and valueFrom", True),
    ("env secretKeyRef and configMapKeyRef", registry(env=[{"name": "A", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}, "configMapKeyRef": {"name": "c", "key": "k"}}}]),
     "spec.env.0.valueFrom", "exactly one of secretKeyRef and configMapKeyRef", True),
    ("env set twice", registry(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]), "spec.env",
     "A is set twice", True),
    ("env name with a space", registry(env=[{"name": "A B", "value": "1"}]), "spec.env.0.name", "pattern", True),
    ("toleration value with Exists", registry(pod={"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
     "spec.pod.tolerations.0", "value must be empty when operator is Exists", True),
    ("toleration without key or Exists", registry(pod={"tolerations": [{"effect": "NoSchedule"}]}),
     "spec.pod.tolerations.0", "an empty key needs operator Exists", True),
    ("tolerationSeconds without NoExecute", registry(pod={"tolerations": [
        {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}),
     "spec.pod.tolerations.0", "tolerationSeconds needs effect NoExecute", True),
    ("affinity typo", registry(pod={"affinity": {"nodeAfinity": {}}}), "spec.pod.affinity.nodeAfinity",
     "Extra inputs are not permitted", True),
    ("topology spread without whenUnsatisfiable", registry(pod={"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone"}]}), "spec.pod.topologySpreadConstraints.0.whenUnsatisfiable",
     "Field required", True),
    ("imagePullSecrets name invalid", registry(pod={"imagePullSecrets": [{"name": "Bad_Name"}]}),
     "spec.pod.imagePullSecrets.0.name", "pattern", True),
    ("agentResources bad quantity", registry(pod={"agentResources": {"limits": {"memory": "lots"}}}),
     "spec.pod.agentResources.limits.memory", "pattern", True),
    # spec.networkPolicy's peers are an ipBlock or selectors; CIDRs the CRD's pattern lets through (host
    # bits, an except outside the cidr) the model refuses, and the operator reports (InvalidSpec)
    ("networkPolicy peer of neither kind", registry(networkPolicy={"from": [{}]}), "spec.networkPolicy.from.0",
     "set ipBlock, or namespaceSelector and/or podSelector", True),
    ("networkPolicy peer of both kinds", registry(networkPolicy={"metricsFrom": [
        {"ipBlock": {"cidr": "10.0.0.0/8"}, "namespaceSelector": {}}]}), "spec.networkPolicy.metricsFrom.0",
     "set ipBlock, or namespaceSelector and/or podSelector", True),
    ("networkPolicy cidr without a prefix", registry(networkPolicy={"from": [{"ipBlock": {"cidr": "10.0.0.1"}}]}),
     "spec.networkPolicy.from.0.ipBlock.cidr", "pattern", True),
    ("networkPolicy cidr with host bits", registry(networkPolicy={"from": [{"ipBlock": {"cidr": "10.0.0.1/8"}}]}),
     "spec.networkPolicy.from.0.ipBlock.cidr", "is not a CIDR network", False),
    ("networkPolicy except outside the cidr", registry(networkPolicy={"from": [{"ipBlock": {
        "cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}]}), "spec.networkPolicy.from.0.ipBlock",
     "must lie strictly inside cidr", False),
    ("two backends", storage(inmemory={}, filesystem={"storageClass": "standard"}),
     "spec.config.storage", "exactly one storage backend", True),
    ("three backends", storage(inmemory={}, filesystem={"storageClass": "standard"}, objectStorage=BUCKET),
     "spec.config.storage", "exactly one storage backend", True),
    ("no backend", storage(delete={"enabled": True}),
     "spec.config.storage", "exactly one storage backend", True),
    ("pvc and storageClass", filesystem(persistentVolumeClaim="data", storageClass="standard"),
     "spec.config.storage.filesystem", "exactly one of persistentVolumeClaim and storageClass", True),
    ("neither pvc nor storageClass", filesystem(size="20Gi"),
     "spec.config.storage.filesystem", "exactly one of persistentVolumeClaim and storageClass", True),
    ("bucketClaim and bucketClass", object_storage(bucketClaim="b", bucketClass="s3", bucketAccessClass="rw"),
     "spec.config.storage.objectStorage", "exactly one of bucketClaim and bucketClass", True),
    ("neither bucketClaim nor bucketClass", object_storage(bucketAccessClass="rw"),
     "spec.config.storage.objectStorage", "exactly one of bucketClaim and bucketClass", True),
    ("bucketAccess and bucketAccessClass", object_storage(bucketClass="s3", bucketAccess="a", bucketAccessClass="rw"),
     "spec.config.storage.objectStorage", "exactly one of bucketAccess and bucketAccessClass", True),
    ("neither bucketAccess nor bucketAccessClass", object_storage(bucketClass="s3"),
     "spec.config.storage.objectStorage", "exactly one of bucketAccess and bucketAccessClass", True),
    ("chunkSize below 5 MiB", object_storage(**BUCKET, chunkSize=1024 * 1024),
     "spec.config.storage.objectStorage.chunkSize", "greater than or equal to 5242880", True),
    ("missing secret field", storage(inmemory={}, auth={"htpasswd": {"secret": {"name": "users"}}}),
     "spec.config.storage.auth.htpasswd.secret.field", "Field required", True),
    ("missing secret name", registry(http={"secret": {"field": "secret"}}),
     "spec.http.secret.name", "Field required", True),
    ("bad secret name", registry(redis={"secret": {"name": "Redis_Secret", "field": "url"}}),
     "spec.redis.secret.name", "should match pattern", True),
    ("bad secret key", registry(http={"secret": {"name": "http", "field": "a/b"}}),
     "spec.http.secret.field", "should match pattern", True),
    ("negative replicas", registry(replicas=-1),
     "spec.replicas", "greater than or equal to 0", True),
    ("replicas not a number", registry(replicas="two"),
     "spec.replicas", "valid integer", True),
    ("drainTimeout with a space", registry(http={"drainTimeout": "30 s"}),
     "spec.http.drainTimeout", "should match pattern", True),
    ("upload purging age in days", storage(inmemory={}, maintenance={"uploadpurging": {"age": "1d"}}),
     "spec.config.storage.maintenance.uploadpurging.age", "should match pattern", True),
    ("redis timeout without unit", registry(redis={**REDIS, "dialtimeout": "5"}),
     "spec.redis.dialtimeout", "should match pattern", True),
    ("regex with unbalanced parenthesis", registry(validation={"manifests": {"urls": {"allow": ["^https://(a"]}}}),
     "spec.validation.manifests.urls.allow.0", "invalid regular expression", False),
    ("regex with look-ahead", registry(validation={"manifests": {"urls": {"deny": ["^(?!https://)"]}}}),
     "spec.validation.manifests.urls.deny.0", "look-around", False),
    ("regex with back-reference", registry(validation={"manifests": {"urls": {"deny": [r"(a)\1"]}}}),
     "spec.validation.manifests.urls.deny.0", "back-reference", False),
    ("empty regex", registry(validation={"manifests": {"urls": {"allow": [""]}}}),
     "spec.validation.manifests.urls.allow.0", "at least 1 character", True),
    ("bad log level", registry(config={"log": {"level": "verbose"}, "storage": {"inmemory": {}}}),
     "spec.config.log.level", "'error', 'warn', 'info' or 'debug'", True),
    ("typo at spec level", registry(replica=2),
     "spec.replica", "Extra inputs are not permitted", True),
    ("typo in http", registry(http={"drainTimout": "10s"}),
     "spec.http.drainTimout", "Extra inputs are not permitted", True),
    ("inmemory takes no parameters", storage(inmemory={"size": "1Gi"}),
     "spec.config.storage.inmemory.size", "Extra inputs are not permitted", True),
    ("addr without port", registry(http={"addr": "localhost"}),
     "spec.http.addr", "should match pattern", True),
    ("addr port 70000", registry(http={"addr": ":70000"}),
     "spec.http.addr", "port 70000 is outside 1-65535", False),
    ("addr port 0", registry(http={"addr": "127.0.0.1:0"}),
     "spec.http.addr", "port 0 is outside 1-65535", False),
    ("size not a quantity", filesystem(storageClass="standard", size="10GB"),
     "spec.config.storage.filesystem.size", "should match pattern", True),
    ("resources quantity", registry(resources={"requests": {"memory": "lots"}}),
     "spec.resources.requests.memory", "should match pattern", True),
    ("redis cache without spec.redis", storage(inmemory={}, cache={"blobdescriptor": "redis"}),
     "spec", "config.storage.cache.blobdescriptor redis needs spec.redis", True),
    ("distribution 4", registry(distribution="4"),
     "spec.distribution", "'2' or '3'", True),
    ("distribution as a number", registry(distribution=3),
     "spec.distribution", "'2' or '3'", True),
    ("bad blobdescriptor", storage(inmemory={}, cache={"blobdescriptor": "memcached"}),
     "spec.config.storage.cache.blobdescriptor", "'inmemory' or 'redis'", True),
    ("blobdescriptorsize 0", storage(inmemory={}, cache={"blobdescriptor": "inmemory", "blobdescriptorsize": 0}),
     "spec.config.storage.cache.blobdescriptorsize", "greater than or equal to 1", True),
    ("storagedriver threshold 0", registry(health={"storagedriver": {"enabled": True, "threshold": 0}}),
     "spec.health.storagedriver.threshold", "greater than or equal to 1", True),
    ("tcp check without port", registry(health={"tcp": [{"addr": "redis:6379"}, {"addr": "db"}]}),
     "spec.health.tcp.1.addr", "should match pattern", True),
    ("tcp check without addr", registry(health={"tcp": [{"timeout": "1s"}]}),
     "spec.health.tcp.0.addr", "Field required", True),
    ("http.host without scheme", registry(http={"host": "registry.example.com"}),
     "spec.http.host", "should match pattern", True),
    ("tls secretName not a name", registry(http={"tls": {"secretName": "TLS!"}}),
     "spec.http.tls.secretName", "should match pattern", True),
    ("redis db negative", registry(redis={**REDIS, "db": -1}),
     "spec.redis.db", "greater than or equal to 0", True),
    ("empty image", registry(image=""),
     "spec.image", "at least 1 character", True),
    ("no config", {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "spec": {"replicas": 1}},
     "spec.config", "Field required", True),
    ("no spec", {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "r"}},
     "spec", "Field required", True),
    ("gc schedule with 4 fields", collected(schedule="0 3 * *"),
     "spec.garbageCollection.schedule", "has 4 fields, a schedule has 5", True),
    ("gc schedule hour 24", collected(schedule="0 24 * * *"),
     "spec.garbageCollection.schedule", "hour field '24': 24 is outside 0-23", False),
    ("gc schedule 30 February", collected(schedule="0 0 30 feb *"),
     "spec.garbageCollection.schedule", "never fires", False),
    ("gc schedule unknown day name", collected(schedule="0 3 * * sunday"),
     "spec.garbageCollection.schedule", "'sunday' is not a number or a name", False),
    ("gc schedule macro", collected(schedule="@daily"),
     "spec.garbageCollection.schedule", "has 1 fields, a schedule has 5", True),
    ("gc readOnlyTimeout 30s", collected(readOnlyTimeout="30s"),
     "spec.garbageCollection.readOnlyTimeout", "readOnlyTimeout must be between 1m and 24h", True),
    ("gc readOnlyTimeout 2 days", collected(readOnlyTimeout="48h"),
     "spec.garbageCollection.readOnlyTimeout", "readOnlyTimeout must be between 1m and 24h", True),
    ("gc readOnlyTimeout in days", collected(readOnlyTimeout="1d"),
     "spec.garbageCollection.readOnlyTimeout", "should match pattern", True),
    ("gc typo", collected(dryrun=True),
     "spec.garbageCollection.dryrun", "Extra inputs are not permitted", True),
    ("gc on in-memory storage", registry(garbageCollection={}),
     "spec", GC_STORAGE_MESSAGE, True),
    ("condition reason with spaces",
     {**registry(), "status": {"conditions": [
         {"type": "Ready", "status": "True", "reason": "All good", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
     "status.conditions.0.reason", "should match pattern", True),
    ("unknown condition type",
     {**registry(), "status": {"conditions": [
         {"type": "Available", "status": "True", "reason": "Up", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
     "status.conditions.0.type", "'Ready', 'Progressing' or 'Degraded'", True),
    ("two Ready conditions",
     {**registry(), "status": {"conditions": [
         {"type": "Ready", "status": status, "reason": "Up", "lastTransitionTime": "2026-01-01T00:00:00Z"}
         for status in ("True", "False")]}},
     "status.conditions", "one entry per condition type", True),
    # Bounds: what both registry versions accept at start. Go's time.Duration ends at 2562047h.
    ("drainTimeout past Go's duration", registry(http={"drainTimeout": "100000000h"}),
     "spec.http.drainTimeout", "at most 999999h", True),
    ("drainTimeout just past the bound", registry(http={"drainTimeout": "1000000h"}),
     "spec.http.drainTimeout", "at most 999999h", True),
    ("duration with a unit twice", registry(http={"drainTimeout": "2000000h2000000h"}),
     "spec.http.drainTimeout", "each at most once", True),
    ("upload purging interval past Go's duration",
     storage(inmemory={}, maintenance={"uploadpurging": {"interval": "9999999999999999999ns"}}),
     "spec.config.storage.maintenance.uploadpurging.interval", "at most 999999h", True),
    ("redis dial timeout past Go's duration", registry(redis={**REDIS, "dialtimeout": "300000000m"}),
     "spec.redis.dialtimeout", "at most 999999h", True),
    ("tcp check interval past Go's duration", registry(health={"tcp": [{"addr": "r:1", "interval": "3000000h"}]}),
     "spec.health.tcp.0.interval", "at most 999999h", True),
    ("chunkSize above 5 GiB", object_storage(**BUCKET, chunkSize=5 * 1024**3 + 1),
     "spec.config.storage.objectStorage.chunkSize", "less than or equal to 5368709120", True),
    ("redis pool of a million", registry(redis={**REDIS, "pool": {"maxactive": 1000000}}),
     "spec.redis.pool.maxactive", "less than or equal to 10000", True),
    ("redis idle pool of a million", registry(redis={**REDIS, "pool": {"maxidle": 1000000}}),
     "spec.redis.pool.maxidle", "less than or equal to 10000", True),
    ("redis db past int32", registry(redis={**REDIS, "db": 2**31}),
     "spec.redis.db", "less than or equal to 2147483647", True),
    ("threshold past int32", registry(health={"storagedriver": {"enabled": True, "threshold": 2**31}}),
     "spec.health.storagedriver.threshold", "less than or equal to 2147483647", True),
    ("blobdescriptorsize past int32",
     storage(inmemory={}, cache={"blobdescriptor": "inmemory", "blobdescriptorsize": 2**31}),
     "spec.config.storage.cache.blobdescriptorsize", "less than or equal to 2147483647", True),
    ("replicas past int32", registry(replicas=2**31),
     "spec.replicas", "less than or equal to 2147483647", True),
    # Auth: one provider; token needs trust; the 3.x-only token fields refused on 2.8.
    ("htpasswd and token", auth(htpasswd=HTPASSWD, token=TOKEN),
     "spec.config.storage.auth", "at most one auth provider", True),
    ("token and silly", auth(token=TOKEN, silly={"realm": "r", "service": "s"}),
     "spec.config.storage.auth", "at most one auth provider", True),
    ("token without trust", auth(token={k: v for k, v in TOKEN.items() if k != "rootCertBundle"}),
     "spec.config.storage.auth.token", "set rootCertBundle, jwks or both", True),
    ("bundle from a Secret and a ConfigMap",
     auth(token={**TOKEN, "rootCertBundle": {**BUNDLE, "secret": {"name": "s", "field": "ca.crt"}}}),
     "spec.config.storage.auth.token.rootCertBundle", "exactly one of secret and configMap", True),
    ("token realm not a URL", auth(token={**TOKEN, "realm": "auth.example.com/token"}),
     "spec.config.storage.auth.token.realm", "should match pattern", True),
    ("unknown signing algorithm", auth(token={**TOKEN, "signingAlgorithms": ["none"]}),
     "spec.config.storage.auth.token.signingAlgorithms.0", "'EdDSA'", True),
    ("jwks on 2.8", auth("registry:2.8.2", token={**TOKEN, "jwks": BUNDLE}),
     "spec", "config.storage.auth.token.jwks needs Distribution 3", True),
    ("signingAlgorithms on 2.8", auth("registry:3", token={**TOKEN, "signingAlgorithms": ["RS256"]}) | {
        "spec": {**auth("registry:3", token={**TOKEN, "signingAlgorithms": ["RS256"]})["spec"], "distribution": "2"}},
     "spec", "config.storage.auth.token.signingAlgorithms needs Distribution 3", True),
    ("autoRedirectPath on 2.8", auth("localhost:5000/registry:2", token={**TOKEN, "autoRedirectPath": "/auth"}),
     "spec", "config.storage.auth.token.autoRedirectPath needs Distribution 3", True),
    # The same rules at spec.config.auth, each message naming that path; and never both places at once.
    ("htpasswd and token at spec.config.auth", top_auth(htpasswd=HTPASSWD, token=TOKEN),
     "spec.config.auth", "at most one auth provider", True),
    ("token without trust at spec.config.auth",
     top_auth(token={k: v for k, v in TOKEN.items() if k != "rootCertBundle"}),
     "spec.config.auth.token", "set rootCertBundle, jwks or both", True),
    ("jwks on 2.8 at spec.config.auth", top_auth("registry:2.8.2", token={**TOKEN, "jwks": BUNDLE}),
     "spec", "config.auth.token.jwks needs Distribution 3", True),
    ("spec.config.auth without a provider", top_auth(),
     "spec.config.auth", "set exactly one auth provider", True),
    ("htpasswd at both places", registry(config={"storage": {"inmemory": {}, "auth": {"htpasswd": HTPASSWD}},
                                                 "auth": {"htpasswd": HTPASSWD}}),
     "spec.config", "set auth in one place: spec.config.auth or spec.config.storage.auth", True),
    ("token at spec.config.auth, htpasswd under storage",
     registry(config={"storage": {"inmemory": {}, "auth": {"htpasswd": HTPASSWD}}, "auth": {"token": TOKEN}}),
     "spec.config", "set auth in one place", True),
]


def model_error(document: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        Registry.model_validate(copy.deepcopy(document))
    return describe_validation_error(caught.value)


def test_the_table_is_large_enough() -> None:
    assert len(INVALID) >= 25
    assert len({case[0] for case in INVALID}) == len(INVALID), "case ids must be unique"


@pytest.mark.parametrize(("document", "path", "message", "crd_refuses"),
                         [pytest.param(*case[1:], id=case[0]) for case in INVALID])
def test_invalid_registry_is_rejected_naming_the_field(
    document: dict[str, Any], path: str, message: str, crd_refuses: bool
) -> None:
    error = model_error(document)
    problems = dict(line.split(": ", 1) for line in error.split("; "))
    assert path in problems, f"the error names {sorted(problems)}, not {path}: {error}"
    assert message in problems[path], error


@pytest.mark.parametrize(("document", "path", "crd_refuses"),
                         [pytest.param(case[1], case[2], case[4], id=case[0]) for case in INVALID])
def test_the_crd_refuses_what_it_can_at_the_same_path(document: dict[str, Any], path: str, crd_refuses: bool) -> None:
    problems = admit(document)
    if crd_refuses:
        assert path in {p for p, _ in problems}, f"the API server would say {problems}, nothing at {path}"
    else:
        # Enforced by the model alone (docs/design.md §5.1): if the CRD learns it, move the case over.
        assert problems == [], problems


def test_errors_are_one_line_per_problem_without_a_stack() -> None:
    error = model_error(registry(replicas=-1, http={"addr": "nowhere", "drainTimeout": "soon"}))
    assert sorted(line.split(":", 1)[0] for line in error.split("; ")) == [
        "spec.http.addr", "spec.http.drainTimeout", "spec.replicas"]
    assert "Traceback" not in error and "\n" not in error


def test_errors_do_not_echo_the_input() -> None:
    """describe_validation_error leaves inputs out, so a value pasted into the wrong field is not repeated."""
    pasted = "hunter2-not-a-secret-name"
    error = model_error(registry(http={"secret": {"name": "http", "field": pasted + "/x"}}))
    assert "spec.http.secret.field" in error
    assert pasted not in error


# Valid documents: defaults, and the Distribution major version derived from the image.

def test_defaults_are_applied() -> None:
    spec = Registry.model_validate(filesystem(storageClass="standard")).spec
    assert spec.image == DEFAULT_IMAGE == "docker.io/library/registry:3"
    assert spec.replicas == 1
    assert spec.http.drain_timeout == "30s"
    assert spec.http.addr == ":5000"
    assert spec.config.log.level == "info"
    assert spec.config.storage.filesystem.size == "10Gi"
    assert spec.config.storage.maintenance.uploadpurging.age == "168h"
    assert spec.distribution is None and spec.distribution_major == "3"


@pytest.mark.parametrize(
    ("image", "distribution", "expected"),
    [
        ("registry:2", None, "2"),
        ("docker.io/library/registry:2.8.3", None, "2"),
        ("registry:2.8", None, "2"),
        ("registry:3", None, "3"),
        ("registry:3.0.0", None, "3"),
        ("ghcr.io/distribution/distribution:3.0.0-rc.1", None, "3"),
        ("registry@sha256:" + "a" * 64, None, "3"),
        ("registry:2@sha256:" + "a" * 64, None, "2"),
        ("registry", None, "3"),
        ("localhost:5000/registry", None, "3"),
        ("localhost:5000/registry:2.8.2", None, "2"),
        ("registry:latest", None, "3"),
        ("registry:2", "3", "3"),
        ("registry:3", "2", "2"),
        ("mirror.example.com/registry@sha256:" + "b" * 64, "2", "2"),
    ],
)
def test_distribution_is_derived_from_the_image_unless_given(image: str, distribution: str | None,
                                                             expected: str) -> None:
    extra = {"distribution": distribution} if distribution else {}
    document = registry(image=image, **extra)
    assert Registry.model_validate(document).spec.distribution_major == expected
    assert admit(document) == []


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(registry(), id="inmemory"),
        pytest.param(filesystem(persistentVolumeClaim="registry-data"), id="pvc"),
        pytest.param(filesystem(storageClass="fast.ssd", size="1.5Ti"), id="storageClass"),
        pytest.param(object_storage(bucketClaim="b", bucketAccess="a", chunkSize=5 * 1024 * 1024), id="cosi-claim"),
        pytest.param(object_storage(**BUCKET), id="cosi-classes"),
        pytest.param(registry(redis=REDIS, config={"storage": {"inmemory": {}, "cache": {"blobdescriptor": "redis"}}}),
                     id="redis-cache"),
        pytest.param(registry(http={"addr": "[::1]:5000", "host": "https://r.example.com/", "drainTimeout": "1m30s"}),
                     id="http"),
        pytest.param(registry(resources={"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"cpu": "2"}}),
                     id="resources"),
        pytest.param(registry(validation={"manifests": {"urls": {"allow": ["^https://([a-z]+\\.)?example\\.com/"]}}}),
                     id="regex"),
        pytest.param(registry(health={"tcp": [{"addr": "redis:6379", "timeout": "500ms"}]}), id="tcp"),
        pytest.param(registry(http={"drainTimeout": "0"}), id="zero-duration"),
        pytest.param(registry(http={"drainTimeout": "2µs"}), id="micro-sign"),
        pytest.param(registry(http={"drainTimeout": "999999h59m59.999s"}), id="longest-hours"),
        pytest.param(registry(http={"drainTimeout": "1h2m3s4ms5us6ns"}), id="every-unit"),
        pytest.param(object_storage(**BUCKET, chunkSize=5 * 1024**3), id="chunkSize-5GiB"),
        pytest.param(registry(redis={**REDIS, "db": 15, "pool": {"maxactive": 10000, "maxidle": 10000}}),
                     id="redis-pool-at-bound"),
        pytest.param(collected(schedule="0 3 * * sun", deleteUntagged=True, dryRun=True, readOnlyTimeout="1h30m"),
                     id="gc"),
        pytest.param(collected(schedule="*/30 1-5/2 1,15 JAN-jun Mon-Fri"), id="gc-cron"),
        pytest.param(collected(), id="gc-defaults"),
        pytest.param(auth(token=TOKEN), id="token-bundle"),
        pytest.param(auth("registry:2.8.2", token={**TOKEN, "autoRedirect": True}), id="token-on-2.8"),
        pytest.param(auth(token={**TOKEN, "rootCertBundle": {"secret": {"name": "trust", "field": "ca.crt"}},
                                 "jwks": BUNDLE, "signingAlgorithms": ["RS256", "ES256"],
                                 "autoRedirect": True, "autoRedirectPath": "/auth/token"}), id="token-3.x"),
        pytest.param(auth("registry:2@sha256:" + "a" * 64, token=TOKEN), id="token-digest"),
        pytest.param(auth("registry:20", token={**TOKEN, "jwks": BUNDLE}), id="jwks-on-tag-20"),
        pytest.param(auth(silly={"realm": "test", "service": "test"}), id="silly"),
        pytest.param(registry(networkPolicy={}), id="network-policy-empty"),
        pytest.param(registry(networkPolicy={
            "from": [{"podSelector": {}}, {"namespaceSelector": {}, "podSelector": {"matchLabels": {"a": "b"}}},
                     {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}, {"ipBlock": {"cidr": "fd00::/8"}}],
            "metricsFrom": [{"namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring"]}]}}]}),
            id="network-policy-every-peer"),
    ],
)
def test_valid_registry_is_accepted_by_model_and_crd(document: dict[str, Any]) -> None:
    Registry.model_validate(document)
    assert admit(document) == []
