"""berth_operator.cluster.caches' list: one Registry's pods from the store (the reconcile's list, with no request).
The informers themselves run against the real API server (tests/apiserver/test_watches.py)."""

from __future__ import annotations

from berth_operator.cluster.caches import Caches

INSTANCE = "app.kubernetes.io/instance"


def pod(name: str, instance: str, *, managed: bool = True, phase: str = "Running") -> dict:
    labels = {"app.kubernetes.io/name": "registry", INSTANCE: instance}
    if managed:
        labels["app.kubernetes.io/managed-by"] = "berth"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels,
                                                            "resourceVersion": "1"},
            "spec": {"containers": [{"name": "registry"}]}, "status": {"phase": phase, "podIP": "10.0.0.1"}}


def names(found: list[dict]) -> list[str]:
    return [p["metadata"]["name"] for p in found]


def test_list_gives_one_instances_pods_stripped_and_follows_label_changes_and_deletions():
    caches = Caches(None, ["ns"])  # type: ignore[arg-type]  (no informer runs: the store is filled by hand)
    for obj in (pod("a-1", "a"), pod("a-2", "a", phase="Failed"), pod("b-1", "b")):
        caches.record(obj)
    caches.synced.set()
    selector = {"app.kubernetes.io/name": "registry", INSTANCE: "a"}
    assert caches.covers("v1", "Pod", "ns") and not caches.covers("v1", "Pod", "other")
    found = caches.list("v1", "Pod", "ns", selector)
    assert names(found) == ["a-1", "a-2"]
    assert found[1]["status"] == {"phase": "Failed"} and "spec" not in found[1]  # only what the operator reads

    moved = pod("a-1", "b")
    moved["metadata"]["resourceVersion"] = "2"
    caches._put(moved)  # (as a watch event would) its instance label changed: no longer a's
    assert names(caches.list("v1", "Pod", "ns", selector)) == ["a-2"]
    assert names(caches.list("v1", "Pod", "ns", {**selector, INSTANCE: "b"})) == ["a-1", "b-1"]
    caches._drop(pod("a-2", "a"))
    assert caches.list("v1", "Pod", "ns", selector) == []
    caches.record(pod("c-1", "c", managed=False))  # not Berth's: never cached (the informer's selector, too)
    assert caches.list("v1", "Pod", "ns", {INSTANCE: "c"}) == []
