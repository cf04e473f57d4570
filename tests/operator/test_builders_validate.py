"""Every built manifest is valid Kubernetes: built-in kinds through kubernetes-validate --strict (Kubernetes
1.30.0 and the newest version it knows), COSI kinds against a schema of the v1alpha1 fields written below."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from berth_api import Registry
from berth_operator.builders import ClusterFacts, build_all
from berth_operator.builders.kinds import CERT_MANAGER, GATEWAY, MONITORING

# Served on a cluster without the optional CRDs kubernetes-validate has no schema for (COSI's are checked below).
WITHOUT_CRDS = frozenset({(MONITORING, "ServiceMonitor"), (GATEWAY, "HTTPRoute"), (CERT_MANAGER, "Certificate")})

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
        "ownerReferences": {"type": "array", "items": _OWNER_REFERENCE},
    },
}
# COSI v1alpha1 spec fields (field-notes section 2: COSI api @ v0.2.2). Status is written by COSI, not us.
COSI_SCHEMAS = {
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


def assert_valid(obj: dict) -> None:
    where = f"{obj['kind']} {obj['metadata']['name']}"
    if obj["apiVersion"] == COSI_API_VERSION:
        jsonschema.validate(obj, COSI_SCHEMAS[obj["kind"]])
        return
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where} is invalid for Kubernetes {version}: {exc.message} at {list(exc.absolute_path)}")


def example_registries() -> list[tuple[str, Registry, ClusterFacts]]:
    """Each Registry document of examples/*.yaml, as the operator would see it (with a uid and a namespace),
    with the facts the apply layer would look up for it."""
    cases = []
    for path in EXAMPLES:
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document.get("kind") != "Registry":
                continue
            metadata = {"namespace": "default", **document["metadata"], "uid": "0b5e3c1a-example"}
            reg = Registry.model_validate({**document, "metadata": metadata})
            object_storage = reg.spec.config.storage.object_storage
            access = object_storage.bucket_access if object_storage is not None else None
            facts = ClusterFacts(
                agent_image="ghcr.io/berth-dev/berth:0.1.0",
                bucket_access_secret=f"{access}-credentials" if access else None,
                unserved=WITHOUT_CRDS,
            )
            cases.append((f"{path.name}:{metadata['name']}", reg, facts))
    return cases


def test_examples_exist():
    assert len(example_registries()) >= 5, "examples/*.yaml should cover every storage mode"


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
    # kubernetes-validate has no schema for COSI kinds, hence the schema above.
    with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):
        kubernetes_validate.validate(objects["BucketClaim"], "1.30.0", strict=True)
