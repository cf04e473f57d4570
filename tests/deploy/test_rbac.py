"""deploy/clusterrole.yaml matches what berth-operator does, both ways.

The operator runs in process, cluster-wide as deploy/deployment.yaml runs it, against the test API server
(support.kube), through the examples, an edit, a scale-down and a delete. Every request it makes must be
allowed by the ClusterRole; every grant it did not use must be listed below with the reason it is needed.
The ClusterRole must also hold every rule of the agent Role the operator creates (RBAC escalation
prevention: a Role can only grant what its creator holds).
"""

from __future__ import annotations

import pathlib
import urllib.parse

import pytest
import yaml

from berth_api import Registry
from berth_operator.builders import ClusterFacts, role
from support.kube import KubeApi
from support.operator_harness import AGENT_IMAGE, OperatorHarness, wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
COSI = "objectstorage.k8s.io/v1alpha1"

# Granted but not exercised by this scenario, and why each is still needed.
UNEXERCISED_GRANTS = {
    ("berth.dev", "registries/finalizers", "update"):
        "owner references set blockOwnerDeletion; the OwnerReferencesPermissionEnforcement admission plugin checks this",
    ("events.k8s.io", "events", "create"): "the agent Role grants it (escalation prevention)",
    ("events.k8s.io", "events", "patch"): "the agent Role grants it (escalation prevention)",
    ("", "events", "patch"): "the agent Role grants it (escalation prevention)",
    ("", "namespaces", "list"): "kopf watches Namespaces when run with --namespace instead of --all-namespaces",
    ("", "namespaces", "watch"): "kopf watches Namespaces when run with --namespace instead of --all-namespaces",
    ("coordination.k8s.io", "leases", "update"): "the agent Role grants it (escalation prevention)",
    ("", "pods", "get"): "berth-operator reads its own Pod (POD_NAME) at start to learn the agent image",
    ("objectstorage.k8s.io", "bucketaccesses", "delete"): "a BucketAccess the operator made is pruned when the "
                                                          "Registry switches to an existing one",
}


# Kinds the apply layer patches only when the live object drifted from what the builders make.
DRIFTED_KINDS = {
    "ServiceAccount": "v1/serviceaccounts",
    "Role": "rbac.authorization.k8s.io/v1/roles",
    "RoleBinding": "rbac.authorization.k8s.io/v1/rolebindings",
    "Service": "v1/services",
    "PodDisruptionBudget": "policy/v1/poddisruptionbudgets",
}


def cluster_role_grants() -> set[tuple[str, str, str]]:
    rules = yaml.safe_load((REPO / "deploy" / "clusterrole.yaml").read_text())["rules"]
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def request_triple(method: str, target: str) -> tuple[str, str, str] | None:
    """(apiGroup, resource[/subresource], verb) of a resource request; None for discovery paths."""
    url = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(url.query)
    segments = [s for s in url.path.split("/") if s]
    if segments[:1] == ["api"] and len(segments) >= 3:
        group, rest = "", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 4:
        group, rest = segments[1], segments[3:]
    else:
        return None  # /api, /apis, /apis/G/V, /version: discovery, open to every authenticated user
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    named = len(rest) >= 2
    resource = "/".join([rest[0], *rest[2:3]])
    if method == "GET":
        verb = "watch" if query.get("watch", [""])[0].lower() == "true" else ("get" if named else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method) or (
            "delete" if named else "deletecollection")
    return group, resource, verb


def seed(api: KubeApi) -> None:
    api.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
                "provisioner": "example.com/none"})
    api.create({"apiVersion": COSI, "kind": "BucketClass", "metadata": {"name": "s3-standard"},
                "driverName": "example.com/none", "deletionPolicy": "Delete"})
    api.create({"apiVersion": COSI, "kind": "BucketAccessClass", "metadata": {"name": "s3-key-access"},
                "driverName": "example.com/none", "authenticationType": "Key"})
    api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "team-registry-data", "namespace": "fs-pvc"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    api.patch("v1/persistentvolumeclaims", "fs-pvc", "team-registry-data", {"status": {"phase": "Bound"}},
              subresource="status")


def example(name: str, namespace: str) -> dict:
    reg = yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text())
    reg["metadata"]["namespace"] = namespace
    return reg


@pytest.fixture(scope="module")
def exercised() -> set[tuple[str, str, str]]:
    """What the operator asked of the API server across the scenario."""
    with KubeApi() as api:
        seed(api)
        created = {
            ("fs-class", "ci-cache"): api.create(example("filesystem-storageclass", "fs-class")),
            ("fs-pvc", "team-registry"): api.create(example("filesystem-pvc", "fs-pvc")),
            ("cosi", "shared-registry"): api.create(example("cosi-classes", "cosi")),
            ("full", "registry"): api.create(example("full", "full")),  # its Secrets are missing: Degraded
        }
        harness = OperatorHarness(api, None).start()  # cluster-wide, as deploy/ runs it
        try:
            for namespace, name in created:
                harness.wait_reconciled(namespace, name)
            # Drift: strip the labels of what the COSI registry owns; the next reconcile patches them back.
            uid = created["cosi", "shared-registry"]["metadata"]["uid"]
            drifted = {key: obj for key, obj in harness.owned("cosi", uid).items() if key[0] in DRIFTED_KINDS}
            assert {kind for kind, _ in drifted} == set(DRIFTED_KINDS)
            for kind, name in drifted:
                api.patch(DRIFTED_KINDS[kind], "cosi", name, {"metadata": {"labels": None}})
            api.patch("berth.dev/v1alpha1/registries", "cosi", "shared-registry",
                      {"spec": {"config": {"log": {"level": "debug"}}}})
            harness.wait_reconciled("cosi", "shared-registry")
            for kind, name in drifted:
                wait_for(lambda: api.get(DRIFTED_KINDS[kind], "cosi", name)["metadata"].get("labels"),
                         f"{kind} {name} labels restored")
            # Scale the COSI registry down: its PodDisruptionBudget is pruned.
            assert api.get("policy/v1/poddisruptionbudgets", "cosi", "shared-registry") is not None
            api.patch("berth.dev/v1alpha1/registries", "cosi", "shared-registry", {"spec": {"replicas": 1}})
            wait_for(lambda: api.get("policy/v1/poddisruptionbudgets", "cosi", "shared-registry") is None,
                     "PodDisruptionBudget pruned")
            # An image edit patches the Deployment; a delete goes through kopf's finalizer.
            api.patch("berth.dev/v1alpha1/registries", "fs-class", "ci-cache", {"spec": {"image": "registry:3.0.0"}})
            harness.wait_reconciled("fs-class", "ci-cache")
            api.delete("berth.dev/v1alpha1/registries", "fs-pvc", "team-registry")
            wait_for(lambda: api.get("berth.dev/v1alpha1/registries", "fs-pvc", "team-registry") is None,
                     "Registry deleted")
        finally:
            harness.stop()
        return {triple for method, target in api.requests() if (triple := request_triple(method, target))}


def test_every_request_is_allowed(exercised: set[tuple[str, str, str]]) -> None:
    assert exercised - cluster_role_grants() == set(), "the operator makes requests deploy/clusterrole.yaml forbids"


def test_every_grant_is_used_or_justified(exercised: set[tuple[str, str, str]]) -> None:
    unused = cluster_role_grants() - exercised
    assert unused - set(UNEXERCISED_GRANTS) == set(), "grants nothing uses: drop them or say why in UNEXERCISED_GRANTS"
    assert set(UNEXERCISED_GRANTS) <= cluster_role_grants(), "UNEXERCISED_GRANTS names something not granted"


def test_the_operator_holds_everything_it_grants_agents() -> None:
    reg = Registry.model_validate(yaml.safe_load((REPO / "examples" / "inmemory.yaml").read_text())
                                  | {"metadata": {"name": "r", "namespace": "ns", "uid": "u"}})
    agent_role = role.build(reg, ClusterFacts(agent_image=AGENT_IMAGE))
    needed = {(group, resource, verb) for rule in agent_role["rules"] for group in rule["apiGroups"]
              for resource in rule["resources"] for verb in rule["verbs"]}
    assert needed - cluster_role_grants() == set()
