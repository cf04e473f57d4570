"""The Registry's status and scale subresources on the real API server, and the operator's status writes through
them (kmock lets a /status patch change spec and stamps no generation:
docs/upstream.md#parts-kmock).

- a create drops status; a /status patch changes status only and leaves generation alone; a patch of the
  object itself ignores status and bumps generation (what observedGeneration is compared with);
- /scale (`kubectl scale`) reads spec.replicas, status.replicas and status.selector, and writes spec.replicas;
- `berth-operator` writes its conditions through /status (the schema of status is checked there: a reason
  the CRD does not allow would be refused), follows generation, and prunes the record of an agent whose pod
  is gone while keeping a live pod's (the pods are found by the real label selector).
"""

from __future__ import annotations

from support.clusters.apiserver_identities import start_operator
from support.clusters.operator_harness import reconciled
from support.common.polling import wait_for

REGISTRIES = "berth.dev/v1alpha1/registries"


def registry(namespace: str, name: str = "reg", **spec) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": namespace},
            "spec": {"config": {"storage": {"inmemory": {}}}, **spec}}


def test_status_and_spec_are_written_apart(kube_apiserver, apiserver_namespace) -> None:
    api, ns = kube_apiserver, apiserver_namespace
    created = api.create({**registry(ns), "status": {"storage": "planted"}})
    assert "status" not in created and created["metadata"]["generation"] == 1

    written = api.patch(REGISTRIES, ns, "reg", {"status": {"storage": "inmemory"}, "spec": {"replicas": 2}},
                        subresource="status")
    assert written["status"] == {"storage": "inmemory"}
    assert written["spec"]["replicas"] == 1 and written["metadata"]["generation"] == 1

    edited = api.patch(REGISTRIES, ns, "reg", {"status": {"storage": "other"}, "spec": {"replicas": 3}})
    assert edited["status"] == {"storage": "inmemory"}
    assert edited["spec"]["replicas"] == 3 and edited["metadata"]["generation"] == 2
    assert int(edited["metadata"]["resourceVersion"]) > int(written["metadata"]["resourceVersion"])


def test_scale_reads_and_writes_replicas(kube_apiserver, apiserver_namespace) -> None:
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns, replicas=2))
    api.patch(REGISTRIES, ns, "reg", {"status": {"replicas": 1, "selector": "app=x"}}, subresource="status")
    scale = api.request("GET", f"/apis/berth.dev/v1alpha1/namespaces/{ns}/registries/reg/scale")
    assert (scale["spec"], scale["status"]) == ({"replicas": 2}, {"replicas": 1, "selector": "app=x"})
    api.patch(REGISTRIES, ns, "reg", {"spec": {"replicas": 3}}, subresource="scale")
    assert api.get(REGISTRIES, ns, "reg")["spec"]["replicas"] == 3


def pod(namespace: str, name: str, labels: dict, service_account: str) -> dict:
    """A Pod object (nothing runs it here): what the operator's label selector finds."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"serviceAccountName": service_account, "automountServiceAccountToken": False,
                     "containers": [{"name": "registry", "image": "registry:3"}]}}


def test_the_operator_writes_status_through_the_subresource(kube_apiserver, apiserver_namespace, tmp_path) -> None:
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns))
    operator, _ = start_operator(api, "operator-status", tmp_path, [ns])
    try:
        first = wait_for(lambda: reconciled(api, ns, "reg"), "reg reconciled", 60)
        assert {c["type"] for c in first["status"]["conditions"]} == {"Ready", "Progressing", "Degraded"}
        assert first["status"]["observedGeneration"] == 1
        # Two agents' records; only pod-live has a Pod (with the Deployment's pod template labels, as its
        # ReplicaSet makes them: the selector's and Berth's).
        labels = api.get("apps/v1/deployments", ns, "reg")["spec"]["template"]["metadata"]["labels"]
        api.create(pod(ns, "pod-live", labels, "reg-agent"))
        api.create(pod(ns, "pod-unrelated", {"app": "other"}, "reg-agent"))
        records = {name: {"observedGeneration": 1, "configHash": "h"} for name in ("pod-live", "pod-gone",
                                                                                   "pod-unrelated")}
        api.patch(REGISTRIES, ns, "reg", {"status": {"agents": records}}, subresource="status")
        # An edit: the next reconcile reports the new generation and prunes the records of absent pods.
        api.patch(REGISTRIES, ns, "reg", {"spec": {"config": {"log": {"level": "debug"}}}})
        done = wait_for(lambda: (reg := reconciled(api, ns, "reg")) and reg["metadata"]["generation"] == 2 and reg,
                        "generation 2 reconciled", 60)
        assert done["status"]["observedGeneration"] == 2
        wait_for(lambda: set(api.get(REGISTRIES, ns, "reg")["status"].get("agents") or {}) == {"pod-live"},
                 "the records of pods that are not the Registry's to be pruned", 60)
    finally:
        assert operator.stop() == 0, operator.log()[-3000:]
    # Its writes to the Registry went through /status (kopf's own bookkeeping, a finalizer and an annotation,
    # is metadata): the spec never moved, so neither did generation.
    writes = [e["objectRef"].get("subresource") for e in api.audit()
              if e["user"]["username"].endswith(":berth-operator")
              and e["verb"] == "patch" and (e.get("objectRef") or {}).get("resource") == "registries"
              and e["objectRef"].get("namespace") == ns]
    assert "status" in writes
    assert api.get(REGISTRIES, ns, "reg")["metadata"]["generation"] == 2
    assert "Traceback" not in operator.log()
