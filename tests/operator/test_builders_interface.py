"""build_all and the object set: what each Registry gets, names, owner references, purity."""

from __future__ import annotations

import base64
import json

from berth_operator.builders import build_all, names


def kinds(objects: list[dict]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objects]


def test_filesystem_class_gets_every_object(registry_factory, facts_factory):
    reg = registry_factory({"config": {"storage": {"filesystem": {"storageClass": "standard"}}}})
    objects = build_all(reg, facts_factory(), http_secret_value="s3cr3t-value")
    assert kinds(objects) == [
        ("ServiceAccount", "demo-agent"),
        ("Role", "demo-agent"),
        ("RoleBinding", "demo-agent"),
        ("Secret", "demo-http-secret"),
        ("PersistentVolumeClaim", "demo-data"),
        ("Service", "demo"),
        ("Deployment", "demo"),
    ]
    secret = objects[3]
    assert base64.b64decode(secret["data"][names.HTTP_SECRET_KEY]).decode() == "s3cr3t-value"


def test_every_object_is_namespaced_labelled_and_owned(builder_case):
    reg, facts = builder_case
    for obj in build_all(reg, facts, http_secret_value="v"):
        meta = obj["metadata"]
        assert meta["namespace"] == "registries"
        assert meta["labels"]["app.kubernetes.io/instance"] == "demo"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "berth"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "berth.dev/v1alpha1",
                "kind": "Registry",
                "name": "demo",
                "uid": "5f0c7d2e-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]


def test_builders_are_pure(builder_case):
    reg, facts = builder_case
    before = reg.model_dump(by_alias=True)
    first = build_all(reg, facts, http_secret_value="v")
    second = build_all(reg, facts, http_secret_value="v")
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert reg.model_dump(by_alias=True) == before
    # Mutating the output must not leak into the next build (no shared mutable state).
    first[-1]["metadata"]["labels"]["x"] = "y"
    assert build_all(reg, facts, http_secret_value="v") == second
