"""build_all and the object set: what each Registry gets, names, owner references, purity."""

from __future__ import annotations

import base64
import json

import pytest

from berth_api import Registry
from berth_api.pod import HTTP_SECRET_KEY
from berth_operator.builders import bucket_access, build_all
from berth_operator.builders import lease as lease_builder
from berth_operator.builders.meta import selector_labels, selector_string


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
        ("Service", "demo-metrics"),
        ("Deployment", "demo"),
        ("Lease", "demo-reload"),
        ("Lease", "demo-gc"),
    ]
    secret = objects[3]
    assert base64.b64decode(secret["data"][HTTP_SECRET_KEY]).decode() == "s3cr3t-value"


def test_every_object_is_namespaced_labelled_and_owned(builder_case):
    """Owned by the Registry, but for what holds data: that carries its deletion policy, and is owned under Delete
    only (the builder cases take the default, Retain)."""
    reg, facts = builder_case
    for obj in build_all(reg, facts, http_secret_value="v"):
        meta = obj["metadata"]
        assert meta["namespace"] == "registries"
        assert meta["labels"]["app.kubernetes.io/instance"] == "demo"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "berth"
        if obj["kind"] in ("PersistentVolumeClaim", "BucketClaim", "BucketAccess"):
            assert meta["annotations"] == {"berth.dev/deletion-policy": "Retain"}
            assert "ownerReferences" not in meta
            continue
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


def by_kind(objects: list[dict]) -> dict[str, dict]:
    """The first object of each kind (the registry's Service before the metrics Service)."""
    found: dict[str, dict] = {}
    for o in objects:
        found.setdefault(o["kind"], o)
    return found


def test_agent_rbac_is_its_own_registry_events_and_mounted_secrets(registry_factory, facts_factory):
    reg = registry_factory({"config": {"storage": {"inmemory": {}}}})
    objects = by_kind(build_all(reg, facts_factory(), http_secret_value=None))
    assert objects["ServiceAccount"]["automountServiceAccountToken"] is False
    assert objects["Role"]["rules"] == [
        {"apiGroups": ["berth.dev"], "resources": ["registries"], "resourceNames": ["demo"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["berth.dev"], "resources": ["registries/status"], "resourceNames": ["demo"],
         "verbs": ["patch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["demo-reload"],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["demo-gc"],
         "verbs": ["get", "update"]},
        # The one Secret an inmemory registry's pod mounts: the generated http secret (test_builders_role_secrets).
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["demo-http-secret"],
         "verbs": ["get", "list", "watch"]},
    ]
    assert objects["RoleBinding"]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                  "name": "demo-agent"}
    assert objects["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "demo-agent",
                                                   "namespace": "registries"}]


def test_service_port_from_http_addr(registry_factory, facts_factory):
    plain = registry_factory({"http": {"addr": "0.0.0.0:8080"}, "config": {"storage": {"inmemory": {}}}})
    service = by_kind(build_all(plain, facts_factory(), http_secret_value=None))["Service"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP",
                                         "appProtocol": "http"}]
    assert service["spec"]["selector"] == selector_labels(plain)
    tls = registry_factory({"http": {"tls": {"secretName": "t"}}, "config": {"storage": {"inmemory": {}}}})
    service = by_kind(build_all(tls, facts_factory(), http_secret_value=None))["Service"]
    assert service["spec"]["ports"][0]["name"] == service["spec"]["ports"][0]["targetPort"] == "https"
    assert service["spec"]["ports"][0]["port"] == 5000


def test_http_secret_only_when_generated_and_given(registry_factory, facts_factory):
    generated = registry_factory({"config": {"storage": {"inmemory": {}}}})
    given = registry_factory({"http": {"secret": {"name": "mine", "field": "k"}},
                              "config": {"storage": {"inmemory": {}}}})
    assert "Secret" in by_kind(build_all(generated, facts_factory(), http_secret_value="v"))
    # The apply layer passes None when the Secret exists already: it is never rebuilt with a new value.
    assert "Secret" not in by_kind(build_all(generated, facts_factory(), http_secret_value=None))
    assert "Secret" not in by_kind(build_all(given, facts_factory(), http_secret_value="v"))
    secret = by_kind(build_all(generated, facts_factory(), http_secret_value="v"))["Secret"]
    assert secret["metadata"]["name"] == "demo-http-secret" and set(secret["data"]) == {"secret"}


def test_pvc_from_storage_class(registry_factory, facts_factory):
    reg = registry_factory({"config": {"storage": {"filesystem": {"storageClass": "fast", "size": "50Gi"}}}})
    pvc = by_kind(build_all(reg, facts_factory(), http_secret_value=None))["PersistentVolumeClaim"]
    assert pvc["metadata"]["name"] == "demo-data"
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast", "volumeMode": "Filesystem",
                           "resources": {"requests": {"storage": "50Gi"}}}
    existing = registry_factory({"config": {"storage": {"filesystem": {"persistentVolumeClaim": "mine"}}}})
    assert "PersistentVolumeClaim" not in by_kind(build_all(existing, facts_factory(), http_secret_value=None))


def test_cosi_objects(registry_factory, facts_factory):
    def cosi(object_storage):
        reg = registry_factory({"config": {"storage": {"objectStorage": object_storage}}})
        objects = by_kind(build_all(reg, facts_factory(bucket_access_secret="theirs"), http_secret_value=None))
        return objects.get("BucketClaim"), objects.get("BucketAccess")

    claim, access = cosi({"bucketClass": "s3", "bucketAccessClass": "rw"})
    assert claim["metadata"]["name"] == "demo-bucket"
    assert claim["spec"] == {"bucketClassName": "s3", "protocols": ["S3"]}
    assert access["metadata"]["name"] == "demo-bucket-access"
    assert access["spec"] == {"bucketClaimName": "demo-bucket", "bucketAccessClassName": "rw",
                              "credentialsSecretName": "demo-cosi-credentials", "protocol": "S3"}
    claim, access = cosi({"bucketClaim": "theirs", "bucketAccessClass": "rw"})
    assert claim is None and access["spec"]["bucketClaimName"] == "theirs"
    claim, access = cosi({"bucketClass": "s3", "bucketAccess": "theirs"})
    assert claim is not None and access is None
    assert cosi({"bucketClaim": "c", "bucketAccess": "a"}) == (None, None)


def test_names_are_deterministic(registry_factory, facts_factory):
    reg = registry_factory({"config": {"storage": {"objectStorage": {"bucketClass": "s3", "bucketAccessClass": "rw"}}},
                            "replicas": 2}, name="team-a")
    first = kinds(build_all(reg, facts_factory(), http_secret_value="one"))
    other_facts = facts_factory(agent_image="elsewhere/berth:9", pvc_access_modes=("ReadWriteMany",))
    assert kinds(build_all(reg, other_facts, http_secret_value="two")) == first
    assert first == [
        ("ServiceAccount", "team-a-agent"), ("Role", "team-a-agent"), ("RoleBinding", "team-a-agent"),
        ("Secret", "team-a-http-secret"), ("BucketClaim", "team-a-bucket"), ("BucketAccess", "team-a-bucket-access"),
        ("Service", "team-a"), ("Service", "team-a-metrics"),
        ("Deployment", "team-a"), ("PodDisruptionBudget", "team-a"), ("Lease", "team-a-reload"),
        ("Lease", "team-a-gc"),
    ]
    assert selector_string(reg) == "app.kubernetes.io/instance=team-a,app.kubernetes.io/name=registry"
    assert bucket_access.secret_name(reg) == "team-a-cosi-credentials"


def test_missing_uid_is_a_clear_error(facts_factory):
    reg = Registry.model_validate({"metadata": {"name": "demo", "namespace": "ns"},
                                   "spec": {"config": {"storage": {"inmemory": {}}}}})
    with pytest.raises(ValueError, match="metadata.uid"):
        build_all(reg, facts_factory(), http_secret_value=None)


def test_the_reload_lease_is_created_empty_under_the_name_the_agent_uses(registry_factory, facts_factory):
    from berth_api.leases import reload_lease_name

    reg = registry_factory({"replicas": 3, "config": {"storage": {"inmemory": {}}}})
    lease = leases(reg, facts_factory())["demo-reload"]
    assert lease["apiVersion"] == "coordination.k8s.io/v1"
    assert lease["metadata"]["name"] == lease_builder.name(reg) == reload_lease_name("demo")
    assert lease["spec"] == {}  # the agents own holderIdentity and the rest; the apply layer never patches it
    assert lease_rule(reg, facts_factory(), lease["metadata"]["name"]) == {
        "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
        "resourceNames": [lease["metadata"]["name"]], "verbs": ["get", "update"]}


def leases(reg, facts) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in build_all(reg, facts, http_secret_value=None) if o["kind"] == "Lease"}


def lease_rule(reg, facts, name: str) -> dict:
    """The agent Role's one rule on Leases naming name."""
    role = by_kind(build_all(reg, facts, http_secret_value=None))["Role"]
    [rule] = [rule for rule in role["rules"] if "leases" in rule["resources"] and name in rule["resourceNames"]]
    return rule


@pytest.mark.parametrize("replicas", [1, 3])
def test_the_gc_lease_is_created_empty_at_any_replica_count(registry_factory, facts_factory, replicas):
    """Every Registry has its <name>-gc Lease (a first GC request needs no new object), the agent Role may get
    and update that one Lease by name, nothing more (no create, delete, list: the operator creates it)."""
    reg = registry_factory({"replicas": replicas, "config": {"storage": {"inmemory": {}}}})
    lease = leases(reg, facts_factory())["demo-gc"]
    assert lease["metadata"]["name"] == lease_builder.gc_name(reg) == "demo-gc"
    assert lease["spec"] == {}
    assert lease["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"
    assert lease_rule(reg, facts_factory(), "demo-gc") == {
        "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["demo-gc"],
        "verbs": ["get", "update"]}


def test_the_gc_lease_has_the_name_the_agent_uses(registry_factory):
    from berth_api.leases import gc_lease_name

    reg = registry_factory({"config": {"storage": {"inmemory": {}}}})
    assert lease_builder.gc_name(reg) == gc_lease_name("demo")
