"""Server-side apply and the watch-driven caches on the real API server: `berth-operator` as a process
with deploy/'s RBAC. What kmock's simplified apply cannot show: field ownership (managedFields), a hand edit of
one of Berth's fields repaired because its watch event woke the Registry (no Registry edit, no sweep: the
operator's refresh interval is far longer than the tests' patience), another manager's fields left alone, a
field the builders stop setting removed by the server, and no write at all for an unchanged Registry.
"""

from __future__ import annotations

import json

import pytest

from berth_operator.kube.client import FIELD_MANAGER
from support.clusters.apiserver import JSON_PATCH, MERGE_PATCH, api_path
from support.clusters.apiserver_identities import OPERATOR_USER, start_operator
from support.clusters.operator_harness import REGISTRIES_PATH
from support.clusters.operator_harness import reconciled as reconciled_registry
from support.common.polling import wait_for

WRITES = ("create", "update", "patch", "delete")
OWNED = ("deployments", "services", "serviceaccounts", "roles", "rolebindings", "poddisruptionbudgets",
         "persistentvolumeclaims", "leases", "secrets", "bucketclaims", "bucketaccesses")
HAND = "kubectl-edit"  # the field manager of the hand edits


def registry(namespace: str, name: str, **spec) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": namespace},
            "spec": {"config": {"storage": {"inmemory": {}}}, **spec}}


@pytest.fixture
def operator(kube_apiserver, apiserver_namespace, tmp_path):
    process, _ = start_operator(kube_apiserver, "operator-apply", tmp_path, [apiserver_namespace])
    yield process
    assert process.stop() == 0, process.log()[-3000:]
    assert "Traceback" not in process.log()


def owned_writes(api, namespace: str, mark: int) -> list[tuple[str, str]]:
    """The operator's writes to owned objects and Registries in namespace after audit position mark."""
    return [(e["verb"], e["requestURI"]) for e in api.audit(OPERATOR_USER, since=mark)
            if e["verb"] in WRITES and (e.get("objectRef") or {}).get("namespace") == namespace
            and (e.get("objectRef") or {}).get("resource") in (*OWNED, "registries")]


def managers(obj: dict, path: str) -> set[str]:
    """The managers owning a field, by its managedFields key path (`f:spec`, `f:ports`...)."""
    found = set()
    for entry in obj["metadata"].get("managedFields") or ():
        node = entry.get("fieldsV1") or {}
        for key in path.split("/"):
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            found.add(entry["manager"])
    return found


def edit(api, path: str, namespace: str, name: str, patch, content_type: str = MERGE_PATCH) -> dict:
    return api.request("PATCH", f"{api_path(path, namespace, name)}?fieldManager={HAND}", patch,
                       content_type=content_type)


def ports(api, namespace: str, name: str) -> list[int]:
    return [p["port"] for p in api.get("v1/services", namespace, name)["spec"]["ports"]]


def test_a_hand_edit_of_a_berth_field_is_repaired_from_the_watch(kube_apiserver, apiserver_namespace, operator):
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns, "drift"))
    wait_for(lambda: reconciled_registry(api, ns, "drift"), "drift reconciled", 60)
    service = api.get("v1/services", ns, "drift")
    assert managers(service, "f:spec/f:ports") == {FIELD_MANAGER}
    assert ports(api, ns, "drift") == [5000]

    # A hand edit of a field Berth sets: the watch event wakes the Registry, the forced apply takes it back.
    edit(api, "v1/services", ns, "drift", [{"op": "replace", "path": "/spec/ports/0/port", "value": 5999}],
         JSON_PATCH)
    wait_for(lambda: ports(api, ns, "drift") == [5000], "the Service port repaired", 30)
    assert managers(api.get("v1/services", ns, "drift"), "f:spec/f:ports") == {FIELD_MANAGER}
    wait_for(lambda: "Updated Service drift" in [e["message"] for e in api.list("v1/events", ns)
                                                 if e["reason"] == "Updated"], "the Updated event", 30)
    assert api.get(REGISTRIES_PATH, ns, "drift")["metadata"]["generation"] == 1, "no Registry edit was needed"


def test_another_managers_fields_are_left_alone_and_not_fought(kube_apiserver, apiserver_namespace, operator):
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns, "shared"))
    wait_for(lambda: reconciled_registry(api, ns, "shared"), "shared reconciled", 60)
    # What `kubectl rollout restart` and a label-adding tool do: fields Berth never sets.
    edit(api, "apps/v1/deployments", ns, "shared", {"metadata": {"labels": {"team": "payments"}}, "spec": {
        "template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-01T10:00:00Z"}}}}})
    edit(api, "v1/services", ns, "shared", {"metadata": {"annotations": {"example.com/owner": "payments"}}})
    mark = api.audit_mark()
    # A hot edit reconciles the Registry again (its generation moves): its objects are left as they are.
    api.patch(REGISTRIES_PATH, ns, "shared", {"spec": {"config": {"log": {"level": "debug"}}}})
    wait_for(lambda: (reg := reconciled_registry(api, ns, "shared")) and reg["metadata"]["generation"] == 2,
             "the hot edit reconciled", 60)
    deployment = api.get("apps/v1/deployments", ns, "shared")
    assert deployment["metadata"]["labels"]["team"] == "payments"
    assert deployment["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
    assert managers(deployment, "f:metadata/f:labels/f:team") == {HAND}
    assert api.get("v1/services", ns, "shared")["metadata"]["annotations"]["example.com/owner"] == "payments"
    writes = owned_writes(api, ns, mark)
    assert [w for w in writes if "/registries/" not in w[1]] == [], "Berth fought another manager's field"


def test_a_field_the_builders_stop_setting_is_removed_by_the_server(kube_apiserver, apiserver_namespace, operator):
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns, "limits", resources={"limits": {"memory": "512Mi", "cpu": "2"}}))
    wait_for(lambda: reconciled_registry(api, ns, "limits"), "limits reconciled", 60)

    def limits() -> dict:
        containers = api.get("apps/v1/deployments", ns, "limits")["spec"]["template"]["spec"]["containers"]
        return next(c for c in containers if c["name"] == "registry").get("resources", {}).get("limits", {})

    assert limits() == {"memory": "512Mi", "cpu": "2"}
    api.patch(REGISTRIES_PATH, ns, "limits", {"spec": {"resources": {"limits": {"memory": "512Mi", "cpu": None}}}})
    wait_for(lambda: limits() == {"memory": "512Mi"}, "the cpu limit removed (only Berth applied it)", 30)


def test_an_unchanged_registry_gets_no_write_from_a_new_operator(kube_apiserver, apiserver_namespace, tmp_path):
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns, "steady", replicas=1))
    first, _ = start_operator(api, "operator-first", tmp_path, [ns])
    try:
        wait_for(lambda: reconciled_registry(api, ns, "steady"), "steady reconciled", 60)
    finally:
        assert first.stop() == 0
    mark = api.audit_mark()
    second, _ = start_operator(api, "operator-second", tmp_path, [ns])
    try:
        def resumed() -> bool:
            return any("reconciled Registry" in line for line in second.log().splitlines())

        wait_for(resumed, "the new operator's reconcile of steady", 60)
        line = next(json.loads(line) for line in second.log().splitlines() if "reconciled Registry" in line)
        assert "no writes" in line["message"], line
        assert owned_writes(api, ns, mark) == []
    finally:
        assert second.stop() == 0, second.log()[-3000:]


def test_a_deleted_owned_object_is_recreated_from_the_watch(kube_apiserver, apiserver_namespace, operator):
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns, "heal"))
    wait_for(lambda: reconciled_registry(api, ns, "heal"), "heal reconciled", 60)
    uid = api.get("v1/services", ns, "heal")["metadata"]["uid"]
    api.delete("v1/services", ns, "heal")
    api.delete("rbac.authorization.k8s.io/v1/rolebindings", ns, "heal-agent")
    # No sweep runs this soon (refresh interval 60 s, and an inmemory Registry is not polled at all).
    service = wait_for(lambda: api.get("v1/services", ns, "heal"), "the Service recreated", 20)
    assert service["metadata"]["uid"] != uid and [p["port"] for p in service["spec"]["ports"]] == [5000]
    wait_for(lambda: api.get("rbac.authorization.k8s.io/v1/rolebindings", ns, "heal-agent"), "the RoleBinding back", 20)


def test_a_first_reconcile_reads_nothing_before_it_applies(kube_apiserver, apiserver_namespace, operator):
    """A miss in the caches is applied without a read first (an unforced apply creates it), and the
    reconcile's writes are one Created Event naming them all, not one Event per object."""
    api, ns = kube_apiserver, apiserver_namespace
    mark = api.audit_mark()
    api.create(registry(ns, "fresh"))
    wait_for(lambda: reconciled_registry(api, ns, "fresh"), "fresh reconciled", 60)
    entries = [e for e in api.audit(OPERATOR_USER, since=mark) if (e.get("objectRef") or {}).get("namespace") == ns]
    reads = [e["requestURI"] for e in entries if e["verb"] == "get" and e["objectRef"].get("resource") in OWNED]
    assert reads == [], reads
    # (the caches' own list, by Berth's label, may still be under way: the reconcile's would name the instance)
    pod_lists = [e["requestURI"] for e in entries if e["verb"] == "list" and e["objectRef"].get("resource") == "pods"
                 and "instance" in e["requestURI"]]
    assert pod_lists == [], pod_lists
    created = wait_for(lambda: [e for e in api.list("v1/events", ns) if e["reason"] == "Created"
                                and e["involvedObject"]["name"] == "fresh"], "the Created event", 30)
    assert len(created) == 1, [e["message"] for e in created]
    objects = set(created[0]["message"].removeprefix("Created ").split(", "))
    assert objects == {"ServiceAccount fresh-agent", "Role fresh-agent", "RoleBinding fresh-agent",
                       "Secret fresh-http-secret", "Service fresh", "Service fresh-metrics", "Deployment fresh",
                       "Lease fresh-reload", "Lease fresh-gc"}, objects
    service = api.get("v1/services", ns, "fresh")
    assert {m["manager"] + ":" + m["operation"] for m in service["metadata"]["managedFields"]} == {
        f"{FIELD_MANAGER}:Apply"}


def test_an_existing_object_without_berths_label_is_read_and_decided_on(kube_apiserver, apiserver_namespace,
                                                                        operator):
    """Not in the caches but there: the unforced apply is refused, the object is read, and decided on as ever:
    another controller's is left alone (ApplyFailed, not touched); one made by hand is adopted where the API
    server lets Berth. On this one (OwnerReferencesPermissionEnforcement) adding an owner reference needs delete
    on the object: a hand-made Service is adopted (Berth deletes Services to replace them), a
    hand-made ServiceAccount is not (no delete): ApplyFailed says so and what to do."""
    api, ns = kube_apiserver, apiserver_namespace
    other = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "someone",
             "uid": "0b0b0b0b-0000-4000-8000-000000000001", "controller": True}
    api.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "taken", "namespace": ns,
                                                                    "ownerReferences": [other]},
                "spec": {"ports": [{"port": 80}]}})
    api.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "adopted", "namespace": ns},
                "spec": {"ports": [{"name": "http", "port": 5999}]}})
    api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "handmade-agent",
                                                                           "namespace": ns}})
    api.create(registry(ns, "taken"))
    api.create(registry(ns, "adopted"))
    api.create(registry(ns, "handmade"))

    def degraded(name: str) -> dict | None:
        conds = {c["type"]: c for c in ((reconciled_registry(api, ns, name) or {}).get("status") or {}).get(
            "conditions") or ()}
        cond = conds.get("Degraded")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for(lambda: degraded("taken"), "taken Degraded", 60)
    assert cond["reason"] == "ApplyFailed", cond
    assert "Service taken exists and is controlled by another owner" in cond["message"]
    taken = api.get("v1/services", ns, "taken")
    assert taken["metadata"]["ownerReferences"] == [other] and [p["port"] for p in taken["spec"]["ports"]] == [80]
    assert "labels" not in taken["metadata"]

    cond = wait_for(lambda: degraded("handmade"), "handmade Degraded", 60)
    assert cond["reason"] == "ApplyFailed", cond
    assert "ServiceAccount handmade-agent exists without an owner reference" in cond["message"]
    assert "delete it and Berth creates its own" in cond["message"]
    assert "ownerReferences" not in api.get("v1/serviceaccounts", ns, "handmade-agent")["metadata"]

    adopted_uid = api.get(REGISTRIES_PATH, ns, "adopted")["metadata"]["uid"]
    # Adoption takes two writes (a merge patch replaces the clashing port list, then the forced apply adds the owner
    # reference and labels): wait for the end state, not the first write's.
    def adopted() -> dict | None:
        service = api.get("v1/services", ns, "adopted")
        return service if service["metadata"].get("ownerReferences") and ports(api, ns, "adopted") == [5000] else None

    service = wait_for(adopted, "the hand-made Service adopted", 60)
    assert [r["uid"] for r in service["metadata"]["ownerReferences"]] == [adopted_uid]
    assert service["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth"
    assert degraded("adopted") is None
