"""Every built manifest is valid Kubernetes: built-in kinds through kubernetes-validate --strict (Kubernetes
1.30.0 and the newest version it knows); the optional kinds with a vendored CRD (tests/fixtures: prometheus-operator,
the Gateway API, cert-manager) against that CRD's schema, strict as the API server's strict field validation is (an
unknown field fails); COSI kinds against a schema of the v1alpha1 fields written below. A kind with none of these
fails by name, so a new optional kind brings its CRD to tests/fixtures or its schema here."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from berth_api import Registry
from berth_operator.builders import ClusterFacts, build_all
from berth_operator.core.kinds import KINDS, OPTIONAL_KINDS
from support.clusters.apiserver import cert_manager_crds, gateway_api_crds, monitoring_crds

# The clusters the examples are built for: a bare one (no optional API served) and one serving them all.
CLUSTERS = {"bare": frozenset(OPTIONAL_KINDS), "full": frozenset()}

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))
KUBERNETES_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
COSI_API_VERSION = "objectstorage.k8s.io/v1alpha1"

_NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
         "maxLength": 253}
_OWNER_REFERENCE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "name", "uid"],
    "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "name": {"type": "string"},
        "uid": {"type": "string"}, "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"},
    },
}
_METADATA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "namespace"],
    "properties": {
        "name": _NAME,
        "namespace": _NAME,
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": _OWNER_REFERENCE},
    },
}
# COSI v1alpha1 spec fields (docs/upstream.md#cosi-resources: COSI api @ v0.2.2). Status is written by COSI, not us.
COSI_SCHEMAS: dict[str, dict[str, Any]] = {
    "BucketClaim": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": COSI_API_VERSION},
            "kind": {"const": "BucketClaim"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["protocols"],
                "properties": {
                    "bucketClassName": {"type": "string"},
                    "existingBucketName": {"type": "string"},
                    "protocols": {"type": "array", "minItems": 1, "items": {"enum": ["S3", "Azure", "GCP"]}},
                },
            },
        },
    },
    "BucketAccess": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": COSI_API_VERSION},
            "kind": {"const": "BucketAccess"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["bucketAccessClassName", "credentialsSecretName"],
                "properties": {
                    "bucketClaimName": {"type": "string"},
                    "bucketAccessClassName": {"type": "string"},
                    "credentialsSecretName": _NAME,
                    "protocol": {"enum": ["S3", "Azure", "GCP"]},
                    "serviceAccountName": {"type": "string"},
                },
            },
        },
    },
}




def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD's structural schema as strict field validation reads it: an object with `properties` takes no other
    field, unless it preserves unknown fields or says what other fields hold (additionalProperties)."""
    if "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema["additionalProperties"] = False
    for sub in schema.get("properties", {}).values():
        strict(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            strict(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, ()):
            strict(sub)
    return schema


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) to the strict schema of each vendored CRD's served versions, with the metadata Berth may
    write (the CRDs leave metadata to the API server)."""
    schemas = {}
    for crd in (*monitoring_crds(), *gateway_api_crds(), *cert_manager_crds()):
        spec = crd["spec"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            schema = strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
            schema["properties"]["metadata"] = _METADATA
            schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
            schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return schemas


SCHEMAS = {**crd_schemas(), **{(COSI_API_VERSION, kind): schema for kind, schema in COSI_SCHEMAS.items()}}


def assert_valid(obj: dict) -> None:
    where = f"{obj['kind']} {obj['metadata']['name']}"
    schema = SCHEMAS.get((obj["apiVersion"], obj["kind"]))
    if schema is not None:
        error = jsonschema.exceptions.best_match(jsonschema.Draft4Validator(schema).iter_errors(obj))
        if error is not None:
            pytest.fail(f"{where} is invalid for its CRD: {error.message} at {list(error.absolute_path)}")
        return
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.utils.SchemaNotFoundError:
            pytest.fail(f"{where}: no schema for {obj['apiVersion']} {obj['kind']}: vendor its CRD under "
                        "tests/fixtures (support.clusters.apiserver loads it)")
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where} is invalid for Kubernetes {version}: {exc.message} at {list(exc.absolute_path)}")


def example_registries() -> list[tuple[str, Registry, ClusterFacts]]:
    """Each Registry document of examples/*.yaml, as the operator would see it (with a uid and a namespace),
    with the facts the apply layer would look up for it, on a bare cluster and on one serving every optional API."""
    cases = []
    for path in EXAMPLES:
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document.get("kind") != "Registry":
                continue
            metadata = {"namespace": "default", **document["metadata"], "uid": "0b5e3c1a-example"}
            reg = Registry.model_validate({**document, "metadata": metadata})
            object_storage = reg.spec.config.storage.object_storage
            access = object_storage.bucket_access if object_storage is not None else None
            for cluster, unserved in CLUSTERS.items():
                facts = ClusterFacts(
                    agent_image="ghcr.io/berth-dev/berth:0.1.0",
                    bucket_access_secret=f"{access}-credentials" if access else None,
                    unserved=unserved,
                )
                cases.append((f"{path.name}:{metadata['name']}:{cluster}", reg, facts))
    return cases


def test_examples_exist():
    assert len(example_registries()) >= 5 * len(CLUSTERS), "examples/*.yaml should cover every storage mode"


@pytest.mark.parametrize("case", example_registries(), ids=lambda case: case[0])
def test_every_example_builds_valid_manifests(case):
    _, reg, facts = case
    objects = build_all(reg, facts, http_secret_value="generated-value")
    assert any(obj["kind"] == "Deployment" for obj in objects)
    for obj in objects:
        assert_valid(obj)


def test_every_case_builds_valid_manifests(builder_case):
    reg, facts = builder_case
    objects = build_all(reg, facts, http_secret_value="generated-value")
    assert any(obj["kind"] == "Deployment" for obj in objects)
    for obj in objects:
        assert_valid(obj)


def test_every_optional_kind_berth_builds_has_a_schema():
    """What the CRD-backed kinds are validated against: without a schema, assert_valid would fail them by name."""
    built = {key for key in OPTIONAL_KINDS if KINDS[key].owned}
    assert built, "the table of kinds builds optional kinds"
    assert built <= set(SCHEMAS), f"no schema for {sorted(built - set(SCHEMAS))}"


def test_the_exposure_and_monitoring_kinds_validate_against_their_crds(registry_factory, facts_factory):
    issuer = {"name": "ca", "kind": "ClusterIssuer"}
    reg = registry_factory({
        "config": {"storage": {"filesystem": {"storageClass": "standard"}}},
        "http": {"tls": {"issuerRef": issuer}},
        "ingress": {"hosts": ["registry.example.com"], "tls": {"issuerRef": issuer}},
        "gateway": {"parentRefs": [{"name": "public", "namespace": "gateways"}], "hostnames": ["registry.example.com"]},
        "monitoring": {"serviceMonitor": {"labels": {"release": "kube-prometheus-stack"}}},
    })
    objects = build_all(reg, facts_factory(), http_secret_value="v")
    kinds = [obj["kind"] for obj in objects]
    assert {"ServiceMonitor", "HTTPRoute", "Certificate", "Ingress"} <= set(kinds), kinds
    for obj in objects:
        assert_valid(obj)


def test_replicas_one_and_three_validate(registry_factory, facts_factory):
    for replicas in (0, 1, 3):
        reg = registry_factory({"replicas": replicas, "config": {"storage": {"objectStorage": {
            "bucketClass": "s3", "bucketAccessClass": "s3-rw"}}}})
        objects = build_all(reg, facts_factory(), http_secret_value="v")
        assert ("PodDisruptionBudget" in [o["kind"] for o in objects]) == (replicas > 1)
        for obj in objects:
            assert_valid(obj)


def test_validation_can_fail(registry_factory, facts_factory):
    """The checks above would catch a wrong field, for built-in and for COSI kinds."""
    reg = registry_factory({"config": {"storage": {"objectStorage": {"bucketClass": "s3", "bucketAccessClass": "rw"}}}})
    objects = {o["kind"]: o for o in build_all(reg, facts_factory(), http_secret_value="v")}
    deployment = objects["Deployment"]
    deployment["spec"]["template"]["spec"]["initContainers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.30.0", strict=True)
    access = objects["BucketAccess"]
    access["spec"]["credentialSecretName"] = access["spec"].pop("credentialsSecretName")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(access, COSI_SCHEMAS["BucketAccess"])
    # A CRD kind's unknown field fails as strict field validation would fail it.
    reg = registry_factory({"config": {"storage": {"inmemory": {}}}, "monitoring": {"serviceMonitor": {}}})
    monitor = {o["kind"]: o for o in build_all(reg, facts_factory(), http_secret_value="v")}["ServiceMonitor"]
    assert_valid(monitor)
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(pytest.fail.Exception, match="intervall"):
        assert_valid(monitor)
    monitor["spec"]["endpoints"][0].pop("intervall")
    monitor["spec"]["endpoints"][0]["scheme"] = "ftp"
    with pytest.raises(pytest.fail.Exception, match="ftp"):
        assert_valid(monitor)
    # kubernetes-validate has no schema for COSI kinds, hence the schema above.
    with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):
        kubernetes_validate.validate(objects["BucketClaim"], "1.30.0", strict=True)
