"""spec.monitoring and deploy/monitoring on the real API server, with prometheus-operator's CRDs vendored
from its v0.93.0 release (tests/fixtures/prometheus-operator-v0.93.0, Apache-2.0, LICENSE beside them).

The manifests are valid against those schemas (strict field validation, dry run): the ServiceMonitor the builder
makes, the PrometheusRule of deploy/monitoring, the operator's ServiceMonitor of deploy/operator-monitoring. Then
berth-operator (deploy/'s RBAC, its own token) creates a Registry's ServiceMonitor when spec.monitoring asks,
with the user's labels, and prunes it when the field goes; nothing it asks is refused.
"""

from __future__ import annotations

import copy
import subprocess

import pytest
import yaml

from berth_api import Registry
from berth_operator.builders import ClusterFacts, service_monitor
from support.clusters.apiserver import REPO, ApiError, KubeApiServer, install_monitoring_crds
from support.clusters.apiserver_identities import refused_requests, start_operator
from support.clusters.operator_harness import reconciled
from support.common.polling import wait_for

REGISTRIES = "berth.dev/v1alpha1/registries"
SERVICE_MONITORS = "monitoring.coreos.com/v1/servicemonitors"


def kustomized(component: str) -> list[dict]:
    built = subprocess.run(["kubectl", "kustomize", str(REPO / "deploy" / component)], capture_output=True,
                           text=True, timeout=60, check=True)
    return list(yaml.safe_load_all(built.stdout))


def dry_run(api: KubeApiServer, manifest: dict, namespace: str) -> None:
    manifest = copy.deepcopy(manifest)
    manifest["metadata"]["namespace"] = namespace
    manifest["metadata"].pop("ownerReferences", None)  # the owner does not exist in a dry run
    api.create(manifest, dryRun="All", fieldValidation="Strict")


def registry(namespace: str, monitoring: dict | None) -> dict:
    spec = {"config": {"storage": {"inmemory": {}}}}
    if monitoring is not None:
        spec["monitoring"] = monitoring
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
            "metadata": {"name": "watched", "namespace": namespace}, "spec": spec}


def test_the_manifests_are_valid_against_the_vendored_crds(kube_apiserver, apiserver_namespace):
    install_monitoring_crds(kube_apiserver)
    reg = Registry.model_validate(registry(apiserver_namespace, {"serviceMonitor": {
        "labels": {"release": "kube-prometheus-stack", "team.example.com/owner": "platform"}, "interval": "15s"}})
        | {"metadata": {"name": "watched", "namespace": apiserver_namespace, "uid": "u"}})
    built = service_monitor.build(reg, ClusterFacts("img"))
    dry_run(kube_apiserver, built, apiserver_namespace)
    for component, kinds in (("monitoring", {"PrometheusRule"}), ("operator-monitoring", {"ServiceMonitor"})):
        docs = [doc for doc in kustomized(component) if doc["kind"] in kinds]
        assert len(docs) == 1
        for doc in docs:
            dry_run(kube_apiserver, doc, apiserver_namespace)
    # The schemas do check: a misspelt field is refused (strict validation).
    wrong = copy.deepcopy(built)
    wrong["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(ApiError) as refused:
        dry_run(kube_apiserver, wrong, apiserver_namespace)
    assert "intervall" in str(refused.value.body)


def test_the_operator_creates_and_prunes_the_service_monitor(kube_apiserver, apiserver_namespace, tmp_path):
    api, ns = kube_apiserver, apiserver_namespace
    install_monitoring_crds(api)
    api.create(registry(ns, {"serviceMonitor": {"labels": {"release": "kps"}, "interval": "20s"}}))
    operator, token = start_operator(api, "berth-operator-0", tmp_path, [ns])
    try:
        try:
            monitor = wait_for(lambda: api.get(SERVICE_MONITORS, ns, "watched"), "the ServiceMonitor", 90)
        except AssertionError:
            raise AssertionError(f"no ServiceMonitor; status {api.get(REGISTRIES, ns, 'watched').get('status')}\n"
                                 f"{operator.log()[-3000:]}") from None
        assert monitor["metadata"]["labels"]["release"] == "kps"
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["agent-health", "reg-metrics"]
        assert {e["interval"] for e in monitor["spec"]["endpoints"]} == {"20s"}
        assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "metrics"
        metrics_service = api.get("v1/services", ns, "watched-metrics")
        assert metrics_service["metadata"]["labels"].items() >= monitor["spec"]["selector"]["matchLabels"].items()
        reg = wait_for(lambda: reconciled(api, ns, "watched"), "the Registry reconciled", 60)
        assert not any(c["reason"] == "MissingMonitoringCRD" for c in reg["status"]["conditions"])
        api.patch(REGISTRIES, ns, "watched", {"spec": {"monitoring": None}})
        wait_for(lambda: api.get(SERVICE_MONITORS, ns, "watched") is None, "the ServiceMonitor pruned", 60)
    finally:
        operator.stop()
    refused = refused_requests(api, token)
    assert refused == [], refused[:3]
