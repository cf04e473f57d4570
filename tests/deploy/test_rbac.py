"""deploy/clusterrole.yaml (and deploy/leader-election-role.yaml, for the leader Lease in the operator's
namespace) match what berth-operator does, both ways.

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
from berth_operator.builders import ClusterFacts, deployment, role
from berth_operator.leader import LeaseSettings
from support.kube import KubeApi
from support.operator_harness import AGENT_IMAGE, OperatorHarness, wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
COSI = "objectstorage.k8s.io/v1alpha1"
OPERATOR_NAMESPACE = "berth-system"

# Granted but not exercised by this scenario, and why each is still needed.
UNEXERCISED_GRANTS = {
    ("berth.dev", "registries/finalizers", "update"):
        "owner references set blockOwnerDeletion; the OwnerReferencesPermissionEnforcement admission plugin checks "
        "this",
    ("events.k8s.io", "events", "create"): "the agent Role grants it (escalation prevention)",
    ("events.k8s.io", "events", "patch"): "the agent Role grants it (escalation prevention)",
    ("", "events", "patch"): "the agent Role grants it (escalation prevention)",
    ("", "namespaces", "list"): "kopf watches Namespaces when run with --namespace instead of --all-namespaces",
    ("", "namespaces", "watch"): "kopf watches Namespaces when run with --namespace instead of --all-namespaces",
    ("coordination.k8s.io", "leases", "update"): "the agent Role grants it (escalation prevention)",
    ("", "pods", "get"): "berth-operator reads its own Pod (POD_NAME) at start to learn the agent image",
    ("", "secrets", "list"): "the agent Role grants it on the pod's own Secrets (escalation prevention)",
    ("", "secrets", "watch"): "the agent Role grants it on the pod's own Secrets (escalation prevention)",
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


def _grants(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def cluster_role_grants() -> set[tuple[str, str, str]]:
    return _grants(yaml.safe_load((REPO / "deploy" / "clusterrole.yaml").read_text())["rules"])


def leader_role_grants() -> set[tuple[str, str, str]]:
    """The namespaced Role for the leader Lease: it holds in OPERATOR_NAMESPACE only."""
    docs = yaml.safe_load_all((REPO / "deploy" / "leader-election-role.yaml").read_text())
    [role] = [doc for doc in docs if doc["kind"] == "Role"]
    return _grants(role["rules"])


def namespace_of(target: str) -> str | None:
    segments = [s for s in urllib.parse.urlsplit(target).path.split("/") if s]
    return segments[segments.index("namespaces") + 1] if "namespaces" in segments[:-1] else None


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
                "provisioner": "example.com/none", "allowVolumeExpansion": True})
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
def requests() -> list[tuple[str, str]]:
    """What the operator asked of the API server across the scenario, as (method, target)."""
    with KubeApi() as api:
        seed(api)
        created = {
            ("fs-class", "ci-cache"): api.create(example("filesystem-storageclass", "fs-class")),
            ("fs-pvc", "team-registry"): api.create(example("filesystem-pvc", "fs-pvc")),
            ("cosi", "shared-registry"): api.create(example("cosi-classes", "cosi")),
            ("full", "registry"): api.create(example("full", "full")),  # its Secrets are missing: Degraded
        }
        # Cluster-wide and electing a leader, as deploy/ runs it (a short Lease: renewals happen in the scenario).
        lease = LeaseSettings(namespace=OPERATOR_NAMESPACE, identity="rbac-test", lease_duration=3,
                              renew_deadline=2, retry_period=0.2)
        harness = OperatorHarness(api, None, leader=lease).start()
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
                wait_for(lambda kind=kind, name=name:
                         api.get(DRIFTED_KINDS[kind], "cosi", name)["metadata"].get("labels"),
                         f"{kind} {name} labels restored")
            # Scale the COSI registry down: its PodDisruptionBudget is pruned.
            assert api.get("policy/v1/poddisruptionbudgets", "cosi", "shared-registry") is not None
            api.patch("berth.dev/v1alpha1/registries", "cosi", "shared-registry", {"spec": {"replicas": 1}})
            wait_for(lambda: api.get("policy/v1/poddisruptionbudgets", "cosi", "shared-registry") is None,
                     "PodDisruptionBudget pruned")
            # An image edit patches the Deployment; a larger size grows the claim; a delete goes through
            # kopf's finalizer.
            api.patch("berth.dev/v1alpha1/registries", "fs-class", "ci-cache", {"spec": {"image": "registry:3.0.0"}})
            harness.wait_reconciled("fs-class", "ci-cache")
            api.patch("berth.dev/v1alpha1/registries", "fs-class", "ci-cache",
                      {"spec": {"config": {"storage": {"filesystem": {"size": "60Gi"}}}}})
            wait_for(lambda: api.get("v1/persistentvolumeclaims", "fs-class", "ci-cache-data")["spec"]["resources"]
                     ["requests"]["storage"] == "60Gi", "the claim to grow")
            api.delete("berth.dev/v1alpha1/registries", "fs-pvc", "team-registry")
            wait_for(lambda: api.get("berth.dev/v1alpha1/registries", "fs-pvc", "team-registry") is None,
                     "Registry deleted")
        finally:
            harness.stop()
        return api.requests()


def is_leader_lease_request(target: str) -> bool:
    """A request on the operator's own Lease (deploy/leader-election-role.yaml grants it, in its namespace);
    the Registries' reload Leases, in their namespaces, are the ClusterRole's."""
    return namespace_of(target) == OPERATOR_NAMESPACE and "/leases" in target


@pytest.fixture(scope="module")
def exercised(requests: list[tuple[str, str]]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every request except the leader Lease's."""
    return {triple for method, target in requests
            if (triple := request_triple(method, target)) and not is_leader_lease_request(target)}


@pytest.fixture(scope="module")
def lease_requests(requests: list[tuple[str, str]]) -> list[tuple[tuple[str, str, str], str | None]]:
    return [(triple, namespace_of(target)) for method, target in requests
            if (triple := request_triple(method, target)) and is_leader_lease_request(target)]


def test_every_request_is_allowed(exercised: set[tuple[str, str, str]]) -> None:
    assert exercised - cluster_role_grants() == set(), "the operator makes requests deploy/clusterrole.yaml forbids"


def test_every_grant_is_used_or_justified(exercised: set[tuple[str, str, str]]) -> None:
    unused = cluster_role_grants() - exercised
    assert unused - set(UNEXERCISED_GRANTS) == set(), "grants nothing uses: drop them or say why in UNEXERCISED_GRANTS"
    assert set(UNEXERCISED_GRANTS) <= cluster_role_grants(), "UNEXERCISED_GRANTS names something not granted"


def test_the_leader_lease_requests_match_the_namespaced_role(lease_requests) -> None:
    assert lease_requests, "the scenario elected no leader"
    assert {namespace for _, namespace in lease_requests} == {OPERATOR_NAMESPACE}
    assert {triple for triple, _ in lease_requests} == leader_role_grants()


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "examples").glob("*.yaml")))
def test_the_operator_holds_everything_it_grants_agents(name: str) -> None:
    reg = Registry.model_validate(yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text())
                                  | {"metadata": {"name": "r", "namespace": "ns", "uid": "u"}})
    facts = ClusterFacts(agent_image=AGENT_IMAGE, bucket_access_secret="access-credentials")
    agent_role = role.build(reg, facts)
    needed = {(group, resource, verb) for rule in agent_role["rules"] for group in rule["apiGroups"]
              for resource in rule["resources"] for verb in rule["verbs"]}
    assert needed - cluster_role_grants() == set()
    # Secrets only by name, and only those the pod mounts (issue 11): never a rule over every Secret.
    secret_rules = [rule for rule in agent_role["rules"] if "secrets" in rule["resources"]]
    assert len(secret_rules) == 1 and secret_rules[0]["resourceNames"]
    volumes = deployment.build(reg, facts)["spec"]["template"]["spec"]["volumes"]
    assert secret_rules[0]["resourceNames"] == sorted({v["secret"]["secretName"] for v in volumes if "secret" in v})
