"""berth_operator.cluster.caches' list: one Registry's pods from the store (the reconcile's list, with no request).
The informers themselves run against the real API server (tests/apiserver/test_watches.py)."""

from __future__ import annotations

from berth_operator.cluster.caches import Caches, strip

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


def storage_class(name: str, version: str, expands: bool = False) -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "resourceVersion": version, "managedFields": [{"manager": "kubectl"}]},
            "provisioner": "example.com/none", "allowVolumeExpansion": expands}


def test_the_caches_of_classes_keep_every_class_and_pass_each_change_on_with_no_owner():
    changes = []
    classes = Caches.of_classes(None, lambda *change: changes.append(change))  # type: ignore[arg-type]
    assert classes.selector == "" and classes.namespaces == (None,)  # every class, cluster-wide: they are the admin's
    classes._put(strip(storage_class("standard", "1")))  # as the list fills it (before synced: nothing to wake)
    assert not classes.covers("storage.k8s.io/v1", "StorageClass", None)  # not listed yet: reads go to the server
    classes.synced.set()
    assert classes.covers("storage.k8s.io/v1", "StorageClass", None)
    assert not classes.covers("v1", "Pod", "ns")  # only the class kinds
    kept = classes.get("storage.k8s.io/v1", "StorageClass", None, "standard")
    assert kept["allowVolumeExpansion"] is False and "managedFields" not in kept["metadata"]
    assert classes.get("storage.k8s.io/v1", "StorageClass", None, "fast") is None  # covered: a miss is an absence

    changed = strip(storage_class("standard", "2", expands=True))
    assert classes._put(changed)
    classes._changed(changed)  # a class has no owner: the change goes on with owner "", keyed by the class
    assert changes == [("", "", ("storage.k8s.io/v1", "StorageClass", "", "standard"), "2")]
    classes.record(changed)  # our own writes are never of classes: not recorded as ours
    assert not classes.ours(("storage.k8s.io/v1", "StorageClass", "", "standard"), "2")
