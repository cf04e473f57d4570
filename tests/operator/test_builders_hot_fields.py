"""The Deployment depends only on what needs a pod change.

The walk enumerates every field of the Registry spec from the pydantic models, changes each to other valid
values (validated by the models themselves) and proves the Deployment stays byte-identical, except for the
explicit list of pod-shaping fields, each of which is proved to change it. A field added to the models later is
walked automatically; if no candidate value fits its type, the coverage test fails and names it.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from pydantic import BaseModel

from berth_api import Registry, RegistrySpec
from berth_operator.builders import ClusterFacts, deployment

AGENT_IMAGE = "ghcr.io/berth-dev/berth:0.1.0"

# The two places auth may be written (berth_api.auth).
AUTH_PLACES = ("config.storage.auth", "config.auth")
# Spec paths (API names, list items as "*") whose change must change the Deployment, given the same ClusterFacts.
POD_SHAPING = {
    "image",
    "replicas",
    "rollout.progressDeadlineSeconds",  # the Deployment's, outside its template: never rolls (test_builders_deployment)
    "resources.requests",
    "resources.limits",
    "config.storage.filesystem.persistentVolumeClaim",
    "http.addr",  # the port only; its host part is applied hot (test_http_addr_host_is_hot)
    "http.secret.name",
    "http.tls.secretName",
    "redis.secret.name",
    "config.proxy.credentials.secretName",  # the upstream credentials' Secret volume
    "config.notifications.secretName",  # the notification headers' Secret volume
    "config.storage.azure.credentials.secret.name",  # the azure credentials' Secret volume
    "config.storage.gcs.credentials.secret.name",  # the gcs key's Secret volume
    "config.storage.s3.credentials.secretName",  # storage.s3's key Secret volume
    *(f"config.storage.s3.ca.{kind}.name" for kind in ("secret", "configMap")),  # the CA's volume
    # Never valid alone: to or from default_credentials the Secret (its volume) comes or goes with it. Between
    # shared_key and client_secret (the IDs come or go) the volume stays, which the walk cannot reach.
    "config.storage.azure.credentials.type", "config.storage.gcs.credentials.type",
    # Auth, at either of its two places (berth_api.auth): the htpasswd Secret's volume, and token auth's trust
    # volumes: which object each is (a Secret or a ConfigMap volume), not the key read.
    *(f"{auth}.htpasswd.secret.name" for auth in AUTH_PLACES),
    *(f"{auth}.token.{field}.{kind}.name" for auth in AUTH_PLACES for field in ("rootCertBundle", "jwks")
      for kind in ("secret", "configMap")),
}
# every field of these shapes the pod (spec.serviceAccount too: the EKS and AKS webhooks inject the identity
# when a pod is made). test_pod_overrides_change_the_deployment checks every change of each, from POD_FULL.
POD_SHAPING_PREFIXES = ("pod", "env", "serviceAccount")
# Optional sections whose presence shapes the pod (a Secret volume, the claim); others are hot when toggled.
POD_SHAPING_SECTIONS = {
    "http.secret", "http.tls", "redis",
    "config.storage.filesystem", "config.storage.objectStorage", "config.storage.inmemory",
    *(f"{auth}.{section}" for auth in AUTH_PLACES
      for section in ("htpasswd", "token", "token.jwks", "token.rootCertBundle")),
    *(f"{auth}.token.{field}.{kind}" for auth in AUTH_PLACES for field in ("rootCertBundle", "jwks")
      for kind in ("secret", "configMap")),
    "config.proxy", "config.proxy.credentials",  # with credentials: their Secret volume
    "config.notifications",  # with secretName: its Secret volume
    "config.storage.azure", "config.storage.gcs",  # with a Secret: its volume
    "config.storage.azure.credentials.secret", "config.storage.gcs.credentials.secret",
    # storage.s3: with credentials their Secret volume; the CA its volume and the registry's SSL_CERT_DIR
    "config.storage.s3", "config.storage.s3.credentials", "config.storage.s3.ca",
    "config.storage.s3.ca.secret", "config.storage.s3.ca.configMap",
    "config.auth",  # removing it (with a provider in it) removes that provider's volumes, as for each provider
}

_FULL_OPTIONS = {
    "distribution": "3",
    "config": {
        "log": {"level": "warn"},
        "storage": {
            "delete": {"enabled": True},
            "redirect": {"disabled": True},
            "cache": {"blobdescriptor": "redis", "blobdescriptorsize": 1000},
            "maintenance": {
                "uploadpurging": {"enabled": True, "age": "72h", "interval": "12h", "dryrun": False},
                "readonly": {"enabled": False},
            },
            "auth": {"htpasswd": {"secret": {"name": "users", "field": "htpasswd"}}},
        },
    },
    "http": {
        "addr": ":5000",
        "host": "https://registry.example.com",
        "secret": {"name": "upload-signing", "field": "key"},
        "relativeURLs": False,
        "drainTimeout": "30s",
        "http2": {"disabled": False},
        "h2c": {"enabled": False},
        "tls": {"secretName": "registry-tls"},
    },
    "redis": {
        "secret": {"name": "redis-url", "field": "url"},
        "db": 1,
        "dialtimeout": "1s",
        "readtimeout": "2s",
        "writetimeout": "2s",
        "pool": {"maxidle": 4, "maxactive": 16, "idletimeout": "5m"},
        "tls": {"enabled": False},
    },
    "health": {
        "storagedriver": {"enabled": True, "interval": "10s", "threshold": 3},
        "tcp": [{"addr": "redis.example:6379", "timeout": "3s", "interval": "10s", "threshold": 3}],
    },
    "validation": {"manifests": {"urls": {"allow": ["^https://layers\\.example/"], "deny": ["^http://"]}}},
    # Garbage collection runs inside the pods (docs/decisions/0019-garbage-collection-inside-the-pods.md): none of its
    # fields may touch the Deployment.
    "garbageCollection": {"schedule": "0 3 * * sun", "deleteUntagged": False, "dryRun": False,
                          "readOnlyTimeout": "10m"},
}


_TOKEN = {"realm": "https://auth.example.com/token", "service": "registry", "issuer": "auth", "autoRedirect": False,
          "signingAlgorithms": ["RS256"], "autoRedirectPath": "/auth/token"}


def _with_storage(backend: dict[str, Any], auth: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    spec = copy.deepcopy(_FULL_OPTIONS)
    spec["config"]["storage"].update(backend)
    if auth is not None:
        spec["config"]["storage"]["auth"] = auth
    if "inmemory" in backend:
        del spec["garbageCollection"]  # an in-memory store cannot be collected (berth_api.GC_STORAGE_MESSAGE)
    spec.update(top)
    return spec


def _with_proxy(proxy: dict[str, Any]) -> dict[str, Any]:
    spec = _with_storage({"filesystem": {"storageClass": "standard"}})
    spec["config"]["proxy"] = proxy
    del spec["garbageCollection"]  # refused on a pull-through cache (berth_api.GC_PROXY_MESSAGE)
    return spec


def _with_notifications() -> dict[str, Any]:
    """Webhook notifications and a ServiceMonitor: only the headers' Secret shapes the pod."""
    spec = _with_storage({"filesystem": {"storageClass": "standard"}})
    spec["config"]["notifications"] = {
        "secretName": "hooks", "events": {"includeReferences": False},
        "endpoints": [{"name": "scan", "url": "https://hooks.example.com/events", "disabled": False,
                       "headers": [{"name": "Authorization", "secretKey": "token"}, {"name": "X-A", "value": "a"}],
                       "timeout": "2s", "threshold": 5, "backoff": "3s", "ignoredMediaTypes": ["a/b"],
                       "ignore": {"mediaTypes": ["c/d"], "actions": ["pull"]}},
                      {"name": "audit", "url": "http://audit.example/"}]}
    spec["monitoring"] = {"serviceMonitor": {"labels": {"release": "kps"}, "interval": "15s"}}
    return spec


def _exposed(tls: dict[str, Any], ingress_tls: dict[str, Any]) -> dict[str, Any]:
    """Reached from outside: a LoadBalancer Service with every field, an Ingress, an HTTPRoute. None
    of them shapes the pod; a TLS certificate from an issuer mounts the Certificate's Secret (its name fixed)."""
    spec = _with_storage({"inmemory": {}})
    spec["http"]["tls"] = tls
    spec["service"] = {"type": "LoadBalancer", "nodePort": 30500, "loadBalancerClass": "example.com/lb",
                       "externalTrafficPolicy": "Local", "annotations": {"a.example.com/x": "1"},
                       "labels": {"team": "platform"}}
    spec["ingress"] = {"className": "nginx", "hosts": ["registry.example.com"],
                       "annotations": {"a.example.com/y": "2"}, "tls": ingress_tls}
    spec["gateway"] = {"parentRefs": [{"name": "public", "namespace": "gateways", "sectionName": "https",
                                       "port": 443, "group": "gateway.networking.k8s.io", "kind": "Gateway"}],
                       "hostnames": ["registry.example.com"]}
    return spec


_ISSUER = {"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}

# (id, spec, facts): together they reach every field of the models.
BASES = [
    ("filesystem-claim-rwx", _with_storage({"filesystem": {"persistentVolumeClaim": "shared"}}, replicas=2),
     ClusterFacts(AGENT_IMAGE, pvc_access_modes=("ReadWriteMany",))),
    ("filesystem-class", _with_storage({"filesystem": {"storageClass": "standard", "size": "20Gi"}}),
     ClusterFacts(AGENT_IMAGE)),
    ("cosi-classes", _with_storage({"objectStorage": {"bucketClass": "s3", "bucketAccessClass": "rw",
                                                      "chunkSize": 10 * 1024 * 1024, "encrypt": True,
                                                      "keyId": "arn:aws:kms:k"}}, replicas=3),
     ClusterFacts(AGENT_IMAGE)),
    ("cosi-existing", _with_storage({"objectStorage": {"bucketClaim": "c", "bucketAccess": "a"}}),
     ClusterFacts(AGENT_IMAGE, bucket_access_secret="a-credentials")),
    ("inmemory", _with_storage({"inmemory": {}}), ClusterFacts(AGENT_IMAGE)),
    ("token-configmap-bundle", _with_storage({"inmemory": {}}, {"token": {
        **_TOKEN, "rootCertBundle": {"configMap": {"name": "trust", "field": "ca.pem"}},
        "jwks": {"secret": {"name": "keys", "field": "jwks.json"}}}}), ClusterFacts(AGENT_IMAGE)),
    ("token-secret-bundle", _with_storage({"inmemory": {}}, {"token": {
        **_TOKEN, "rootCertBundle": {"secret": {"name": "trust", "field": "ca.pem"}},
        "jwks": {"configMap": {"name": "keys", "field": "jwks.json"}}}}), ClusterFacts(AGENT_IMAGE)),
    ("silly", _with_storage({"inmemory": {}}, {"silly": {"realm": "r", "service": "s"}}), ClusterFacts(AGENT_IMAGE)),
    ("proxy", _with_proxy({"remoteURL": "https://registry-1.docker.io", "credentials": {"secretName": "hub"},
                           "ttl": "72h", "cacheWriteTimeout": "1m"}), ClusterFacts(AGENT_IMAGE)),
    ("notifications", _with_notifications(), ClusterFacts(AGENT_IMAGE)),
    ("azure-shared-key", _with_storage({"azure": {
        "accountName": "berthdata", "container": "registry", "realm": "core.windows.net", "rootDirectory": "reg",
        "maxRetries": 3, "retryDelay": "250ms",
        "credentials": {"type": "shared_key", "secret": {"name": "azure", "field": "accountKey"}}}}, replicas=2),
     ClusterFacts(AGENT_IMAGE)),
    ("azure-client-secret", _with_storage({"azure": {
        "accountName": "berthdata", "container": "registry", "serviceURL": "https://berthdata.blob.example",
        "credentials": {"type": "client_secret", "secret": {"name": "entra", "field": "secret"},
                        "tenantID": "00000000-0000-0000-0000-000000000001",
                        "clientID": "00000000-0000-0000-0000-000000000002"}}}), ClusterFacts(AGENT_IMAGE)),
    ("azure-default", _with_storage({"azure": {"accountName": "berthdata", "container": "registry",
                                               "credentials": {"type": "default_credentials"}}}),
     ClusterFacts(AGENT_IMAGE)),
    ("gcs-key", _with_storage({"gcs": {
        "bucket": "berth-registry", "rootDirectory": "reg", "chunkSize": 524288,
        "credentials": {"type": "key", "secret": {"name": "gcs", "field": "key.json"}}}}, replicas=2),
     ClusterFacts(AGENT_IMAGE)),
    ("exposed-issuers", _exposed({"issuerRef": _ISSUER, "dnsNames": ["registry.example.com"]},
                                 {"issuerRef": _ISSUER}), ClusterFacts(AGENT_IMAGE)),
    ("exposed-secrets", _exposed({"secretName": "registry-tls"}, {"secretName": "ingress-tls"}),
     ClusterFacts(AGENT_IMAGE)),
    ("gcs-default", _with_storage({"gcs": {"bucket": "berth-registry",
                                           "credentials": {"type": "default_credentials"}}}),
     ClusterFacts(AGENT_IMAGE)),
    # storage.s3 with every option, keys from a Secret and a CA from a Secret; with the CA from a
    # ConfigMap and the pod's identity
    ("s3-secret", _with_storage({"s3": {
        "bucket": "registry-data", "region": "eu-west-1", "regionEndpoint": "https://minio.example:9000",
        "forcePathStyle": True, "credentials": {"secretName": "s3", "accessKeyIdKey": "id",
                                                "secretAccessKeyKey": "key"},
        "ca": {"secret": {"name": "s3-ca", "field": "ca.crt"}}, "encrypt": True, "keyId": "arn:aws:kms:k",
        "secure": True, "skipVerify": False, "v4auth": True, "chunkSize": 5242880,
        "multipartCopyChunkSize": 5242880, "multipartCopyMaxConcurrency": 4, "multipartCopyThresholdSize": 5242880,
        "rootDirectory": "reg", "storageClass": "STANDARD", "objectAcl": "private", "useDualStack": False,
        "accelerate": False, "logLevel": "off"}}, replicas=2), ClusterFacts(AGENT_IMAGE)),
    ("s3-identity", _with_storage({"s3": {"bucket": "registry-data",
                                          "ca": {"configMap": {"name": "s3-ca", "field": "ca.crt"}}}}),
     ClusterFacts(AGENT_IMAGE)),
]


_SELECTOR = {"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]}
_TERM = {"labelSelector": _SELECTOR, "namespaceSelector": _SELECTOR, "namespaces": ["a"], "topologyKey": "zone",
         "matchLabelKeys": ["app"], "mismatchLabelKeys": ["other"]}
_NODE_TERM = {"matchExpressions": [{"key": "node-role", "operator": "In", "values": ["infra"]}],
              "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}
# Every field of spec.pod, spec.env and spec.serviceAccount set (the walk then reaches each).
POD_FULL = _with_storage({"inmemory": {}}, pod={
    "labels": {"team": "a"}, "annotations": {"note": "n"}, "nodeSelector": {"node-role": "infra"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoExecute",
                     "tolerationSeconds": 60}, {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [_NODE_TERM]},
                         "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "preference": _NODE_TERM}]},
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_TERM],
                        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "podAffinityTerm": _TERM}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_TERM],
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {"weight": 9, "podAffinityTerm": _TERM}]}},
    "topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                   "labelSelector": _SELECTOR, "minDomains": 2, "nodeAffinityPolicy": "Honor",
                                   "nodeTaintsPolicy": "Ignore", "matchLabelKeys": ["pod-template-hash"]}],
    "priorityClassName": "infra", "imagePullSecrets": [{"name": "pull"}],
    "agentResources": {"requests": {"cpu": "20m"}, "limits": {"memory": "300Mi"}}},
    env=[{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
         {"name": "NO_PROXY", "valueFrom": {"configMapKeyRef": {"name": "proxy", "key": "no", "optional": True}}},
         {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}}],
    serviceAccount={"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/registry"}})
BASES.append(("pod-full", POD_FULL, ClusterFacts(AGENT_IMAGE)))
# spec.networkPolicy, every peer kind in both lists; none of it reaches the Deployment.
_PEERS = [{"namespaceSelector": _SELECTOR, "podSelector": _SELECTOR},
          {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}, {"ipBlock": {"cidr": "192.168.0.0/16"}}]
BASES.append(("network-policy", _with_storage({"inmemory": {}}, networkPolicy={"from": _PEERS, "metricsFrom": _PEERS}),
              ClusterFacts(AGENT_IMAGE)))


def _auth_at_top(spec: dict[str, Any]) -> dict[str, Any]:
    """The same spec with its auth at spec.config.auth instead of spec.config.storage.auth."""
    moved = copy.deepcopy(spec)
    moved["config"]["auth"] = moved["config"]["storage"].pop("auth")
    return moved


# The same bases with auth at spec.config.auth: the walk reaches its fields there too.
BASES += [(f"{base_id}-at-config-auth", _auth_at_top(spec), facts) for base_id, spec, facts in BASES
          if base_id in ("filesystem-claim-rwx", "token-configmap-bundle", "token-secret-bundle", "silly")]
TOP = {base_id: index for index, (base_id, _, _) in enumerate(BASES)}

# Values tried for a changed field; the models decide which are valid for it.
_STRING_CANDIDATES = [
    "17s", "1m30s", "7Gi", "https://other.example.net", "other-name", "other.key", "^https://other/.*$",
    "cache.example:6380", "[::1]:7000", "*/5 1-4 * jan,jul mon-fri",
    "berthother", "core.chinacloudapi.cn", "11111111-2222-3333-4444-555555555555",  # azure account, realm, IDs
    "10.9.0.0/16",  # a NetworkPolicy peer's ipBlock
]


def make(spec: dict[str, Any]) -> Registry:
    return Registry.model_validate({"metadata": {"name": "demo", "namespace": "ns", "uid": "u"}, "spec": spec})


def deployment_json(spec: dict[str, Any], facts: ClusterFacts) -> str:
    built = deployment.build(make(spec), facts)
    assert built is not None
    return json.dumps(built, sort_keys=True)


def _flatten(annotation: Any) -> list[Any]:
    """The concrete types inside Optional/Union/Annotated, with Literal kept whole."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _flatten(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _flatten(arg)]
    return [annotation]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for kind in _flatten(annotation):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
    return None


def _list_item_model(annotation: Any) -> type[BaseModel] | None:
    for kind in _flatten(annotation):
        if typing.get_origin(kind) is list:
            return _model_of(typing.get_args(kind)[0])
    return None


def _optional(field: pydantic.fields.FieldInfo) -> bool:
    return type(None) in _flatten(field.annotation)


def class_leaves(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every leaf path of the models (no values needed): what the walk must cover."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        sub = _model_of(field.annotation)
        item = _list_item_model(field.annotation)
        if sub is not None:
            yield from class_leaves(sub, f"{path}.")
        elif item is not None:
            yield path
            yield from class_leaves(item, f"{path}.*.")
        else:
            yield path


def _candidates(annotation: Any, current: Any) -> list[Any]:
    found: list[Any] = []
    for kind in _flatten(annotation):
        origin = typing.get_origin(kind)
        if kind is type(None):
            found.append(None)
        elif kind is bool:
            found.append(not current)
        elif kind is int:
            found += [(current or 0) + 1, 1, 2, 6 * 1024 * 1024, 64 * 1024 * 1024]
        elif kind is str:
            found += _STRING_CANDIDATES
        elif origin is typing.Literal:
            found += list(typing.get_args(kind))
        elif origin is list:
            item = typing.get_args(kind)[0]
            current_list = current or []
            if current_list:
                found.append(current_list[:-1])
                found.append(current_list + [copy.deepcopy(current_list[0])])
            found += [current_list + [value] for value in _candidates(item, None) if value is not None][:3]
        elif origin is dict:
            found.append({**(current or {}), "cpu": "2"})
    return found


def walk(model: type[BaseModel], data: dict[str, Any], prefix: str = "", parent: tuple[str | int, ...] = ()
         ) -> Iterator[tuple[str, list[str | int], Any, Any, bool]]:
    """(normalised path, location in the spec dict, annotation, current value, is a section) for every field
    present in `data` (a by-alias dump, so defaults are filled in)."""
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = f"{prefix}{key}"
        value = data.get(key)
        location = [*parent, key]
        sub = _model_of(field.annotation)
        item = _list_item_model(field.annotation)
        if sub is not None:
            if value is None:
                continue
            if _optional(field):
                yield path, location, None, value, True
            yield from walk(sub, value, f"{path}.", tuple(location))
        elif item is not None:
            yield path, location, field.annotation, value, False
            for index, element in enumerate(value or []):
                yield from walk(item, element, f"{path}.*.", (*location, index))
        else:
            yield path, location, field.annotation, value, False


def _set(spec: dict[str, Any], location: list[str | int], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(spec)
    target: Any = changed
    for step in location[:-1]:
        if isinstance(step, str):
            target = target.setdefault(step, {})
        else:
            target = target[step]
    if value is None and isinstance(location[-1], str):
        target.pop(location[-1], None)
    else:
        target[location[-1]] = value
    return changed


def mutations(spec: dict[str, Any]) -> Iterator[tuple[str, bool, dict[str, Any]]]:
    """(path, is a section, changed spec) for every valid change of every field present in the base."""
    base = make(spec).spec
    dumped = base.model_dump(by_alias=True, mode="json")
    for path, location, annotation, current, section in walk(RegistrySpec, dumped):
        values = [None] if section else _candidates(annotation, current)
        seen: list[Any] = []
        for value in values:
            if value == current or value in seen:
                continue
            changed = _set(dumped, location, value)
            try:
                changed_spec = make(changed).spec
            except pydantic.ValidationError:
                continue
            if changed_spec == base:
                continue
            seen.append(value)
            yield path, section, changed
            if len(seen) == 3:
                break


def test_hot_fields_leave_the_deployment_byte_identical():
    walked: set[str] = set()
    for base_id, spec, facts in BASES:
        before = deployment_json(spec, facts)
        for path, section, changed in mutations(spec):
            shaping = path in (POD_SHAPING_SECTIONS if section else POD_SHAPING)
            if shaping or path.startswith(POD_SHAPING_PREFIXES):
                continue
            walked.add(path)
            assert deployment_json(changed, facts) == before, f"{base_id}: changing spec.{path} changed the Deployment"
    # Not vacuous: the hot fields named in the issue were all walked.
    for path in [
        "config.log.level", "config.storage.delete.enabled", "config.storage.redirect.disabled",
        "config.storage.cache.blobdescriptor", "config.storage.maintenance.readonly.enabled",
        "config.storage.auth.htpasswd.secret.field", "http.host", "http.secret.field", "http.relativeURLs",
        "http.drainTimeout", "http.http2.disabled", "http.h2c.enabled", "redis.db", "redis.pool.maxidle",
        "redis.tls.enabled", "redis.secret.field", "health.storagedriver.enabled", "health.tcp", "health.tcp.*.addr",
        "validation.manifests.urls.allow", "config.storage.objectStorage.chunkSize", "distribution",
        "config.storage.cache",
        "garbageCollection", "garbageCollection.schedule", "garbageCollection.deleteUntagged",
        "garbageCollection.dryRun", "garbageCollection.readOnlyTimeout",
        "networkPolicy", "networkPolicy.from", "networkPolicy.from.*.ipBlock.cidr",
        "networkPolicy.metricsFrom.*.podSelector.matchLabels",
    ]:
        assert path in walked, path


def test_walk_covers_every_field_of_the_models():
    """A new field in the API is either walked (hot) or listed in POD_SHAPING, never silently skipped."""
    reached: set[str] = set()
    for _, spec, _ in BASES:
        reached |= {path for path, section, _ in mutations(spec) if not section}
    missing = sorted(set(class_leaves(RegistrySpec)) - reached - POD_SHAPING)
    assert all(path in reached for path in class_leaves(RegistrySpec) if path.startswith(POD_SHAPING_PREFIXES))
    assert missing == [], f"fields the walk could not change: {missing}"
    assert POD_SHAPING <= set(class_leaves(RegistrySpec)), "POD_SHAPING names a field the models do not have"


def test_pod_overrides_change_the_deployment():
    """Every valid change of every field of spec.pod, spec.env and spec.serviceAccount rolls the pods."""
    before = deployment_json(POD_FULL, ClusterFacts(AGENT_IMAGE))
    changed = 0
    for path, _section, spec in mutations(POD_FULL):
        if path.startswith(POD_SHAPING_PREFIXES):
            changed += 1
            assert deployment_json(spec, ClusterFacts(AGENT_IMAGE)) != before, f"changing spec.{path} rolled nothing"
    assert changed > 100, changed


def test_http_addr_host_is_hot():
    _, spec, facts = BASES[0]
    before = deployment_json(spec, facts)
    for addr in ("0.0.0.0:5000", "127.0.0.1:5000", "[::]:5000", "registry.local:5000"):
        assert deployment_json(_set(spec, ["http", "addr"], addr), facts) == before, addr


def _spec(base: int) -> dict[str, Any]:
    return copy.deepcopy(BASES[base][1])


# (the POD_SHAPING path or what else changes, spec before, facts before, spec after, facts after): each must
# change the Deployment.
POD_SHAPING_CHANGES = [
    ("image", _spec(0), BASES[0][2], _set(_spec(0), ["image"], "docker.io/library/registry:3.0.1"), BASES[0][2]),
    ("replicas", _spec(0), BASES[0][2], _set(_spec(0), ["replicas"], 3), BASES[0][2]),
    ("rollout.progressDeadlineSeconds", _spec(0), BASES[0][2],
     _set(_spec(0), ["rollout"], {"progressDeadlineSeconds": 60}), BASES[0][2]),
    ("resources.requests", _spec(0), BASES[0][2], _set(_spec(0), ["resources"], {"requests": {"cpu": "1"}}),
     BASES[0][2]),
    ("resources.limits", _spec(0), BASES[0][2], _set(_spec(0), ["resources"], {"limits": {"memory": "1Gi"}}),
     BASES[0][2]),
    ("config.storage.filesystem.persistentVolumeClaim", _spec(0), BASES[0][2],
     _set(_spec(0), ["config", "storage", "filesystem", "persistentVolumeClaim"], "other"), BASES[0][2]),
    ("http.addr", _spec(0), BASES[0][2], _set(_spec(0), ["http", "addr"], ":5001"), BASES[0][2]),
    ("http.secret.name", _spec(0), BASES[0][2], _set(_spec(0), ["http", "secret", "name"], "other"), BASES[0][2]),
    ("http.secret removed (generated)", _spec(0), BASES[0][2], _set(_spec(0), ["http", "secret"], None),
     BASES[0][2]),
    ("http.tls.secretName", _spec(0), BASES[0][2], _set(_spec(0), ["http", "tls", "secretName"], "other"),
     BASES[0][2]),
    ("http.tls removed", _spec(0), BASES[0][2], _set(_spec(0), ["http", "tls"], None), BASES[0][2]),
    ("redis.secret.name", _spec(0), BASES[0][2], _set(_spec(0), ["redis", "secret", "name"], "other"), BASES[0][2]),
    ("redis removed", _set(_spec(0), ["config", "storage", "cache"], None), BASES[0][2],
     _set(_set(_spec(0), ["config", "storage", "cache"], None), ["redis"], None), BASES[0][2]),
    ("config.storage.auth.htpasswd.secret.name", _spec(0), BASES[0][2],
     _set(_spec(0), ["config", "storage", "auth", "htpasswd", "secret", "name"], "other"), BASES[0][2]),
    ("htpasswd removed", _spec(0), BASES[0][2], _set(_spec(0), ["config", "storage", "auth"], {}), BASES[0][2]),
    ("claim -> storageClass", _spec(0), BASES[0][2], _spec(1), BASES[1][2]),
    ("filesystem -> objectStorage", _spec(1), BASES[1][2], _spec(2), BASES[2][2]),
    ("objectStorage -> inmemory", _spec(2), BASES[2][2], _spec(4), BASES[4][2]),
    ("bucketAccessClass -> existing bucketAccess", _spec(2), BASES[2][2],
     _set(_spec(2), ["config", "storage", "objectStorage"], {"bucketClass": "s3", "bucketAccess": "a"}), BASES[3][2]),
    ("existing bucketAccess names another Secret", _spec(3), BASES[3][2], _spec(3),
     ClusterFacts(AGENT_IMAGE, bucket_access_secret="rotated-credentials")),
    ("agent image (operator upgrade)", _spec(4), BASES[4][2], _spec(4), ClusterFacts("ghcr.io/berth-dev/berth:0.2.0")),
    *((f"config.storage.auth.token.{field}.{kind}.name", _spec(base), BASES[base][2],
       _set(_spec(base), ["config", "storage", "auth", "token", field, kind, "name"], "other"), BASES[base][2])
      for base, field, kind in ((5, "rootCertBundle", "configMap"), (5, "jwks", "secret"),
                                (6, "rootCertBundle", "secret"), (6, "jwks", "configMap"))),
    ("token trust ConfigMap -> Secret", _spec(5), BASES[5][2], _spec(6), BASES[6][2]),
    ("config.proxy.credentials.secretName", _spec(TOP["proxy"]), BASES[0][2],
     _set(_spec(TOP["proxy"]), ["config", "proxy", "credentials", "secretName"], "other"), BASES[0][2]),
    ("proxy credentials removed (anonymous upstream)", _spec(TOP["proxy"]), BASES[0][2],
     _set(_spec(TOP["proxy"]), ["config", "proxy", "credentials"], None), BASES[0][2]),
    ("config.auth.htpasswd.secret.name", _spec(TOP["filesystem-claim-rwx-at-config-auth"]), BASES[0][2],
     _set(_spec(TOP["filesystem-claim-rwx-at-config-auth"]), ["config", "auth", "htpasswd", "secret", "name"],
          "other"), BASES[0][2]),
    *((f"config.auth.token.{field}.{kind}.name", _spec(TOP[base]), BASES[5][2],
       _set(_spec(TOP[base]), ["config", "auth", "token", field, kind, "name"], "other"), BASES[5][2])
      for base, field, kind in (("token-configmap-bundle-at-config-auth", "rootCertBundle", "configMap"),
                                ("token-configmap-bundle-at-config-auth", "jwks", "secret"),
                                ("token-secret-bundle-at-config-auth", "rootCertBundle", "secret"),
                                ("token-secret-bundle-at-config-auth", "jwks", "configMap"))),
    ("token -> silly", _spec(5), BASES[5][2], _spec(7), BASES[7][2]),
    ("config.notifications.secretName", _spec(TOP["notifications"]), BASES[0][2],
     _set(_spec(TOP["notifications"]), ["config", "notifications", "secretName"], "other"), BASES[0][2]),
    *((f"config.storage.{backend}.credentials.secret.name", _spec(TOP[base]), BASES[0][2],
       _set(_spec(TOP[base]), ["config", "storage", backend, "credentials", "secret", "name"], "other"), BASES[0][2])
      for backend, base in (("azure", "azure-shared-key"), ("azure", "azure-client-secret"), ("gcs", "gcs-key"))),
    ("config.storage.azure.credentials.type", _spec(TOP["azure-shared-key"]), BASES[0][2],
     _set(_spec(TOP["azure-shared-key"]), ["config", "storage", "azure", "credentials"],
          {"type": "default_credentials"}), BASES[0][2]),
    ("config.storage.gcs.credentials.type", _spec(TOP["gcs-key"]), BASES[0][2],
     _set(_spec(TOP["gcs-key"]), ["config", "storage", "gcs", "credentials"], {"type": "default_credentials"}),
     BASES[0][2]),
    ("objectStorage -> azure", _spec(2), BASES[2][2], _spec(TOP["azure-shared-key"]), BASES[0][2]),
    ("config.storage.s3.credentials.secretName", _spec(TOP["s3-secret"]), BASES[0][2],
     _set(_spec(TOP["s3-secret"]), ["config", "storage", "s3", "credentials", "secretName"], "other"), BASES[0][2]),
    ("config.storage.s3.ca.secret.name", _spec(TOP["s3-secret"]), BASES[0][2],
     _set(_spec(TOP["s3-secret"]), ["config", "storage", "s3", "ca", "secret", "name"], "other"), BASES[0][2]),
    ("config.storage.s3.ca.configMap.name", _spec(TOP["s3-identity"]), BASES[0][2],
     _set(_spec(TOP["s3-identity"]), ["config", "storage", "s3", "ca", "configMap", "name"], "other"), BASES[0][2]),
]


@pytest.mark.parametrize("change", POD_SHAPING_CHANGES, ids=[c[0] for c in POD_SHAPING_CHANGES])
def test_pod_shaping_fields_change_the_deployment(change):
    _, before_spec, before_facts, after_spec, after_facts = change
    assert deployment_json(before_spec, before_facts) != deployment_json(after_spec, after_facts)


def test_every_pod_shaping_field_has_a_change():
    assert POD_SHAPING <= {change[0] for change in POD_SHAPING_CHANGES}


def test_scaling_does_not_change_the_pod_template():
    _, spec, facts = BASES[2]
    before = deployment.build(make(spec), facts)
    after = deployment.build(make(_set(spec, ["replicas"], 5)), facts)
    assert after["spec"]["replicas"] == 5
    assert json.dumps(after["spec"]["template"], sort_keys=True) == json.dumps(before["spec"]["template"],
                                                                                sort_keys=True)


@pytest.mark.parametrize("base_id", ["filesystem-claim-rwx", "token-configmap-bundle", "token-secret-bundle", "silly"])
def test_moving_auth_between_its_two_places_leaves_the_deployment_byte_identical(base_id):
    """spec.config.storage.auth -> spec.config.auth is an edit of where, not what: no pod is replaced."""
    _, spec, facts = BASES[TOP[base_id]]
    assert deployment_json(_auth_at_top(spec), facts) == deployment_json(spec, facts)
