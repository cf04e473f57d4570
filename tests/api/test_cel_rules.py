"""The CRD's CEL rules and the models' cross-field validators agree, on every combination that matters.

The rules are evaluated with cel-python on the object the API server would see (after its defaulting), and
the verdict is compared with pydantic's, so neither can drift from the other unnoticed.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pydantic import ValidationError

from api.admission import apply_defaults, cel_problems, crd_schema, evaluate_rule
from berth_api import Registry, describe_validation_error

BACKENDS = ("filesystem", "objectStorage", "inmemory")
# Each backend's possible shapes, valid and not: which of the either-or fields are set.
FILESYSTEM_SHAPES = [
    {k: v for k, v in (("persistentVolumeClaim", "data"), ("storageClass", "standard")) if k in chosen}
    for chosen in [(), ("persistentVolumeClaim",), ("storageClass",), ("persistentVolumeClaim", "storageClass")]
]
BUCKET_FIELDS = {"bucketClaim": "claim", "bucketClass": "s3", "bucketAccess": "access", "bucketAccessClass": "rw"}
OBJECT_STORAGE_SHAPES = [
    {field: BUCKET_FIELDS[field] for field in chosen}
    for size in range(len(BUCKET_FIELDS) + 1)
    for chosen in itertools.combinations(BUCKET_FIELDS, size)
]


def storage_documents() -> list[dict[str, Any]]:
    documents = []
    for size in range(len(BACKENDS) + 1):
        for backends in itertools.combinations(BACKENDS, size):
            shapes = [FILESYSTEM_SHAPES if b == "filesystem" else OBJECT_STORAGE_SHAPES if b == "objectStorage"
                      else [{}] for b in backends]
            for chosen in itertools.product(*shapes):
                documents.append({"config": {"storage": dict(zip(backends, chosen))}})
    return documents


def cache_documents() -> list[dict[str, Any]]:
    redis = {"secret": {"name": "redis", "field": "url"}}
    documents = []
    for cache, with_redis in itertools.product([None, "inmemory", "redis"], [False, True]):
        storage: dict[str, Any] = {"inmemory": {}}
        if cache:
            storage["cache"] = {"blobdescriptor": cache}
        documents.append({"config": {"storage": storage}, **({"redis": redis} if with_redis else {})})
    return documents


def gc_documents() -> list[dict[str, Any]]:
    """readOnlyTimeout at, inside and outside its bounds (a rule on one field, checked the same both ways), on
    storage GC can reach."""
    values = ["59s", "1m", "60s", "10m", "1h30m", "24h", "23h60m", "24h1s", "25h", "1440m", "1441m"]
    return [{"config": {"storage": {"filesystem": {"storageClass": "standard"}}},
             "garbageCollection": {"readOnlyTimeout": value}} for value in values]


def gc_storage_documents() -> list[dict[str, Any]]:
    """garbageCollection absent, empty or set, on each backend (in-memory storage cannot be collected)."""
    backends = {"filesystem": {"storageClass": "standard"}, "objectStorage": {"bucketClass": "s3",
                "bucketAccessClass": "rw"}, "inmemory": {}}
    return [{"config": {"storage": {backend: shape}}, **({"garbageCollection": gc} if gc is not None else {})}
            for backend, shape in backends.items() for gc in (None, {}, {"schedule": "0 3 * * *"})]


def _auth_at(place: str, auth: dict[str, Any]) -> dict[str, Any]:
    """spec.config with `auth` at spec.config.auth ("config") or spec.config.storage.auth ("storage")."""
    if place == "config":
        return {"storage": {"inmemory": {}}, "auth": auth}
    return {"storage": {"inmemory": {}, "auth": auth}}


def auth_documents() -> list[dict[str, Any]]:
    """Each subset of the providers, at each of the two places; token with and without trust and each
    3.x-only field, on images and explicit distributions of both majors; both places at once."""
    token = {"realm": "https://a.example/token", "service": "s", "issuer": "i"}
    trust = {"configMap": {"name": "trust", "field": "ca.pem"}}
    providers = {"htpasswd": {"secret": {"name": "users", "field": "htpasswd"}},
                 "token": {**token, "rootCertBundle": trust}, "silly": {"realm": "r", "service": "s"}}
    documents = []
    for place in ("config", "storage"):
        for size in range(len(providers) + 1):
            for chosen in itertools.combinations(providers, size):
                documents.append({"config": _auth_at(place, {p: providers[p] for p in chosen})})
    tokens = [token, {**token, "jwks": trust}, {**token, "rootCertBundle": trust, "signingAlgorithms": ["RS256"]},
              {**token, "rootCertBundle": trust, "autoRedirectPath": "/t"}, {**token, "rootCertBundle": trust}]
    where = [{"image": "registry:2"}, {"image": "registry:3"}, {"image": "r.example:5000/registry:v2.8.3"},
             {"image": "registry:2", "distribution": "3"}, {"image": "registry:3", "distribution": "2"},
             {"image": "registry@sha256:" + "a" * 64}]
    for place in ("config", "storage"):
        for shape, extra in itertools.product(tokens, where):
            documents.append({**extra, "config": _auth_at(place, {"token": shape})})
    # Both places: refused only when both name a provider (an empty auth object names none).
    for top, under in itertools.product([{}, *({p: v} for p, v in providers.items())], repeat=2):
        documents.append({"config": {"storage": {"inmemory": {}, "auth": under}, "auth": top}})
    return documents


def proxy_documents() -> list[dict[str, Any]]:
    """spec.config.proxy with and without credentials and each 3.x-only field, on both majors; with and without
    garbageCollection (refused on a proxy)."""
    base = {"remoteURL": "https://registry-1.docker.io", "credentials": {"secretName": "hub"}}
    shapes = [base, {"remoteURL": "https://ghcr.io"}, {**base, "ttl": "0"}, {**base, "ttl": "72h"},
              {**base, "cacheWriteTimeout": "30s"}, {**base, "ttl": "1h", "cacheWriteTimeout": "1m"}]
    where = [{"image": "registry:2"}, {"image": "registry:3"}, {"image": "registry:3", "distribution": "2"},
             {"image": "registry:2", "distribution": "3"}]
    storage = {"filesystem": {"storageClass": "standard"}}
    documents = [{**extra, "config": {"storage": storage, "proxy": shape}}
                 for shape, extra in itertools.product(shapes, where)]
    for gc in (None, {}, {"schedule": "0 3 * * *"}):
        documents.append({"config": {"storage": storage, "proxy": base},
                          **({"garbageCollection": gc} if gc is not None else {})})
    return documents


def notifications_documents() -> list[dict[str, Any]]:
    """spec.config.notifications: header sources, the Secret, duplicate names, and the 3.x-only fields
    on both majors."""
    endpoint = {"name": "scan", "url": "https://hooks.example.com/events"}
    token = {"name": "Authorization", "secretKey": "token"}
    shapes = [
        {"endpoints": [endpoint]},
        {"secretName": "hooks", "endpoints": [{**endpoint, "headers": [token]}]},
        {"endpoints": [{**endpoint, "headers": [token]}]},  # secretKey without the Secret
        {"secretName": "hooks", "endpoints": [{**endpoint, "headers": [{"name": "X-A"}]}]},  # no source
        {"secretName": "hooks", "endpoints": [{**endpoint, "headers": [{**token, "value": "v"}]}]},  # both
        {"endpoints": [endpoint, {**endpoint, "url": "http://other/"}]},  # the same name twice
        {"endpoints": [endpoint, {**endpoint, "name": "audit"}]},
        {"endpoints": [{**endpoint, "ignoredMediaTypes": ["application/octet-stream"], "threshold": 5,
                        "timeout": "500ms", "backoff": "2s"}]},
        {"endpoints": [{**endpoint, "ignore": {"actions": ["pull"]}}]},
        {"endpoints": [endpoint], "events": {"includeReferences": True}},
    ]
    where = [{"image": "registry:2"}, {"image": "registry:3"}, {"image": "registry:3", "distribution": "2"}]
    storage = {"inmemory": {}}
    return [{**extra, "config": {"storage": storage, "notifications": shape}}
            for shape, extra in itertools.product(shapes, where)]


def cloud_storage_documents() -> list[dict[str, Any]]:
    """spec.config.storage.azure and .gcs: each credentials type with and without its Secret and IDs,
    realm and serviceURL together, chunk sizes off the 256 KiB step, and both on Distribution 2 (refused)."""
    secret = {"name": "azure", "field": "accountKey"}
    ids = {"tenantID": "00000000-0000-0000-0000-000000000001", "clientID": "00000000-0000-0000-0000-000000000002"}
    azure_credentials = [{"type": kind, **extra} for kind in ("shared_key", "client_secret", "default_credentials")
                         for extra in ({}, {"secret": secret}, ids, {"secret": secret, **ids})]
    azure_base = {"accountName": "berthdata", "container": "registry"}
    azure = [{**azure_base, "credentials": creds} for creds in azure_credentials]
    azure += [{**azure_base, "credentials": {"type": "default_credentials"}, **where} for where in (
        {"realm": "core.chinacloudapi.cn"}, {"serviceURL": "http://127.0.0.1:10000/berthdata"},
        {"realm": "core.windows.net", "serviceURL": "https://berthdata.blob.core.windows.net"})]
    key = {"name": "gcs", "field": "key.json"}
    gcs = [{"bucket": "berth-registry", "credentials": creds, **chunk}
           for creds in ({"type": "key", "secret": key}, {"type": "key"}, {"type": "default_credentials"},
                         {"type": "default_credentials", "secret": key})
           for chunk in ({}, {"chunkSize": 262144}, {"chunkSize": 16777216}, {"chunkSize": 300000})]
    where = [{"image": "registry:3"}, {"image": "registry:2.8.3"}, {"image": "registry:3", "distribution": "2"}]
    documents = [{**extra, "config": {"storage": {"azure": shape}}} for shape in azure for extra in where[:1]]
    documents += [{**extra, "config": {"storage": {"gcs": shape}}} for shape in gcs for extra in where[:1]]
    documents += [{**extra, "config": {"storage": {backend: shapes[0]}}} for extra in where
                  for backend, shapes in (("azure", azure[1:]), ("gcs", gcs))]
    documents.append({"config": {"storage": {"azure": azure[1], "gcs": gcs[0]}}})  # two backends
    return documents


def s3_documents() -> list[dict[str, Any]]:
    """spec.config.storage.s3 and the S3 options on s3 and objectStorage: each 3-only option, storage
    classes of 2 and of 3 only, keyId with and without encrypt, forcePathStyle with and without an endpoint, keys
    and the pod's identity, on Distribution 3 and 2."""
    keys = {"credentials": {"secretName": "s3-keys"}}
    base = {"bucket": "registry-data", **keys}
    options = [{}, {"useDualStack": True}, {"accelerate": False}, {"logLevel": "debug"},
               {"storageClass": "REDUCED_REDUNDANCY"}, {"storageClass": "GLACIER_IR"}, {"keyId": "k"},
               {"encrypt": True, "keyId": "k"}, {"encrypt": False, "keyId": "k"}, {"skipVerify": True},
               {"chunkSize": 5242880, "multipartCopyThresholdSize": 0, "multipartCopyMaxConcurrency": 1}]
    shapes = [{**base, **option} for option in options]
    shapes += [{"bucket": "registry-data"}, {**base, "forcePathStyle": True},
               {**base, "forcePathStyle": False, "regionEndpoint": "https://minio.example:9000"},
               {**base, "forcePathStyle": True, "regionEndpoint": "https://minio.example:9000"}]
    cosi = {"bucketClaim": "claim", "bucketAccess": "access"}
    where = [{"image": "registry:3"}, {"image": "registry:2.8.3"}]
    documents = [{**extra, "config": {"storage": {"s3": shape}}} for shape in shapes for extra in where]
    documents += [{**extra, "config": {"storage": {"objectStorage": {**cosi, **option}}}}
                  for option in options for extra in where]
    documents.append({"config": {"storage": {"s3": base, "inmemory": {}}}})  # two backends
    return documents


def exposure_documents() -> list[dict[str, Any]]:
    """spec.service, spec.ingress.tls and spec.http.tls: each Service type with each type-bound field,
    TLS from a Secret, an issuer, both or neither, dnsNames with and without an issuer."""
    storage = {"inmemory": {}}
    services = [{"type": kind, **extra} for kind in (None, "ClusterIP", "NodePort", "LoadBalancer")
                for extra in ({}, {"nodePort": 30500}, {"loadBalancerClass": "example.com/lb"},
                              {"externalTrafficPolicy": "Local"})]
    services = [{k: v for k, v in shape.items() if v is not None} for shape in services]
    issuer = {"name": "ca", "kind": "ClusterIssuer"}
    sources = [{"secretName": "tls"}, {"issuerRef": issuer}, {"secretName": "tls", "issuerRef": issuer}, {}]
    tls = sources + [{**source, "dnsNames": ["registry.example.com"]} for source in sources[:2]]
    documents = [{"config": {"storage": storage}, "service": shape} for shape in services]
    documents += [{"config": {"storage": storage}, "http": {"tls": shape}} for shape in tls]
    documents += [{"config": {"storage": storage}, "ingress": {"hosts": ["r.example.com"], "tls": shape}}
                  for shape in sources]
    return documents


SPECS = (auth_documents() + storage_documents() + cache_documents() + gc_documents() + gc_storage_documents()
         + proxy_documents() + notifications_documents() + cloud_storage_documents() + exposure_documents()
         + s3_documents())


def model_problems(document: dict[str, Any]) -> set[tuple[str, str]]:
    try:
        Registry.model_validate(document)
    except ValidationError as exc:
        return {tuple(line.split(": ", 1)) for line in describe_validation_error(exc).split("; ")}
    return set()


def test_the_combinations_cover_valid_and_invalid() -> None:
    verdicts = [not model_problems({"spec": spec}) for spec in SPECS]
    assert len(SPECS) > 150
    assert verdicts.count(True) >= 10 and verdicts.count(False) >= 100


@pytest.mark.parametrize("spec", SPECS, ids=[str(i) for i in range(len(SPECS))])
def test_cel_and_model_agree(spec: dict[str, Any]) -> None:
    document = {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "spec": spec}
    by_model = model_problems(document)
    schema = crd_schema()
    by_cel = set(cel_problems(apply_defaults(document, schema), schema))
    assert bool(by_model) == bool(by_cel), f"model says {by_model}, CEL says {by_cel}"
    # pydantic stops at the innermost failing validator; CEL evaluates every rule. The model's complaints
    # are therefore among CEL's, same path and same message.
    assert by_model <= by_cel


def test_gc_on_in_memory_storage_is_the_only_gc_storage_refused() -> None:
    verdicts = {(next(iter(spec["config"]["storage"])), "garbageCollection" in spec):
                not model_problems({"spec": spec}) for spec in gc_storage_documents()}
    assert verdicts == {("filesystem", False): True, ("filesystem", True): True, ("objectStorage", False): True,
                        ("objectStorage", True): True, ("inmemory", False): True, ("inmemory", True): False}
    bounds = [not model_problems({"spec": spec}) for spec in gc_documents()]
    assert bounds.count(True) >= 5 and bounds.count(False) >= 4  # the timeout bounds decide, not the storage


def test_rules_see_absent_and_empty_differently() -> None:
    """`inmemory: {}` counts as a backend (has() is true for an empty object), as in the model."""
    rule = crd_schema()["properties"]["spec"]["properties"]["config"]["properties"]["storage"][
        "x-kubernetes-validations"][0]["rule"]
    assert evaluate_rule(rule, {"inmemory": {}})
    assert not evaluate_rule(rule, {})
    assert not evaluate_rule(rule, {"inmemory": {}, "filesystem": {"storageClass": "standard"}})


def test_proxy_refusals_name_the_field() -> None:
    """ttl and cacheWriteTimeout only on Distribution 3; garbageCollection never on a proxy
    (docs/decisions/0021-no-garbage-collection-on-a-proxy.md)."""
    verdicts = {}
    for spec in proxy_documents():
        problems = model_problems({"spec": spec})
        key = (spec.get("distribution") or spec.get("image", "registry:3")[-1], tuple(sorted(spec["config"]["proxy"])),
               "garbageCollection" in spec)
        verdicts[key] = sorted(message for _, message in problems)
    assert verdicts[("2", ("credentials", "remoteURL"), False)] == []
    assert verdicts[("3", ("credentials", "remoteURL", "ttl"), False)] == []
    assert verdicts[("2", ("credentials", "remoteURL", "ttl"), False)] == [
        "config.proxy.ttl needs Distribution 3, and this registry runs Distribution 2 (spec.distribution, else the "
        "image tag)"]
    assert any("config.proxy.cacheWriteTimeout needs Distribution 3" in m
               for m in verdicts[("2", ("cacheWriteTimeout", "credentials", "remoteURL"), False)])
    (gc_refusal,) = verdicts[("3", ("credentials", "remoteURL"), True)]
    assert gc_refusal.startswith("garbageCollection cannot run on a pull-through cache (config.proxy)")


def test_notification_refusals_name_the_field() -> None:
    verdicts = [sorted(message for _, message in model_problems({"spec": spec})) for spec in notifications_documents()]
    assert verdicts[0] == verdicts[1] == verdicts[2] == []  # plain, on every major
    assert verdicts[3:6] == [["a header takes exactly one of value and secretKey"]] * 0 + verdicts[3:6]
    assert verdicts[6] == ["a header with secretKey needs config.notifications.secretName"]
    assert verdicts[15] == ["config.notifications.endpoints: each name once"]
    assert verdicts[24] == ["config.notifications.endpoints[].ignore needs Distribution 3, and this registry runs "
                            "Distribution 2 (spec.distribution, else the image tag)"]
    assert verdicts[25] == [] and verdicts[28] == []
    assert verdicts[27] == ["config.notifications.events.includeReferences needs Distribution 3, and this registry "
                            "runs Distribution 2 (spec.distribution, else the image tag)"]


def test_cloud_storage_refusals_name_the_field() -> None:
    """Each azure/gcs refusal names the field; both are refused on Distribution 2 naming the backend."""
    verdicts = [model_problems({"spec": spec}) for spec in cloud_storage_documents()]
    valid = [spec for spec, problems in zip(cloud_storage_documents(), verdicts) if not problems]
    assert len(valid) >= 8
    messages = {message for problems in verdicts for _, message in problems}
    assert "config.storage.azure needs Distribution 3, and this registry runs Distribution 2 (spec.distribution, " \
           "else the image tag)" in messages
    assert any(m.startswith("config.storage.gcs needs Distribution 3") for m in messages)
    assert "set realm or serviceURL, not both" in messages
    assert "client_secret needs tenantID and clientID, and only client_secret takes them" in messages
    assert "chunkSize must be a multiple of 262144 (256 KiB)" in messages
