"""The namespaced install (deploy/namespaced/) on a real API server, installed with docs/guide/install.md's commands:
`berth-operator` for two namespaces, with the install's RBAC alone (its token: no ClusterRole but the cluster reads)
and every optional API served.

- It reconciles the Registries of its namespaces, each asking for every kind Berth makes (a claim from a class,
  COSI from classes, a ServiceMonitor, an Ingress, an HTTPRoute, Certificates, a NetworkPolicy, a
  PodDisruptionBudget), and leaves a Registry in a third namespace alone (no status, no object).
- Nothing it asks is refused (the audit log), and its log has no refusal in it.
- With the cluster reads left out (their binding deleted), a new operator still reconciles every Registry: the
  classes are not checked and the Ready condition says so, the optional APIs come from the API's discovery, and
  nothing is refused but the first list of each class kind, which its log reports without an error.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.clusters.apiserver import (
    REPO,
    KubeApiServer,
    forbidden,
    install_cert_manager_crds,
    install_cosi_crds,
    install_gateway_api_crds,
    install_monitoring_crds,
    skip_reason,
    token_id,
)
from support.clusters.apiserver_identities import OPERATOR_NAMESPACE, OPERATOR_SA, OPERATOR_USER
from support.clusters.operator_harness import REGISTRIES_PATH, OperatorProcess
from support.common.doc_commands import commands
from support.common.polling import wait_for

WATCHED = ("team-a", "team-b")
COSI = "objectstorage.k8s.io/v1alpha1"
ISSUER = {"name": "ca", "kind": "ClusterIssuer"}
CLASSES = ({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
            "provisioner": "example.com/none"},
           {"apiVersion": COSI, "kind": "BucketClass", "metadata": {"name": "b"}, "driverName": "example.com/none",
            "deletionPolicy": "Delete"},
           {"apiVersion": COSI, "kind": "BucketAccessClass", "metadata": {"name": "a"},
            "driverName": "example.com/none", "authenticationType": "Key"})
EVERY_KIND = {
    "config": {"storage": {"filesystem": {"storageClass": "standard", "size": "1Gi"}}},
    "http": {"tls": {"issuerRef": ISSUER}},
    "monitoring": {"serviceMonitor": {"interval": "30s"}},
    "ingress": {"className": "nginx", "hosts": ["registry.example.com"], "tls": {"issuerRef": ISSUER}},
    "gateway": {"parentRefs": [{"name": "public", "sectionName": "https"}], "hostnames": ["registry.example.com"]},
    "networkPolicy": {"from": [{"podSelector": {}}],
                      "metricsFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}]},
}
REGISTRIES = {
    ("team-a", "every-kind"): EVERY_KIND,
    ("team-a", "cosi"): {"replicas": 2,  # a PodDisruptionBudget (the claim above holds one replica)
                         "config": {"storage": {"objectStorage": {"bucketClass": "b", "bucketAccessClass": "a"}}}},
    ("team-b", "plain"): {"config": {"storage": {"inmemory": {}}}},
}


def registry(namespace: str, name: str, spec: dict) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def sh(api: KubeApiServer, home: Path, cwd: Path, command: str) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed (the base image has it)"
    env = {"KUBECONFIG": str(api.kubeconfig), "PATH": f"{Path(kubectl).parent}:/usr/bin:/bin", "HOME": str(home)}
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    return done.stdout


def install_as_documented(api: KubeApiServer, home: Path) -> Path:
    """install.md's namespaced install in a copy of the checkout's install files, its namespaces written as the
    guide says; the operator's Deployment and budget left out (no kubelet: the operator runs as a process)."""
    checkout = home / "checkout"
    for part in ("crds", "deploy"):
        shutil.copytree(REPO / part, checkout / part)
    for namespace in (*WATCHED, "team-c"):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for command in commands("install-namespaced"):
        if command.startswith("kubectl apply -k deploy/namespaced"):
            built = [doc for doc in yaml.safe_load_all(sh(api, home, checkout, "kubectl kustomize deploy/namespaced"))
                     if doc and doc["kind"] not in ("Deployment", "PodDisruptionBudget")]
            (home / "operator.yaml").write_text(yaml.safe_dump_all(built))
            command = f"kubectl apply -f {home / 'operator.yaml'}"
        sh(api, home, checkout, command)
    return checkout


def start(api: KubeApiServer, log_dir: Path, name: str) -> tuple[OperatorProcess, str]:
    token = api.service_account_token(OPERATOR_NAMESPACE, OPERATOR_SA)
    process = OperatorProcess(api, name, log_dir, namespaces=list(WATCHED),
                              lease={"name": "berth-operator", "namespace": OPERATOR_NAMESPACE},
                              kubeconfig=api.kubeconfig_for(token)).start()
    wait_for(lambda: (health := process.health()) is not None and health[0] == 200, "the operator leading", 60)
    return process, token


def reconciled_at_generation(api: KubeApiServer, namespace: str, name: str) -> dict | None:
    reg = api.get(REGISTRIES_PATH, namespace, name)
    conditions = (reg.get("status") or {}).get("conditions") or []
    if conditions and all(c.get("observedGeneration") == reg["metadata"]["generation"] for c in conditions):
        return reg
    return None


def refused(api: KubeApiServer, token: str) -> list[tuple[str, str]]:
    return [(e["verb"], e["requestURI"]) for e in api.audit(OPERATOR_USER) if forbidden(e)
            and (e["user"].get("extra") or {}).get("authentication.kubernetes.io/credential-id") == [token_id(token)]]


@pytest.mark.timeout(600)  # two operators one after the other, each starting and converging: a loaded machine is slow
def test_the_namespaced_install_reconciles_its_namespaces_only_and_is_refused_nothing(tmp_path) -> None:
    if skip_reason():
        pytest.skip(skip_reason())
    with KubeApiServer() as api:
        for install in (install_cosi_crds, install_monitoring_crds, install_gateway_api_crds,
                        install_cert_manager_crds):
            install(api)
        for obj in CLASSES:
            api.create(obj)
        install_as_documented(api, tmp_path)
        assert api.get("rbac.authorization.k8s.io/v1/clusterroles", None, "berth-operator") is None
        for (namespace, name), spec in REGISTRIES.items():
            api.create(registry(namespace, name, spec))
        api.create(registry("team-c", "ignored", {"config": {"storage": {"inmemory": {}}}}))

        operator, token = start(api, tmp_path, "berth-operator-0")
        try:
            for namespace, name in REGISTRIES:
                reg = wait_for(lambda n=namespace, r=name: reconciled_at_generation(api, n, r),
                               f"{namespace}/{name} reconciled", 90)
                degraded = {c["type"]: c for c in reg["status"]["conditions"]}["Degraded"]
                assert degraded["reason"] != "ApplyFailed", degraded
            for path, name in (("monitoring.coreos.com/v1/servicemonitors", "every-kind"),
                               ("networking.k8s.io/v1/ingresses", "every-kind"),
                               ("networking.k8s.io/v1/networkpolicies", "every-kind"),
                               ("gateway.networking.k8s.io/v1/httproutes", "every-kind"),
                               ("policy/v1/poddisruptionbudgets", "cosi"),
                               ("v1/persistentvolumeclaims", "every-kind-data"),
                               (f"{COSI}/bucketclaims", "cosi-bucket")):
                assert api.get(path, "team-a", name) is not None, path
            assert api.list("cert-manager.io/v1/certificates", "team-a"), "no Certificate made"
            ignored = api.get(REGISTRIES_PATH, "team-c", "ignored")
            assert "status" not in ignored and api.get("apps/v1/deployments", "team-c", "ignored") is None
            assert refused(api, token) == []
            assert "Forbidden" not in operator.log() and " 403" not in operator.log(), operator.log()[-3000:]
        finally:
            assert operator.stop() == 0, operator.log()[-3000:]

        # The cluster reads left out: every Registry still reconciled, the classes noted as not checked.
        api.delete("rbac.authorization.k8s.io/v1/clusterrolebindings", None, "berth-operator-cluster-reads")
        operator, token = start(api, tmp_path, "berth-operator-1")
        try:
            for namespace, name in REGISTRIES:
                api.patch(REGISTRIES_PATH, namespace, name, {"metadata": {"labels": {"edited": "yes"}},
                                                             "spec": {"http": {"drainTimeout": "31s"}}})
            for namespace, name in REGISTRIES:
                wait_for(lambda n=namespace, r=name: reconciled_at_generation(api, n, r),
                         f"{namespace}/{name} reconciled again", 90)
            ready = {c["type"]: c for c in api.get(REGISTRIES_PATH, "team-a", "every-kind")["status"]
                     ["conditions"]}["Ready"]
            assert "not checked: StorageClass standard exists" in ready["message"], ready
            ready = {c["type"]: c for c in api.get(REGISTRIES_PATH, "team-a", "cosi")["status"]["conditions"]}["Ready"]
            assert "BucketClass b exists" in ready["message"] and "BucketAccessClass a exists" in ready["message"]
            log = operator.log()
            assert "may not be listed by this operator" in log and "API server's discovery" in log
            assert "Forbidden" not in log and '"severity": "warning"' not in log.lower().replace("'", '"'), log[-3000:]
            # Refused: only the first list of each class kind and of the CRDs (then quiet), never a namespaced read.
            assert {uri.split("?")[0] for _verb, uri in refused(api, token)} <= {
                "/apis/storage.k8s.io/v1/storageclasses", f"/apis/{COSI}/bucketclasses",
                f"/apis/{COSI}/bucketaccessclasses", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"}
        finally:
            assert operator.stop() == 0, operator.log()[-3000:]

        # The documented uninstall: the operator's grants go, every Registry stays.
        for command in commands("uninstall-namespaced"):
            if command == "kubectl delete -k deploy/namespaced":
                # Its Deployment, budget and cluster reads were gone here already, and no namespace controller runs
                # to finish berth-system's deletion.
                command += " --ignore-not-found --wait=false"
            sh(api, tmp_path, tmp_path / "checkout", command)
        assert api.get("rbac.authorization.k8s.io/v1/clusterroles", None, "berth-operator-cluster-reads") is None
        assert api.get("rbac.authorization.k8s.io/v1/roles", "team-a", "berth-operator") is None
        for namespace, name in REGISTRIES:
            assert api.get(REGISTRIES_PATH, namespace, name) is not None
