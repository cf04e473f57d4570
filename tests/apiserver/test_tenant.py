"""The tenant test: a user with only `edit` in namespace A cannot, through any Registry field, make Berth
read, copy, mount or expose a Secret or ConfigMap of namespace B.

A real API server of its own, with the clusterrole-aggregation controller (support.clusters.apiserver_users), the
documented install (`kubectl apply -k crds`, `kubectl apply -k deploy`), COSI's, cert-manager's and the Gateway API's
CRDs, and `berth-operator --all-namespaces` as a process with deploy/'s RBAC (start_operator). Namespace B holds a
Secret, a ConfigMap, a PersistentVolumeClaim, a BucketClaim and a BucketAccess under two names, `leak` and
`<B>.leak`, each carrying a recognisable value. The tenant is bound to the built-in `edit` ClusterRole in A only.

For every field that names an object (FIELDS; test_every_field_that_names_an_object_is_tried walks the API models
and fails on one not listed here), the tenant tries each way the schema could let it name B's object, with its own
token:

- `B/leak` as the name: refused at admission (422, the cause naming the field: names are DNS subdomains);
- a `namespace: B` beside the name: refused under strict field validation (what kubectl sends: 400, naming the
  unknown field), and pruned by the API server otherwise (the stored Registry has no such field);
- `leak` and `<B>.leak`, names B has and A has not: admitted, and Berth looks in A only: the Registry is Degraded
  saying the object is not found in namespace A, or (for what the kubelet, an ingress controller or cert-manager
  resolve: env, imagePullSecrets, Ingress TLS, issuers) the object Berth builds is in A and names it by name alone,
  which Kubernetes resolves in A.

Over the whole run: the operator's token made no request at all in namespace B (the audit log), and none of B's
values, plain or base64, appears in anything in A, in any Event, in any Registry's status or in the operator's log.
spec.gateway.parentRefs[].namespace does name another namespace: an HTTPRoute attaches to a Gateway there only if
that Gateway's allowedRoutes admits A (the Gateway API's own rule), and it exposes A's Service, never B's objects.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from berth_api.exposure import IssuerRef, ParentRef
from berth_api.kube_types import KeySelector, LocalObjectReference
from berth_api.registry import RegistrySpec
from berth_api.types import ConfigMapKeyRef, SecretKeyRef
from support.clusters.apiserver import (
    ApiError,
    KubeApiServer,
    api_path,
    cert_manager_crds,
    forbidden,
    gateway_api_crds,
    token_id,
)
from support.clusters.apiserver_identities import OPERATOR_USER, start_operator
from support.clusters.apiserver_users import REGISTRIES, bind, install, namespace, users_cluster
from support.clusters.kube import COSI_CRDS
from support.clusters.operator_harness import reconciled
from support.common.polling import wait_for

COSI = "objectstorage.k8s.io/v1alpha1"
TENANT = "tenant"

# ------------------------------------------------------------------------------------ the fields that name objects

# A field names an object when its type is one of these references, or when its name says so.
REFERENCE_TYPES = (SecretKeyRef, ConfigMapKeyRef, KeySelector, LocalObjectReference, IssuerRef, ParentRef)
NAMING = re.compile(r"(?i)secret|configmap|claim|bucket|class|issuer|parent|namespace|serviceaccount|volume|"
                    r"pullsecret|identity")

# Found by the walk, and not a namespaced Secret, ConfigMap or object that leads to one: why each is not tried.
NOT_A_NAMESPACED_OBJECT = {
    "spec.config.storage.filesystem.storageClass": "a StorageClass: cluster-scoped, no namespace to cross",
    "spec.config.storage.objectStorage.bucketClass": "a BucketClass: cluster-scoped",
    "spec.config.storage.objectStorage.bucketAccessClass": "a BucketAccessClass: cluster-scoped",
    "spec.ingress.className": "an IngressClass: cluster-scoped",
    "spec.pod.priorityClassName": "a PriorityClass: cluster-scoped",
    "spec.service.loadBalancerClass": "a load balancer implementation's name, no object",
    "spec.config.storage.s3.storageClass": "S3's object storage class (STANDARD), no Kubernetes object",
    "spec.config.storage.objectStorage.storageClass": "S3's object storage class, no Kubernetes object",
    "spec.config.storage.s3.bucket": "a bucket of the cloud, no Kubernetes object",
    "spec.config.storage.gcs.bucket": "a bucket of the cloud, no Kubernetes object",
    "spec.config.auth.token.issuer": "the JWT issuer (iss) tokens must carry, no object",
    "spec.config.storage.auth.token.issuer": "the JWT issuer (iss) tokens must carry, no object",
    "spec.config.notifications.endpoints[].headers[].secretKey": "a key of spec.config.notifications.secretName "
                                                                 "(tried), not a name",
    "spec.config.storage.s3.credentials.secretAccessKeyKey": "a key of s3.credentials.secretName (tried), not a name",
    "spec.networkPolicy.from[].namespaceSelector": "admits traffic from pods of other namespaces into A's registry "
                                                   "port; reads nothing of theirs",
    "spec.networkPolicy.metricsFrom[].namespaceSelector": "the same, for the metrics ports",
    **{f"spec.pod.affinity.{kind}.{term}.{field}": "pod (anti-)affinity to pods of other namespaces: scheduling "
                                                    "only, reads no object"
       for kind in ("podAffinity", "podAntiAffinity")
       for term in ("requiredDuringSchedulingIgnoredDuringExecution[]",
                    "preferredDuringSchedulingIgnoredDuringExecution[].podAffinityTerm")
       for field in ("namespaces[]", "namespaceSelector")},
}


def _unwrap(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds (through Optional, Annotated, list and dict), or None, and its path suffix."""
    suffix = ""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return None, suffix
            annotation = args[0]
        elif origin is list:
            annotation, suffix = typing.get_args(annotation)[0], suffix + "[]"
        elif origin is dict:
            annotation, suffix = typing.get_args(annotation)[1], suffix + ".*"
        else:
            break
    model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return model, suffix


def naming_fields(model: type[BaseModel] = RegistrySpec, path: str = "spec",
                  seen: tuple[type, ...] = ()) -> set[str]:
    """Every field of the Registry's spec that names an object, by type (REFERENCE_TYPES) or by name (NAMING), as
    an API path ([] for a list's items, .* for a map's values); the walk stops at such a field."""
    found: set[str] = set()
    for name, info in model.model_fields.items():
        alias = info.alias or name
        inner, suffix = _unwrap(info.annotation)
        field_path = f"{path}.{alias}{suffix}"
        if (inner is not None and issubclass(inner, REFERENCE_TYPES)) or NAMING.search(alias):
            found.add(field_path)
        elif inner is not None and inner not in seen:
            found |= naming_fields(inner, field_path, (*seen, inner))
    return found


# ---------------------------------------------------------------------------------------------- what is tried

TOKEN = {"realm": "https://auth.example.com/token", "service": "registry", "issuer": "auth.example.com"}
HOOK = {"name": "hook", "url": "https://hook.example.com/events",
        "headers": [{"name": "Authorization", "secretKey": "value"}]}
HOSTS = ["registry.example.com"]


def _spec(storage: dict | None = None, config: dict | None = None, **top: Any) -> dict[str, Any]:
    return {"config": {"storage": storage or {"inmemory": {}}, **(config or {})}, **top}


def _ref(name: str, extra: dict, key: str = "field") -> dict[str, Any]:
    return {"name": name, key: "value", **extra}


@dataclass(frozen=True)
class Field:
    """build(name, extra): a spec naming `name` in this field, `extra` merged into the object that holds the name;
    looked_up: the kind Berth's operator looks up in the Registry's namespace (reported missing by name), or None
    when another component resolves it (then `built` says where the name lands)."""

    build: Callable[[str, dict], dict[str, Any]]
    looked_up: str | None = None
    built: str | None = None  # "pod", "Ingress", "Certificate", "HTTPRoute", "ServiceAccount"


def _auth(where: str, provider: dict) -> Callable[[dict], dict]:
    if where == "spec.config.auth":
        return lambda _: _spec(config={"auth": provider})
    return lambda _: _spec({"inmemory": {}, "auth": provider})


def _auth_fields() -> dict[str, Field]:
    fields = {}
    for where in ("spec.config.auth", "spec.config.storage.auth"):
        def htpasswd(n: str, x: dict, where: str = where) -> dict:
            return _auth(where, {"htpasswd": {"secret": _ref(n, x)}})(x)
        fields[f"{where}.htpasswd.secret"] = Field(htpasswd, "Secret")
        for trust in ("rootCertBundle", "jwks"):
            for source, kind in (("secret", "Secret"), ("configMap", "ConfigMap")):
                def token(n: str, x: dict, where: str = where, trust: str = trust, source: str = source) -> dict:
                    return _auth(where, {"token": {**TOKEN, trust: {source: _ref(n, x)}}})(x)
                fields[f"{where}.token.{trust}.{source}"] = Field(token, kind)
    return fields


FIELDS: dict[str, Field] = {
    "spec.env[].valueFrom.secretKeyRef": Field(
        lambda n, x: _spec(env=[{"name": "LEAK", "valueFrom": {"secretKeyRef": _ref(n, x, "key")}}]), built="pod"),
    "spec.env[].valueFrom.configMapKeyRef": Field(
        lambda n, x: _spec(env=[{"name": "LEAK", "valueFrom": {"configMapKeyRef": _ref(n, x, "key")}}]), built="pod"),
    "spec.pod.imagePullSecrets[]": Field(lambda n, x: _spec(pod={"imagePullSecrets": [{"name": n, **x}]}),
                                         built="pod"),
    **_auth_fields(),
    "spec.config.notifications.secretName": Field(
        lambda n, x: _spec(config={"notifications": {"secretName": n, **x, "endpoints": [HOOK]}}), "Secret"),
    "spec.config.proxy.credentials.secretName": Field(
        lambda n, x: _spec(config={"proxy": {"remoteURL": "https://registry-1.docker.io",
                                             "credentials": {"secretName": n, **x}}}), "Secret"),
    "spec.config.storage.filesystem.persistentVolumeClaim": Field(
        lambda n, x: _spec({"filesystem": {"persistentVolumeClaim": n, **x}}), "PersistentVolumeClaim"),
    "spec.config.storage.objectStorage.bucketClaim": Field(
        lambda n, x: _spec({"objectStorage": {"bucketClaim": n, "bucketAccessClass": "tenant-class", **x}}),
        "BucketClaim"),
    "spec.config.storage.objectStorage.bucketAccess": Field(
        lambda n, x: _spec({"objectStorage": {"bucketClass": "tenant-class", "bucketAccess": n, **x}}),
        "BucketAccess"),
    "spec.config.storage.s3.credentials.secretName": Field(
        lambda n, x: _spec({"s3": {"bucket": "tenant-bucket", "credentials": {"secretName": n, **x}}}), "Secret"),
    "spec.config.storage.s3.ca.secret": Field(
        lambda n, x: _spec({"s3": {"bucket": "tenant-bucket", "ca": {"secret": _ref(n, x)}}}), "Secret"),
    "spec.config.storage.s3.ca.configMap": Field(
        lambda n, x: _spec({"s3": {"bucket": "tenant-bucket", "ca": {"configMap": _ref(n, x)}}}), "ConfigMap"),
    "spec.config.storage.azure.credentials.secret": Field(
        lambda n, x: _spec({"azure": {"accountName": "tenantacct", "container": "registry",
                                      "credentials": {"type": "shared_key", "secret": _ref(n, x)}}}), "Secret"),
    "spec.config.storage.gcs.credentials.secret": Field(
        lambda n, x: _spec({"gcs": {"bucket": "tenant-bucket", "credentials": {"type": "key", "secret": _ref(n, x)}}}),
        "Secret"),
    "spec.http.secret": Field(lambda n, x: _spec(http={"secret": _ref(n, x)}), "Secret"),
    "spec.http.tls.secretName": Field(lambda n, x: _spec(http={"tls": {"secretName": n, **x}}), "Secret"),
    "spec.http.tls.issuerRef": Field(lambda n, x: _spec(http={"tls": {"issuerRef": {"name": n, **x}}}),
                                     built="Certificate"),
    "spec.redis.secret": Field(lambda n, x: _spec(redis={"secret": _ref(n, x)}), "Secret"),
    "spec.ingress.tls.secretName": Field(
        lambda n, x: _spec(ingress={"hosts": HOSTS, "tls": {"secretName": n, **x}}), built="Ingress"),
    "spec.ingress.tls.issuerRef": Field(
        lambda n, x: _spec(ingress={"hosts": HOSTS, "tls": {"issuerRef": {"name": n, **x}}}), built="Certificate"),
    "spec.gateway.parentRefs[]": Field(lambda n, x: _spec(gateway={"parentRefs": [{"name": n, **x}]}),
                                       built="HTTPRoute"),
    "spec.serviceAccount": Field(lambda n, x: _spec(serviceAccount={"annotations": {
        "eks.amazonaws.com/role-arn": f"arn:aws:iam::111122223333:role/{n}",
        "iam.gke.io/gcp-service-account": f"{n}@project.iam.gserviceaccount.com",
        "azure.workload.identity/client-id": "00000000-0000-0000-0000-000000000000"}}), built="ServiceAccount"),
}
# Fields with a real namespace of their own (the Gateway API lets an HTTPRoute name a Gateway elsewhere).
HAS_NAMESPACE = {"spec.gateway.parentRefs[]"}
NO_NAME = {"spec.serviceAccount"}  # annotations: no object name to give


def test_every_field_that_names_an_object_is_tried() -> None:
    """A new field naming an object fails here until FIELDS tries it (or NOT_A_NAMESPACED_OBJECT says why not)."""
    found = naming_fields()
    assert set(FIELDS) & set(NOT_A_NAMESPACED_OBJECT) == set()
    assert sorted(found - set(FIELDS) - set(NOT_A_NAMESPACED_OBJECT)) == [], "fields naming objects not tried here"
    assert sorted((set(FIELDS) | set(NOT_A_NAMESPACED_OBJECT)) - found) == [], "listed here, gone from the API"


def test_the_walk_finds_a_new_reference() -> None:
    """The walk itself: a model with a new Secret reference, or a new field named like one, is found."""
    class Extra(RegistrySpec):
        webhook_token: SecretKeyRef | None = None
        extra_secret_name: str | None = None

    assert {"spec.webhook_token", "spec.extra_secret_name"} <= naming_fields(Extra)


# ------------------------------------------------------------------------------------------------------ the run

def _paths(field: str) -> str:
    """An API path without list markers, as the operator's messages and the API server's causes write it."""
    return field.replace("[]", "")


@dataclass
class Tenancy:
    api: KubeApiServer
    token: str
    home: str
    other: str
    values: list[str]
    registries: dict[tuple[str, str], dict[str, Any]]  # (field, variant) -> the Registry as reconciled
    admission: dict[tuple[str, str], Any]  # (field, attempt) -> ApiError or the dry-run answer
    operator_log: str
    audit: list[dict[str, Any]]

    def as_tenant(self, method: str, body: dict | None = None, **query: Any) -> dict[str, Any]:
        return self.api.request(method, api_path(REGISTRIES, self.home), body, token=self.token,
                                query=query or None)


def _registry(name: str, home: str, spec: dict) -> dict[str, Any]:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": home},
            "spec": spec}


def _seed_other(api: KubeApiServer, other: str, marker: str) -> list[str]:
    """B's objects under both names; the values they hold (each recognisable)."""
    values = []
    for name in ("leak", f"{other}.leak"):
        data = {key: f"{marker}-{name}-{key}" for key in (
            "value", "tls.crt", "tls.key", "username", "password", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
        values += data.values()
        api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": other},
                    "stringData": data})
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": other},
                    "data": data})
        api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": other},
                    "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
        api.create({"apiVersion": COSI, "kind": "BucketClaim", "metadata": {"name": name, "namespace": other},
                    "spec": {"bucketClassName": "b-class", "protocols": ["s3"]}})
        api.create({"apiVersion": COSI, "kind": "BucketAccess", "metadata": {"name": name, "namespace": other},
                    "spec": {"bucketClaimName": name, "bucketAccessClassName": "b-access",
                             "credentialsSecretName": name}})
    return values


def _attempts(t: Tenancy, field: str, spec_of: Field) -> dict[tuple[str, str], Any]:
    """Admission attempts as the tenant, dry run: each answer, or the ApiError."""
    answers: dict[tuple[str, str], Any] = {}
    if field in NO_NAME:
        return answers
    tries = {"slash": (f"{t.other}/leak", {}, {})}
    if field not in HAS_NAMESPACE:
        tries["namespace-strict"] = ("leak", {"namespace": t.other}, {"fieldValidation": "Strict"})
        tries["namespace-default"] = ("leak", {"namespace": t.other}, {})
    for attempt, (name, extra, query) in tries.items():
        body = _registry(f"try-{secrets.token_hex(3)}", t.home, spec_of.build(name, extra))
        try:
            answers[(field, attempt)] = t.as_tenant("POST", body, dryRun="All", **query)
        except ApiError as error:
            answers[(field, attempt)] = error
    return answers


@pytest.fixture(scope="module")
def tenancy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    crds = [*COSI_CRDS, *cert_manager_crds(), *gateway_api_crds()]
    with users_cluster([TENANT], crds=crds) as (api, tokens):
        install(api)
        suffix = secrets.token_hex(3)
        home, other = namespace(api, f"team-a-{suffix}"), namespace(api, f"team-b-{suffix}")
        bind(api, home, "edit", TENANT)
        marker = f"tenant-b-secret-{secrets.token_hex(8)}"
        values = _seed_other(api, other, marker)
        operator, op_token = start_operator(api, "berth-operator-0", tmp_path_factory.mktemp("operator"), None)
        t = Tenancy(api, tokens[TENANT], home, other, values, {}, {}, "", [])
        try:
            wait_for(lambda: (h := operator.health()) is not None and h[0] == 200, "operator leading", 60)
            created = {}
            for index, (field, spec_of) in enumerate(FIELDS.items()):
                t.admission.update(_attempts(t, field, spec_of))
                variants = {"plain": ("leak", {}), "dotted": (f"{other}.leak", {})}
                if field in HAS_NAMESPACE:
                    variants = {"plain": ("leak", {"namespace": other})}
                if field in NO_NAME:
                    variants = {"plain": ("leak", {})}
                for variant, (name, extra) in variants.items():
                    body = _registry(f"f{index}-{variant}", home, spec_of.build(name, extra))
                    created[(field, variant)] = t.as_tenant("POST", body, fieldValidation="Strict")
            for key, reg in created.items():
                name = reg["metadata"]["name"]
                t.registries[key] = wait_for(lambda name=name: reconciled(api, home, name), f"{name} reconciled", 120)
        finally:
            operator.stop()
        t.operator_log = operator.log()
        mine = token_id(op_token)
        t.audit = [e for e in api.audit(OPERATOR_USER)
                   if (e["user"].get("extra") or {}).get("authentication.kubernetes.io/credential-id") == [mine]]
        yield t


def _condition(reg: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (reg.get("status") or {}).get("conditions") or () if c["type"] == ctype), {})


def _owned(api: KubeApiServer, path: str, home: str, reg: dict[str, Any]) -> list[dict[str, Any]]:
    uid = reg["metadata"]["uid"]
    return [obj for obj in api.list(path, home)
            if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ())]


# ------------------------------------------------------------------------------------------ refused at admission

NAMED_FIELDS = [f for f in FIELDS if f not in NO_NAME]


@pytest.mark.parametrize("field", NAMED_FIELDS)
def test_a_name_with_a_namespace_in_it_is_refused(tenancy: Tenancy, field: str) -> None:
    answer = tenancy.admission[(field, "slash")]
    assert isinstance(answer, ApiError), f"{field}: B/leak was admitted"
    assert answer.status == 422, answer
    assert any(_paths(field) in re.sub(r"\[\d+\]", "", cause.get("field", "")) for cause in answer.causes), \
        answer.body


@pytest.mark.parametrize("field", [f for f in NAMED_FIELDS if f not in HAS_NAMESPACE])
def test_a_namespace_beside_the_name_is_refused_or_dropped(tenancy: Tenancy, field: str) -> None:
    strict = tenancy.admission[(field, "namespace-strict")]
    assert isinstance(strict, ApiError) and strict.status == 400, strict
    unknown = re.findall(r'unknown field "([^"]+)"', strict.body.get("message", ""))
    # The object that holds the name: the reference itself, or the one with a secretName-like string field.
    by_reference = field.endswith(("Ref", ".secret", ".configMap", "[]"))
    holder = _paths(field) if by_reference else _paths(field).rsplit(".", 1)[0]
    assert [re.sub(r"\[\d+\]", "", path) for path in unknown] == [f"{holder}.namespace"], strict.body
    pruned = tenancy.admission[(field, "namespace-default")]
    assert not isinstance(pruned, ApiError), pruned
    assert tenancy.other not in json.dumps(pruned["spec"]), "the API server kept a namespace in the spec"


# ------------------------------------------------------------------------------------- admitted: A is looked in

def _variants(kinds: set[str | None], built: set[str | None]) -> list[Any]:
    return [pytest.param(field, variant, id=f"{field}-{variant}") for field, spec_of in FIELDS.items()
            if spec_of.looked_up in kinds and spec_of.built in built
            for variant in (("plain",) if field in HAS_NAMESPACE | NO_NAME else ("plain", "dotted"))]


@pytest.mark.parametrize(("field", "variant"), _variants({"Secret", "ConfigMap", "PersistentVolumeClaim",
                                                          "BucketClaim", "BucketAccess"}, {None}))
def test_the_operator_reports_the_object_missing_in_the_registrys_namespace(tenancy: Tenancy, field: str,
                                                                            variant: str) -> None:
    reg = tenancy.registries[(field, variant)]
    name = "leak" if variant == "plain" else f"{tenancy.other}.leak"
    degraded = _condition(reg, "Degraded")
    assert degraded.get("status") == "True", reg.get("status")
    kind = FIELDS[field].looked_up
    said = f"{kind} {name} ({_paths(field)}) not found in namespace {tenancy.home}"
    assert said in degraded["message"], degraded
    assert degraded["reason"].startswith("Missing"), degraded


def _names_in(obj: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair anywhere in obj."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield key, value
            yield from _names_in(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _names_in(item)


@pytest.mark.parametrize(("field", "variant"), _variants({None}, {"pod", "Ingress", "Certificate", "HTTPRoute",
                                                                 "ServiceAccount"}))
def test_what_others_resolve_is_built_in_the_registrys_namespace(tenancy: Tenancy, field: str, variant: str) -> None:
    """env, imagePullSecrets: the kubelet resolves them in the pod's namespace; Ingress TLS: the ingress controller,
    in the Ingress's; an issuerRef of kind Issuer: cert-manager, in the Certificate's. Each object is in A and names
    the object by name alone (its API has no namespace there)."""
    api, home, other, reg = tenancy.api, tenancy.home, tenancy.other, tenancy.registries[(field, variant)]
    name = "leak" if variant == "plain" else f"{other}.leak"
    built = FIELDS[field].built
    if built == "pod":
        [deployment] = _owned(api, "apps/v1/deployments", home, reg)
        pod = deployment["spec"]["template"]["spec"]
        refs = ([ref["name"] for ref in pod.get("imagePullSecrets") or ()] if "imagePullSecrets" in field else
                [src["name"] for c in pod["containers"] for env in c.get("env") or ()
                 for src in (env.get("valueFrom") or {}).values() if src.get("key") == "value"])
        assert refs == [name], pod
    elif built == "Ingress":
        [ingress] = _owned(api, "networking.k8s.io/v1/ingresses", home, reg)
        assert [tls["secretName"] for tls in ingress["spec"]["tls"]] == [name]
    elif built == "Certificate":
        [certificate] = _owned(api, "cert-manager.io/v1/certificates", home, reg)
        assert certificate["spec"]["issuerRef"]["name"] == name and certificate["spec"]["issuerRef"]["kind"] == "Issuer"
        assert certificate["spec"]["secretName"].startswith(reg["metadata"]["name"])  # Berth's own, in A
    elif built == "HTTPRoute":
        [route] = _owned(api, "gateway.networking.k8s.io/v1/httproutes", home, reg)
        assert [ref.get("namespace") for ref in route["spec"]["parentRefs"]] == [other]  # the Gateway decides
        backends = [b for rule in route["spec"]["rules"] for b in rule["backendRefs"]]
        assert backends and all(b.get("namespace", home) == home for b in backends), backends
        [service] = [s for s in _owned(api, "v1/services", home, reg) if s["metadata"]["name"] == backends[0]["name"]]
        assert service["metadata"]["namespace"] == home
    else:  # ServiceAccount: its annotations go on the registry pods' own ServiceAccount, in A
        [account] = _owned(api, "v1/serviceaccounts", home, reg)
        assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].endswith("/leak")
        [deployment] = _owned(api, "apps/v1/deployments", home, reg)
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
        assert not [a for a in api.list("v1/serviceaccounts", other) if a["metadata"]["name"] != "default"]
    # Nowhere in what Berth built for it is a namespace other than A's, but the Gateway's parentRef.
    for path in ("apps/v1/deployments", "v1/services", "v1/serviceaccounts", "rbac.authorization.k8s.io/v1/roles",
                 "rbac.authorization.k8s.io/v1/rolebindings"):
        for obj in _owned(api, path, home, reg):
            assert {v for k, v in _names_in(obj) if k == "namespace"} <= {home}, obj


# ------------------------------------------------------------------------------------------- over the whole run

def test_every_registry_was_admitted_for_the_tenant_and_reconciled(tenancy: Tenancy) -> None:
    expected = sum(1 if f in HAS_NAMESPACE | NO_NAME else 2 for f in FIELDS)
    assert len(tenancy.registries) == expected
    assert all(reg["metadata"]["namespace"] == tenancy.home for reg in tenancy.registries.values())


def test_the_operator_asked_nothing_in_the_other_namespace(tenancy: Tenancy) -> None:
    assert tenancy.audit, "the audit log has nothing of the operator's token"
    there = sorted({(e["verb"], e["requestURI"]) for e in tenancy.audit
                    if (e.get("objectRef") or {}).get("namespace") == tenancy.other})
    assert there == [], "berth-operator made requests in namespace B"
    assert [e for e in tenancy.audit if (e.get("objectRef") or {}).get("namespace") == tenancy.home], \
        "the audit log has none of the operator's requests in A: the filter above would pass on anything"
    assert [e for e in tenancy.audit if forbidden(e)] == [], "RBAC refused the operator"
    # Its cluster-wide reads of Secrets and ConfigMaps are the caches' of its own objects, by label.
    wide = sorted({e["requestURI"] for e in tenancy.audit if (e.get("objectRef") or {}).get("resource") in (
        "secrets", "configmaps") and not (e.get("objectRef") or {}).get("namespace")})
    assert all("labelSelector=" in uri for uri in wide), wide


def _haystack(t: Tenancy) -> dict[str, str]:
    api, found = t.api, {}
    for path in ("v1/secrets", "v1/configmaps", "v1/serviceaccounts", "v1/services", "v1/persistentvolumeclaims",
                 "apps/v1/deployments", "rbac.authorization.k8s.io/v1/roles",
                 "rbac.authorization.k8s.io/v1/rolebindings", "coordination.k8s.io/v1/leases",
                 "policy/v1/poddisruptionbudgets", "networking.k8s.io/v1/ingresses",
                 "gateway.networking.k8s.io/v1/httproutes", "cert-manager.io/v1/certificates",
                 f"{COSI}/bucketclaims", f"{COSI}/bucketaccesses", REGISTRIES):
        found[f"{path} in A"] = json.dumps(api.list(path, t.home))
    found["events, every namespace"] = json.dumps(api.list("v1/events"))
    found["events.k8s.io, every namespace"] = json.dumps(api.list("events.k8s.io/v1/events"))
    found["Berth's objects, every namespace"] = json.dumps(
        [obj for path in ("v1/secrets", "v1/configmaps") for obj in api.list(path)
         if (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "berth"])
    found["the operator's log"] = t.operator_log
    return found


def test_no_value_of_the_other_namespace_appears_anywhere(tenancy: Tenancy) -> None:
    needles = {value: value for value in tenancy.values}
    needles |= {base64.b64encode(value.encode()).decode(): value for value in tenancy.values}
    hits = sorted({(where, needles[needle]) for where, text in _haystack(tenancy).items()
                   for needle in needles if needle in text})
    assert hits == [], "B's values were copied or exposed"
    # The search itself: B's own Secrets and ConfigMaps hold every value, in base64 and plain.
    own = json.dumps(tenancy.api.list("v1/secrets", tenancy.other) + tenancy.api.list("v1/configmaps", tenancy.other))
    assert all(needle in own for needle in needles)
