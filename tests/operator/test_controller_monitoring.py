"""spec.monitoring without the prometheus-operator CRDs: Degraded MissingMonitoringCRD naming what is
missing, everything else built as usual (the registry serves); no ServiceMonitor is asked for. The CRDs present,
on the real API server: tests/apiserver/test_monitoring.py."""

from __future__ import annotations

from support.clusters.operator_harness import REGISTRIES_PATH

NS = "monitored"


def test_a_service_monitor_without_its_crd_is_a_condition_that_names_it(operator_harness, kube_api):
    harness = operator_harness([NS])
    kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "m", "namespace": NS},
                     "spec": {"config": {"storage": {"inmemory": {}}},
                              "monitoring": {"serviceMonitor": {"labels": {"release": "kps"}}}}})
    harness.wait_reconciled(NS, "m")
    degraded = harness.condition(NS, "m", "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "MissingMonitoringCRD")
    assert "servicemonitors.monitoring.coreos.com" in degraded["message"]
    assert "spec.monitoring.serviceMonitor" in degraded["message"]
    owned = harness.owned(NS, kube_api.get(REGISTRIES_PATH, NS, "m")["metadata"]["uid"])
    assert ("Deployment", "m") in owned and ("Service", "m-metrics") in owned
    assert not any(kind == "ServiceMonitor" for kind, _ in owned)
