"""Restarting the operator changes nothing; agent records of gone pods are pruned; no Secret value leaks."""

from __future__ import annotations

import base64
import logging
from typing import Any

from prometheus_client import REGISTRY, generate_latest

from support.clusters.operator_harness import OWNED_PATHS, REGISTRIES_PATH, OperatorHarness, wait_for

NS = "restart"


def registry(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


SPECS = {
    "mem": {"config": {"storage": {"inmemory": {}}}},
    "fs": {"replicas": 1, "config": {"storage": {"filesystem": {"storageClass": "disk"}}}},
    "s3": {"replicas": 3, "config": {"storage": {"objectStorage": {"bucketClass": "b", "bucketAccessClass": "a"}}}},
}


def every_version(api) -> dict[tuple[str, str], str]:
    found = {}
    for kind, path in {**OWNED_PATHS, "Registry": REGISTRIES_PATH}.items():
        for obj in api.list(path, NS):
            found[(kind, obj["metadata"]["name"])] = obj["metadata"]["resourceVersion"]
    return found


def http_secret(api, name: str) -> str:
    data = api.get("v1/secrets", NS, f"{name}-http-secret")
    return data.get("data", {}).get("secret") or data["stringData"]["secret"]


def test_restart_writes_nothing_and_keeps_the_http_secret(kube_api):
    for name, spec in SPECS.items():
        kube_api.create(registry(name, spec))
    first = OperatorHarness(kube_api, [NS]).start()
    try:
        for name in SPECS:
            first.wait_reconciled(NS, name)
        # Let kopf's own bookkeeping settle: every Registry marked handled.
        wait_for(lambda: all("berth.dev/last-handled-configuration" in
                             (kube_api.get(REGISTRIES_PATH, NS, n)["metadata"].get("annotations") or {})
                             for n in SPECS), "kopf's handled marks")
    finally:
        first.stop()
    before = every_version(kube_api)
    secrets_before = {name: http_secret(kube_api, name) for name in SPECS}
    mark = len(kube_api.requests())

    second = OperatorHarness(kube_api, [NS]).start()
    try:
        # Resume ran the reconcile for each Registry (the counter counts handler runs).
        wait_for(lambda: second.ctx.completed >= len(SPECS), "the resume reconciles")
    finally:
        second.stop()

    assert every_version(kube_api) == before
    assert {name: http_secret(kube_api, name) for name in SPECS} == secrets_before
    assert second.writes_after(mark) == []


def test_generated_http_secret_is_never_overwritten(operator_harness, kube_api):
    harness = operator_harness([NS])
    kube_api.create(registry("keep", SPECS["mem"]))
    harness.wait_reconciled(NS, "keep")
    value = http_secret(kube_api, "keep")
    # An edit that changes the pod shape (replicas) reconciles everything again: the secret stays.
    kube_api.patch(REGISTRIES_PATH, NS, "keep", {"spec": {"replicas": 0}})
    harness.wait_reconciled(NS, "keep")
    assert http_secret(kube_api, "keep") == value


def test_stale_agent_records_are_pruned(operator_harness, kube_api):
    harness = operator_harness([NS])
    reg = kube_api.create(registry("agents", SPECS["mem"]))
    harness.wait_reconciled(NS, "agents")
    labels = {"app.kubernetes.io/name": "registry", "app.kubernetes.io/instance": "agents",
              "app.kubernetes.io/managed-by": "berth", "app.kubernetes.io/component": "registry"}
    kube_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agents-live", "namespace": NS,
                                                                     "labels": labels},
                     "spec": {"containers": [{"name": "registry", "image": "r"}]}})
    generation = reg["metadata"]["generation"]
    records = {pod: {"configHash": "abc", "appliedAt": "2026-01-01T00:00:00Z", "observedGeneration": generation}
               for pod in ("agents-live", "agents-gone")}
    # What the agents wrote (each its own key); the agents' write triggers the operator.
    kube_api.patch(REGISTRIES_PATH, NS, "agents", {"status": {"agents": records}}, subresource="status")
    wait_for(lambda: set(kube_api.get(REGISTRIES_PATH, NS, "agents")["status"]["agents"]) == {"agents-live"},
             "the gone pod's record pruned")

    # The live pod is deleted: its record goes too (Pod deletion event).
    kube_api.delete("v1/pods", NS, "agents-live")
    wait_for(lambda: not kube_api.get(REGISTRIES_PATH, NS, "agents")["status"].get("agents"),
             "the deleted pod's record pruned")
    # Only the records go: the operator's own status stays.
    assert kube_api.get(REGISTRIES_PATH, NS, "agents")["status"].get("conditions")


def test_agent_error_is_reported_as_degraded(operator_harness, kube_api):
    harness = operator_harness([NS])
    reg = kube_api.create(registry("bad", SPECS["mem"]))
    harness.wait_reconciled(NS, "bad")
    labels = {"app.kubernetes.io/name": "registry", "app.kubernetes.io/instance": "bad",
              "app.kubernetes.io/managed-by": "berth"}
    kube_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad-1", "namespace": NS,
                                                                     "labels": labels}, "spec": {"containers": []}})
    kube_api.patch(REGISTRIES_PATH, NS, "bad", {"status": {"agents": {"bad-1": {
        "configHash": "", "observedGeneration": reg["metadata"]["generation"],
        "error": "spec.validation.manifests.urls.allow[0]: bad pattern"}}}}, subresource="status")

    def degraded() -> dict[str, Any] | None:
        cond = harness.condition(NS, "bad", "Degraded")
        return cond if cond and cond["reason"] == "AgentFailed" else None

    cond = wait_for(degraded, "AgentFailed")
    assert "bad-1: spec.validation.manifests.urls.allow[0]: bad pattern" in cond["message"]


PLANTED = {
    "htpasswd": "planted-htpasswd-3f9a1c",
    "redis": "redis://:planted-redis-pass-77b2@redis:6379",
    "http": "planted-http-secret-5d0e",
}


def test_no_secret_value_in_logs_events_status_or_metrics(operator_harness, kube_api, caplog):
    caplog.set_level(logging.DEBUG)
    for name, key, value in (("users", "htpasswd", PLANTED["htpasswd"]), ("redis", "url", PLANTED["redis"]),
                             ("signing", "key", PLANTED["http"])):
        kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
                         "data": {key: base64.b64encode(value.encode()).decode()}})
    spec = {
        "replicas": 2,
        "config": {"storage": {"objectStorage": {"bucketClass": "b", "bucketAccessClass": "a"},
                               "cache": {"blobdescriptor": "redis"},
                               "auth": {"htpasswd": {"secret": {"name": "users", "field": "htpasswd"}}}}},
        "redis": {"secret": {"name": "redis", "field": "url"}},
    }
    harness = operator_harness([NS])
    kube_api.create(registry("given", spec | {"http": {"secret": {"name": "signing", "field": "key"}}}))
    kube_api.create(registry("generated", spec))  # the operator generates this one's HTTP secret
    harness.wait_reconciled(NS, "given")
    harness.wait_reconciled(NS, "generated")
    # A failure path too: a Secret key that is missing, and an edit (Updated events).
    kube_api.patch(REGISTRIES_PATH, NS, "given", {"spec": {"redis": {"secret": {"name": "redis", "field": "nope"}},
                                                           "image": "registry:3.0.1"}})
    harness.wait_reconciled(NS, "given")
    wait_for(lambda: [e for e in harness.events(NS, "given") if e["reason"] == "MissingSecretKey"], "event")

    generated = base64.b64decode(http_secret(kube_api, "generated")).decode()
    secrets = [*PLANTED.values(), generated, http_secret(kube_api, "generated")]
    texts = {
        "logs": "\n".join(f"{r.getMessage()} {r.args!r} {getattr(r, '__dict__', '')!r}" for r in caplog.records),
        "events": repr(harness.events(NS)),
        "status": repr([kube_api.get(REGISTRIES_PATH, NS, n).get("status") for n in ("given", "generated")]),
        "metrics": generate_latest(REGISTRY).decode(),
    }
    assert len(texts["logs"]) > 1000, "the log capture caught the operator's logs"
    for where, text in texts.items():
        for value in secrets:
            assert value not in text, f"a Secret value appeared in the {where}"


def test_a_record_of_a_pod_the_cache_has_not_seen_yet_is_kept_and_counted(kube_api):
    """An agent can write its record before its pod's watch event reaches the cache: the reconcile then asks the
    server for the pods (one list) instead of pruning the record, which the agent would not write again."""
    import kubernetes.client

    from berth_api import Registry
    from berth_operator.cluster.caches import Caches
    from berth_operator.cluster.view import Cluster
    from berth_operator.engine.reconcile import _confirm_pods
    from berth_operator.kube.client import Kube

    configuration = kubernetes.client.Configuration()
    configuration.host = kube_api.url
    caches = Caches(None, [NS])  # type: ignore[arg-type]  (no informer: the store stays as filled here)
    caches.synced.set()
    kube = Cluster(Kube(configuration), caches)
    reg = Registry.model_validate(registry("late", SPECS["mem"]))
    labels = {"app.kubernetes.io/name": "registry", "app.kubernetes.io/instance": "late",
              "app.kubernetes.io/managed-by": "berth"}
    pod = kube_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "late-1", "namespace": NS,
                                                                           "labels": labels},
                           "spec": {"containers": []}})
    record = {"late-1": {"configHash": "x", "observedGeneration": 1}}
    assert kube.list("v1", "Pod", NS, labels) == []  # the cache has not seen it
    assert [p["metadata"]["name"] for p in _confirm_pods(kube, reg, [], record)] == ["late-1"]
    # A pod Berth did not label is not counted, as the cache would not count it.
    kube_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "late-2", "namespace": NS, "labels": {
        k: v for k, v in labels.items() if k != "app.kubernetes.io/managed-by"}}, "spec": {"containers": []}})
    assert [p["metadata"]["name"] for p in _confirm_pods(kube, reg, [], record)] == ["late-1"]
    # Every record's pod cached: the cache's list, no request.
    caches.record(pod)
    cached = kube.list("v1", "Pod", NS, labels)
    assert _confirm_pods(kube, reg, cached, record) is cached
    # A record of a pod really gone: the server's list, which does not name it, so status_patch prunes it.
    confirmed = _confirm_pods(kube, reg, cached, {"gone-1": {}})
    assert [p["metadata"]["name"] for p in confirmed] == ["late-1"]
