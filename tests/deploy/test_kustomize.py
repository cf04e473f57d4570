"""`kubectl kustomize deploy` builds offline, and what it builds validates and meets our rules.

Acceptance: the install output validates like every built manifest: kubernetes-validate --strict
for Kubernetes 1.30 and the newest version it knows, the restricted Pod Security Standard field by field,
and a ClusterRole without wildcards. deploy/ holds the operator only, never the CRD: `kubectl delete -k deploy`
is the uninstall, and it must leave every Registry serving (docs/guide/uninstall.md; the CRD is `kubectl apply
-k crds`, a separate step).
"""

from __future__ import annotations

import functools
import os
import pathlib
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from support.clusters.pss import restricted_violations

REPO = pathlib.Path(__file__).resolve().parents[2]
VERSIONS = ["1.30.0", latest_version()]
NAMESPACE = "berth-system"


@functools.cache
def built() -> tuple[dict, ...]:
    """The objects `kubectl kustomize deploy` prints, built with every network route closed."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (1.30+) must be on PATH: the install is built with `kubectl kustomize`"
    # A proxy that refuses everything: any attempt to fetch a remote base would fail the build.
    offline = {**os.environ, "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
    result = subprocess.run([kubectl, "kustomize", str(REPO / "deploy")], capture_output=True, text=True,
                            env=offline, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def one(kind: str, name: str | None = None) -> dict:
    [obj] = [obj for obj in built() if obj["kind"] == kind and name in (None, obj["metadata"]["name"])]
    return obj


def test_builds_exactly_the_install_objects() -> None:
    assert sorted((obj["kind"], obj["metadata"]["name"]) for obj in built()) == [
        ("ClusterRole", "berth-operator"),
        ("ClusterRole", "berth-registry-edit"),  # users' roles, aggregated into edit and admin
        ("ClusterRole", "berth-registry-view"),  # and into view
        ("ClusterRoleBinding", "berth-operator"),
        ("Deployment", "berth-operator"),
        ("FlowSchema", "berth-operator-leader-election"),  # the leader's Lease requests' priority (cluster-wide)
        ("Namespace", NAMESPACE),
        ("PodDisruptionBudget", "berth-operator"),
        ("Role", "berth-operator-leader-election"),
        ("RoleBinding", "berth-operator-leader-election"),
        ("ServiceAccount", "berth-operator"),
    ]
    for obj in built():
        if obj["kind"] in ("Deployment", "ServiceAccount", "PodDisruptionBudget", "Role", "RoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE


def test_the_uninstall_never_deletes_the_crd() -> None:
    """`kubectl delete -k deploy` deletes what deploy/ builds: a CRD there would take every Registry with it."""
    assert [obj["metadata"]["name"] for obj in built() if obj["kind"] == "CustomResourceDefinition"] == []
    kustomization = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    assert not [r for r in kustomization["resources"] if "crds" in r], kustomization["resources"]


def test_the_crd_install_is_the_generated_file() -> None:
    """`kubectl apply -k crds`, the install's first command, builds exactly the generated CRD."""
    kubectl = shutil.which("kubectl")
    assert kubectl
    result = subprocess.run([kubectl, "kustomize", str(REPO / "crds")], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    [installed] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    committed = yaml.safe_load((REPO / "crds" / "berth.dev_registries.yaml").read_text())
    assert installed["spec"] == committed["spec"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly(version: str) -> None:
    # Every object here is a built-in kind.
    for obj in built():
        # Checked against that very version's schema (the library answers with the one it used).
        assert kubernetes_validate.validate(obj, version, strict=True) == version.rsplit(".", 1)[0], obj["kind"]


def test_validation_would_catch_a_typo() -> None:
    broken = yaml.safe_load(yaml.safe_dump(one("Deployment")))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)


def test_operator_pod_is_restricted() -> None:
    template = one("Deployment")["spec"]["template"]
    assert restricted_violations(template) == []
    namespace_labels = one("Namespace")["metadata"]["labels"]
    assert namespace_labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_two_replicas_one_leader_and_a_budget() -> None:
    """Two replicas (leader election keeps one acting), never both evicted at once."""
    deployment = one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pdb = one("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-leader-elect" not in args  # on by default
    # The Lease rules are namespaced, bound to the operator, and name only leases.
    role, binding = one("Role"), one("RoleBinding")
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "patch"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "berth-operator", "namespace": NAMESPACE}]


def test_operator_container() -> None:
    deployment = one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    [container] = pod["containers"]
    assert container["command"] == ["berth-operator"]
    assert container["image"] == "ghcr.io/berth-dev/berth:0.1.0"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"healthz": 8080, "metrics": 9090}
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    assert "--metrics-port=9090" in container["args"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    env = {item["name"]: item["valueFrom"]["fieldRef"]["fieldPath"] for item in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}


def test_cluster_role_has_no_wildcards_and_is_bound_to_the_operator() -> None:
    role = one("ClusterRole", "berth-operator")
    for rule in role["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), f"wildcard in {field}: {rule}"
            assert all("*" not in value for value in rule.get(field, [])), rule
        assert "nonResourceURLs" not in rule
        assert not set(rule["verbs"]) & {"escalate", "bind", "impersonate"}, rule
    binding = one("ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "berth-operator", "namespace": NAMESPACE}]


def test_the_user_roles_reach_registries_only_and_aggregate_into_the_built_in_roles() -> None:
    """deploy/base/user-roles.yaml: whoever holds `view` in a namespace reads its Registries, whoever holds
    `edit` or `admin` also writes them; nothing else (no Secret, no status write, no wildcard), and nobody is bound
    to them here: the built-in roles carry them (tests/apiserver/test_user_roles.py proves it on a real server)."""
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    view, edit = one("ClusterRole", "berth-registry-view"), one("ClusterRole", "berth-registry-edit")
    assert {k for k, v in view["metadata"]["labels"].items() if k.startswith(aggregate) and v == "true"} == {
        f"{aggregate}view", f"{aggregate}edit", f"{aggregate}admin"}
    assert {k for k, v in edit["metadata"]["labels"].items() if k.startswith(aggregate) and v == "true"} == {
        f"{aggregate}edit", f"{aggregate}admin"}
    assert view["rules"] == [{"apiGroups": ["berth.dev"], "resources": ["registries", "registries/status",
                                                                       "registries/scale"],
                              "verbs": ["get", "list", "watch"]}]
    assert edit["rules"] == [{"apiGroups": ["berth.dev"], "resources": ["registries", "registries/scale"],
                              "verbs": ["create", "update", "patch", "delete", "deletecollection"]}]
    bound = {obj["roleRef"]["name"] for obj in built() if obj["kind"] in ("ClusterRoleBinding", "RoleBinding")}
    assert not bound & {"berth-registry-view", "berth-registry-edit"}
