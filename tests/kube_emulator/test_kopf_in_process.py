"""kopf 1.45 runs in process against the test API server and stops cleanly (docs/upstream.md#parts-kmock)."""

from __future__ import annotations

import threading

import kopf

from support.clusters.kube import KubeApi, run_kopf
from support.common.polling import wait_for

NS = "ns1"
REGISTRIES = "berth.dev/v1alpha1/registries"


def tiny_operator() -> tuple[kopf.OperatorRegistry, threading.Event]:
    """A registry of handlers: on Registry creation, write the image into status and own a Secret."""
    registry = kopf.OperatorRegistry()
    deleted = threading.Event()

    @kopf.on.create("berth.dev", "v1alpha1", "registries", registry=registry, id="created")
    def created(spec, name, namespace, body, patch, **_):
        patch.status["seenImage"] = spec.get("image", "")
        return {"done": True}

    @kopf.on.delete("berth.dev", "v1alpha1", "registries", registry=registry)
    def removed(**_):
        deleted.set()

    return registry, deleted


def test_kopf_reacts_to_a_registry_and_stops_cleanly(kube_api: KubeApi) -> None:
    registry, deleted = tiny_operator()
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    with run_kopf(kube_api, registry=registry, namespaces=[NS]) as thread:
        kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                         "metadata": {"name": "r1", "namespace": NS},
                         "spec": {"image": "registry:3", "config": {"storage": {"filesystem": {}}}}})

        def status() -> dict:
            return (kube_api.get(REGISTRIES, NS, "r1") or {}).get("status", {})

        # kopf writes status through /status (the CRD has the subresource): handler result and our field.
        wait_for(lambda: status().get("seenImage") == "registry:3", "status.seenImage written", timeout=10)
        wait_for(lambda: status().get("created") == {"done": True}, "handler result stored in status", timeout=10)
        registry_obj = kube_api.get(REGISTRIES, NS, "r1")
        assert registry_obj["metadata"]["generation"] == 1  # status writes never bump generation
        assert "kopf.zalando.org/KopfFinalizerMarker" in registry_obj["metadata"]["finalizers"]

        # kopf added its finalizer with a json-patch guarded by a `test` of resourceVersion (422 if stale).
        # Deleting goes through kopf's finalizer; once kopf releases it the object is gone.
        kube_api.delete(REGISTRIES, NS, "r1")
        wait_for(lambda: kube_api.get(REGISTRIES, NS, "r1") is None, "registry deleted after the finalizer", timeout=10)
        assert deleted.is_set()
    assert not thread.is_alive()


def test_kopf_survives_dropped_watches(kube_api: KubeApi) -> None:
    registry, _ = tiny_operator()
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    with run_kopf(kube_api, registry=registry, namespaces=[NS]):
        wait_for(lambda: kube_api.open_watches >= 1, "kopf watching", timeout=10)
        assert kube_api.drop_watches() >= 1  # kopf's watches were cut, not merely idle
        kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                         "metadata": {"name": "r2", "namespace": NS},
                         "spec": {"image": "img", "config": {"storage": {"filesystem": {}}}}})
        wait_for(lambda: (kube_api.get(REGISTRIES, NS, "r2") or {}).get("status", {}).get("seenImage") == "img",
                 "kopf re-watched and handled the registry created after the drop", timeout=10)
