"""The Registry bodies the operator keeps and reconciles from (reactor.handlers.compact): without
metadata.managedFields, which is half of a reconciled body's size and nothing the reconcile reads. Trimming must
not change a decision: the same spec reconciled from its full body and from its compact one writes the same
objects, the same way, and reports the same conditions (kmock)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes.client

from berth_operator.cluster.view import Cluster
from berth_operator.engine.reconcile import reconcile
from berth_operator.kube.client import Kube
from berth_operator.reactor.handlers import compact
from support.clusters.operator_harness import AGENT_IMAGE, REGISTRIES_PATH

NS = "compact"
MANAGED_FIELDS = [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "berth.dev/v1alpha1",
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:config": {}}}},
                  {"manager": "berth-operator", "operation": "Update", "subresource": "status",
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}}]


def registry(name: str) -> dict[str, Any]:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 2, "config": {"storage": {"inmemory": {}}}}}


def test_compact_drops_managed_fields_and_keeps_everything_else():
    body = {**registry("r"), "status": {"observedGeneration": 1}}
    body["metadata"] = {**body["metadata"], "managedFields": MANAGED_FIELDS, "uid": "u", "resourceVersion": "7",
                        "annotations": {"berth.dev/last-handled-configuration": "{}"}}
    kept = json.loads(compact(body))
    assert "managedFields" not in kept["metadata"]
    assert kept == {**body, "metadata": {k: v for k, v in body["metadata"].items() if k != "managedFields"}}
    assert body["metadata"]["managedFields"] == MANAGED_FIELDS  # the caller's body is not changed


def test_a_reconcile_from_the_compact_body_decides_as_from_the_full_one(kube_api):
    configuration = kubernetes.client.Configuration()
    configuration.host = kube_api.url
    kube = Cluster(Kube(configuration))
    try:
        outcomes = {}
        for name, trim in (("full", False), ("trimmed", True)):
            kube_api.create(registry(name))
            body = kube_api.get(REGISTRIES_PATH, NS, name)
            body["metadata"]["managedFields"] = MANAGED_FIELDS
            outcomes[name] = reconcile(kube, json.loads(compact(body)) if trim else body, agent_image=AGENT_IMAGE)
    finally:
        kube.close()

    def decided(outcome) -> list[tuple[str, str]]:
        return [(action.verb, action.kind) for action in outcome.actions]

    def conditions(outcome) -> dict[str, str]:
        return {c["type"]: c["reason"] for c in outcome.conditions}

    assert decided(outcomes["full"]) and decided(outcomes["full"]) == decided(outcomes["trimmed"])
    assert conditions(outcomes["full"]) == conditions(outcomes["trimmed"])
    assert outcomes["full"].status_written and outcomes["trimmed"].status_written
