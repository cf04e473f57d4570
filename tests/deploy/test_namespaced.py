"""deploy/namespaced/ (the namespaced install): the same operator as deploy/, for the namespaces it lists, with its
grants split by scope and nothing more. The tenant Role holds exactly the cluster-wide ClusterRole's rules on
namespaced resources; the cluster reads hold only what no namespace has; neither reaches a Secret cluster-wide.
On a real API server: tests/apiserver/test_namespaced_install.py."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import yaml

from support.clusters.apiserver import REPO

# What a namespaced operator reads cluster-wide, each because no namespace holds it (cluster-reads.yaml).
CLUSTER_SCOPED = {"storageclasses", "bucketclasses", "bucketaccessclasses", "customresourcedefinitions"}
# kopf lists Namespaces only when it scans (cluster-wide, or namespace globs): the namespaced install does not.
NOT_NEEDED = {"namespaces"}


def load(*parts: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((REPO.joinpath(*parts)).read_text()) if doc]


def rules(doc: dict) -> list[tuple]:
    return sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r.get("resourceNames", ())), tuple(r["verbs"]))
                  for r in doc["rules"])


def test_the_tenant_role_is_the_cluster_roles_namespaced_rules() -> None:
    [cluster_role] = load("deploy", "clusterrole.yaml")
    [role] = [doc for doc in load("deploy", "namespaced", "tenant", "role.yaml") if doc["kind"] == "Role"]
    namespaced = dict(cluster_role, rules=[r for r in cluster_role["rules"]
                                           if not set(r["resources"]) & (CLUSTER_SCOPED | NOT_NEEDED)])
    assert rules(role) == rules(namespaced)


def test_the_cluster_reads_are_the_cluster_roles_cluster_scoped_reads_only() -> None:
    [cluster_role] = load("deploy", "clusterrole.yaml")
    [reads] = [doc for doc in load("deploy", "namespaced", "cluster-reads.yaml") if doc["kind"] == "ClusterRole"]
    scoped = dict(cluster_role, rules=[r for r in cluster_role["rules"] if set(r["resources"]) & CLUSTER_SCOPED])
    assert rules(reads) == rules(scoped)
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in reads["rules"])


def test_the_tenant_role_and_the_cluster_reads_are_what_deploy_namespaced_rbac_py_writes() -> None:
    """A kind's rule is written once, in deploy/clusterrole.yaml: the namespaced install's Role and cluster reads
    are generated from it (`python deploy/namespaced_rbac.py`), never edited by hand."""
    spec = importlib.util.spec_from_file_location("berth_namespaced_rbac", REPO / "deploy" / "namespaced_rbac.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert (REPO / "deploy" / "namespaced" / "tenant" / "role.yaml").read_text() == script.tenant_role()
    assert (REPO / "deploy" / "namespaced" / "cluster-reads.yaml").read_text() == script.cluster_reads()
    assert script.CLUSTER_SCOPED == CLUSTER_SCOPED and script.NOT_NEEDED == NOT_NEEDED


def test_the_namespaced_build_has_no_cluster_role_reaching_a_secret_and_watches_its_list() -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed (the base image has it)"
    built = [doc for doc in yaml.safe_load_all(subprocess.run(
        [kubectl, "kustomize", str(REPO / "deploy" / "namespaced")], capture_output=True, text=True, check=True,
        timeout=120).stdout) if doc]
    cluster_roles = [doc for doc in built if doc["kind"] == "ClusterRole"]
    assert {doc["metadata"]["name"] for doc in cluster_roles} == {
        "berth-operator-cluster-reads", "berth-registry-view", "berth-registry-edit"}
    assert not [r for doc in cluster_roles for r in doc["rules"] if "secrets" in r["resources"]]
    [deployment] = [doc for doc in built if doc["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--all-namespaces" not in container["args"]
    [watch] = [env for env in container["env"] if env["name"] == "WATCH_NAMESPACE"]
    [config_map] = [doc for doc in built if doc["kind"] == "ConfigMap"]
    assert watch["valueFrom"]["configMapKeyRef"]["name"] == config_map["metadata"]["name"]
    assert config_map["metadata"]["namespace"] == "berth-system" and "WATCH_NAMESPACE" in config_map["data"]
