"""The test API server (tests/support/clusters/kube.py) behaves like the API server where kmock 0.8 does not.

Each test drives the server with the official kubernetes client over HTTP, as the agent and the operator
will, and names the kmock gap it covers (docs/upstream.md#parts-kmock).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import kubernetes.client
import kubernetes.config
import kubernetes.watch
import pytest
from kubernetes.client.exceptions import ApiException

from support.clusters.kube import KubeApi, install_cosi_crds

GROUP, VERSION, PLURAL = "berth.dev", "v1alpha1", "registries"
NS = "ns1"


def registry(name: str = "r1", **spec: object) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Registry",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"config": {"storage": {"filesystem": {}}}, **spec},
    }


@pytest.fixture
def custom(kube_api: KubeApi) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(kube_api.client())


@pytest.fixture
def core(kube_api: KubeApi) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(kube_api.client())


def test_create_answers_201_with_stamped_metadata(core: kubernetes.client.CoreV1Api) -> None:
    # kmock answers 200, and the client then returns None from create_*.
    secret = core.create_namespaced_secret(NS, {"metadata": {"name": "s1"}, "stringData": {"k": "v"}})
    assert secret is not None and secret.metadata.name == "s1"
    assert secret.metadata.uid and secret.metadata.creation_timestamp is not None
    assert secret.metadata.generation == 1 and int(secret.metadata.resource_version) > 0
    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_secret(NS, {"metadata": {"name": "s1"}})
    assert duplicate.value.status == 409


def test_generate_name_and_namespaces_list(core: kubernetes.client.CoreV1Api) -> None:
    event = core.create_namespaced_event(NS, {"metadata": {"generateName": "kopf-event-"}, "involvedObject": {}})
    assert event.metadata.name.startswith("kopf-event-") and len(event.metadata.name) == len("kopf-event-") + 5
    core.create_namespace({"metadata": {"name": "other"}})
    assert [namespace.metadata.name for namespace in core.list_namespace().items] == ["other"]


def test_resource_version_bumps_on_every_write_and_never_on_a_noop(custom) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry())
    patched = custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1",
                                                    {"metadata": {"labels": {"a": "1"}}})
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    again = custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1",
                                                  {"metadata": {"labels": {"a": "1"}}})
    assert again["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    assert again["metadata"]["uid"] == created["metadata"]["uid"]


def test_generation_counts_spec_changes_and_status_is_a_subresource(custom) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, {**registry(), "status": {"x": 1}})
    assert created["metadata"]["generation"] == 1 and "status" not in created  # create drops status

    labelled = custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1",
                                                     {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1

    # A main-resource write changes spec (generation 2) and cannot touch status.
    edited = custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1",
                                                   {"spec": {"replicas": 2}, "status": {"sneaky": True}})
    assert edited["metadata"]["generation"] == 2 and "status" not in edited

    # A /status write changes status only: no generation bump, spec edits ignored.
    status = custom.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "r1",
                                                          {"spec": {"replicas": 9}, "status": {"replicas": 2}})
    assert status["status"] == {"replicas": 2}
    assert status["spec"]["replicas"] == 2 and status["metadata"]["generation"] == 2


def test_stale_resource_version_is_a_conflict(custom) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry())
    stale = created["metadata"]["resourceVersion"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1", {"spec": {"replicas": 2}})
    with pytest.raises(ApiException) as conflict:
        custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1",
                                              {"metadata": {"resourceVersion": stale}, "spec": {"replicas": 3}})
    assert conflict.value.status == 409
    with pytest.raises(ApiException) as replace_conflict:
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1", created)
    assert replace_conflict.value.status == 409
    current = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1")
    assert current["spec"]["replicas"] == 2
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1",
                                                       {**current, "spec": {**current["spec"], "replicas": 4}})
    assert replaced["spec"]["replicas"] == 4 and replaced["metadata"]["generation"] == 3


def test_strategic_merge_patch_on_a_custom_resource_is_415(kube_api: KubeApi, custom) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry())
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1", {"spec": {"replicas": 2}},
                                              _content_type="application/strategic-merge-patch+json")
    assert refused.value.status == 415


def test_strategic_merge_patch_merges_lists_by_key(kube_api: KubeApi) -> None:
    apps = kubernetes.client.AppsV1Api(kube_api.client())  # dict bodies go as strategic merge patches
    labels = {"app": "d"}
    apps.create_namespaced_deployment(NS, {
        "metadata": {"name": "d", "finalizers": ["a/b"]},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "containers": [{"name": "agent", "image": "a:1"}, {"name": "registry", "image": "r:1",
                                                                "env": [{"name": "X", "value": "1"}]}],
            "volumes": [{"name": "config", "emptyDir": {}}, {"name": "data", "emptyDir": {}}]}}}})

    patched = apps.patch_namespaced_deployment("d", NS, {
        "metadata": {"finalizers": ["c/d"]},
        "spec": {"template": {"spec": {
            "containers": [{"name": "registry", "image": "r:2", "env": [{"name": "Y", "value": "2"}]}],
            "volumes": [{"name": "data", "$patch": "delete"}]}}}})

    pod = patched.spec.template.spec
    assert [(c.name, c.image) for c in pod.containers] == [("agent", "a:1"), ("registry", "r:2")]
    assert [(e.name, e.value) for e in pod.containers[1].env] == [("X", "1"), ("Y", "2")]
    assert [v.name for v in pod.volumes] == ["config"]
    assert patched.metadata.finalizers == ["a/b", "c/d"]  # a primitive set merges too


def test_failed_json_patch_test_op_is_422(core) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "cm", "labels": {"owner": "a"}}})
    with pytest.raises(ApiException) as failed:
        core.patch_namespaced_config_map("cm", NS, [
            {"op": "test", "path": "/metadata/labels/owner", "value": "b"},
            {"op": "replace", "path": "/metadata/labels/owner", "value": "c"},
        ])
    assert failed.value.status == 422
    swapped = core.patch_namespaced_config_map("cm", NS, [
        {"op": "test", "path": "/metadata/labels/owner", "value": "a"},
        {"op": "replace", "path": "/metadata/labels/owner", "value": "c"},
    ])
    assert swapped.metadata.labels == {"owner": "c"}


def test_label_and_field_selectors_on_list(core) -> None:
    for name, tier in [("a", "web"), ("b", "db"), ("c", None)]:
        labels = {"tier": tier} if tier else {}
        core.create_namespaced_config_map(NS, {"metadata": {"name": name, "labels": labels}})
    core.create_namespaced_config_map("elsewhere", {"metadata": {"name": "a", "labels": {"tier": "web"}}})

    def names(**selectors: str) -> list[str]:
        return sorted(item.metadata.name for item in core.list_namespaced_config_map(NS, **selectors).items)

    assert names(label_selector="tier=web") == ["a"]
    assert names(label_selector="tier in (web, db)") == ["a", "b"]
    assert names(label_selector="!tier") == ["c"]
    assert names(label_selector="tier,tier!=db") == ["a"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert len(core.list_config_map_for_all_namespaces(label_selector="tier=web").items) == 2


def test_unsupported_field_label_on_a_custom_resource_is_400(custom) -> None:
    with pytest.raises(ApiException) as bad:
        custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, field_selector="spec.image=x")
    assert bad.value.status == 400


def watch_events(list_fn, *args, **kwargs) -> list[tuple[str, str]]:
    """(type, name) of every event until the server ends the stream (timeoutSeconds)."""
    return [(event["type"], event["raw_object"]["metadata"]["name"])
            for event in kubernetes.watch.Watch().stream(list_fn, *args, **kwargs)]


def test_watch_resumes_after_a_resource_version_without_replay(custom) -> None:
    first = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry("r1"))
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry("r2"))
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1", {"spec": {"replicas": 2}})
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r2")

    resumed = watch_events(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                           resource_version=first["metadata"]["resourceVersion"], timeout_seconds=1)
    assert resumed == [("ADDED", "r2"), ("MODIFIED", "r1"), ("DELETED", "r2")]

    fresh = watch_events(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, timeout_seconds=1)
    assert fresh == [("ADDED", "r1")]


def test_single_object_watch_with_field_selector(custom) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry("r1"))
    start = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["metadata"]["resourceVersion"]
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry("r2"))
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r2", {"spec": {"replicas": 2}})
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1", {"spec": {"replicas": 2}})
    events = watch_events(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                          field_selector="metadata.name=r1", resource_version=start, timeout_seconds=1)
    assert events == [("MODIFIED", "r1")]


def test_label_selector_watch_sees_objects_enter_and_leave(core) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}})
    start = core.list_namespaced_config_map(NS).metadata.resource_version
    core.patch_namespaced_config_map("cm", NS, {"metadata": {"labels": {"app": "x"}}})
    core.patch_namespaced_config_map("cm", NS, {"data": {"k": "v"}})
    core.patch_namespaced_config_map("cm", NS, {"metadata": {"labels": {"app": None}}})
    events = watch_events(core.list_namespaced_config_map, NS, label_selector="app=x",
                          resource_version=start, timeout_seconds=1)
    assert events == [("ADDED", "cm"), ("MODIFIED", "cm"), ("DELETED", "cm")]


def test_too_old_resource_version_is_410_gone(kube_api: KubeApi, custom) -> None:
    first = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry())
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1", {"spec": {"replicas": 2}})
    kube_api.compact()
    with pytest.raises(ApiException) as gone:  # the client turns the ERROR event into an exception
        watch_events(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                     resource_version=first["metadata"]["resourceVersion"], timeout_seconds=1)
    assert gone.value.status == 410
    # A relist gives a resourceVersion that resumes fine.
    relisted = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    assert watch_events(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                        resource_version=relisted["metadata"]["resourceVersion"], timeout_seconds=1) == []


def test_bounded_history_expires_old_resume_points() -> None:
    with KubeApi(history_limit=3) as api:
        core = kubernetes.client.CoreV1Api(api.client())
        first = core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}})
        for value in range(4):
            core.patch_namespaced_config_map("cm", NS, {"data": {"v": str(value)}})
        with pytest.raises(ApiException) as gone:
            watch_events(core.list_namespaced_config_map, NS,
                         resource_version=first.metadata.resource_version, timeout_seconds=1)
        assert gone.value.status == 410


def test_finalizers_hold_deletion_until_removed(custom) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                           {**registry(), "metadata": {"name": "r1", "finalizers": ["x/y"]}})
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1")
    held = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1")
    assert held["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1")
    assert gone.value.status == 404


def owned_by(obj: dict) -> list[dict]:
    meta = obj["metadata"]
    return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}]


def test_owner_garbage_collection_is_recursive_and_spares_co_owned(kube_api: KubeApi, custom, core) -> None:
    owner = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry())
    other = kube_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": NS}})
    secret = kube_api.create({"apiVersion": "v1", "kind": "Secret",
                              "metadata": {"name": "child", "namespace": NS, "ownerReferences": owned_by(owner)}})
    kube_api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": "grandchild", "namespace": NS, "ownerReferences": owned_by(secret)}})
    kube_api.create({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": "shared", "namespace": NS,
                                  "ownerReferences": owned_by(owner) + owned_by(other)}, "spec": {}})

    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1")

    assert kube_api.get("v1/secrets", NS, "child") is None
    assert kube_api.get("v1/serviceaccounts", NS, "grandchild") is None
    shared = kube_api.get("apps/v1/deployments", NS, "shared")
    assert [ref["name"] for ref in shared["metadata"]["ownerReferences"]] == ["other"]


def test_orphan_propagation_keeps_dependents(kube_api: KubeApi, custom) -> None:
    owner = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry())
    kube_api.create({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": "child", "namespace": NS, "ownerReferences": owned_by(owner)}})
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1", propagation_policy="Orphan")
    assert "ownerReferences" not in kube_api.get("v1/secrets", NS, "child")["metadata"]


def test_server_side_apply_creates_and_drops_unapplied_fields(core) -> None:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": NS, "labels": {"a": "1", "b": "2"}},
                "data": {"k": "v"}}
    created = core.patch_namespaced_config_map("cm", NS, manifest, field_manager="berth", force=True,
                                               _content_type="application/apply-patch+yaml")
    assert created.metadata.labels == {"a": "1", "b": "2"}
    core.patch_namespaced_config_map("cm", NS, {"metadata": {"annotations": {"by": "someone else"}}})
    manifest["metadata"]["labels"] = {"a": "1"}
    applied = core.patch_namespaced_config_map("cm", NS, manifest, field_manager="berth", force=True,
                                               _content_type="application/apply-patch+yaml")
    assert applied.metadata.labels == {"a": "1"}
    assert applied.metadata.annotations == {"by": "someone else"}  # not this manager's field
    assert applied.metadata.generation == 1  # metadata only


def test_server_side_apply_merges_owner_references_and_refuses_a_second_controller(core) -> None:
    """As the API server: an apply's owner references join the object's (a list keyed by uid), and two
    controllers among them are invalid (the operator's unforced apply relies on it to leave others' objects)."""
    other = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "uid-d"}
    core.create_namespaced_config_map(NS, {"metadata": {"name": "owned", "ownerReferences": [other]}})
    core.create_namespaced_config_map(NS, {"metadata": {"name": "taken",
                                                        "ownerReferences": [{**other, "controller": True}]}})
    ours = {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "name": "r", "uid": "uid-r", "controller": True}

    def apply(name: str) -> Any:
        manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": NS, "ownerReferences": [ours]}}
        return core.patch_namespaced_config_map(name, NS, manifest, field_manager="berth", force=False,
                                                _content_type="application/apply-patch+yaml")

    refs = apply("owned").metadata.owner_references
    assert [(r.uid, bool(r.controller)) for r in refs] == [("uid-d", False), ("uid-r", True)]
    with pytest.raises(ApiException) as refused:
        apply("taken")
    assert refused.value.status == 422
    refs = core.read_namespaced_config_map("taken", NS).metadata.owner_references
    assert [(r.uid, bool(r.controller)) for r in refs] == [("uid-d", True)]


def test_scale_subresource(custom) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, registry(replicas=1))
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, NS, PLURAL, "r1", {"spec": {"replicas": 3}})
    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, NS, PLURAL, "r1")
    assert scale["spec"]["replicas"] == 3
    assert custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "r1")["metadata"]["generation"] == 2


def test_fail_next_injects_server_errors(kube_api: KubeApi, core) -> None:
    kube_api.fail_next(2, verb="list", plural="secrets")
    core.list_namespaced_config_map(NS)  # other resources are unaffected
    for _ in range(2):
        with pytest.raises(ApiException) as failed:
            core.list_namespaced_secret(NS)
        assert failed.value.status == 500
    assert core.list_namespaced_secret(NS).items == []


def test_drop_watches_cuts_open_streams(kube_api: KubeApi, core) -> None:
    outcome: list[str] = []
    watching = threading.Event()

    def watch() -> None:
        stream = kubernetes.watch.Watch().stream(core.list_namespaced_secret, NS, _request_timeout=30)
        try:
            for event in stream:
                outcome.append(event["type"])
                watching.set()
            outcome.append("clean end")
        except Exception as error:  # noqa: BLE001  (what a dropped connection raises is the point)
            outcome.append(f"error: {type(error).__name__}")

    kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": NS}})
    thread = threading.Thread(target=watch)
    thread.start()
    assert watching.wait(10)
    assert kube_api.drop_watches() == 1
    thread.join(10)
    assert outcome[0] == "ADDED" and outcome[-1].startswith("error")


def test_kubeconfig_file_points_at_the_server(kube_api: KubeApi) -> None:
    client = kubernetes.config.new_client_from_config(config_file=str(kube_api.kubeconfig))
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "via-kubeconfig"}})
    names = [ns.metadata.name for ns in kubernetes.client.CoreV1Api(client).list_namespace().items]
    assert names == ["via-kubeconfig"]


def test_the_crds_are_discoverable_and_stored(kube_api: KubeApi) -> None:
    api = kubernetes.client.ApiextensionsV1Api(kube_api.client())
    names = sorted(crd.metadata.name for crd in api.list_custom_resource_definition().items)
    assert names == ["registries.berth.dev"]  # bare by default, as users' clusters are
    install_cosi_crds(kube_api)
    names = sorted(crd.metadata.name for crd in api.list_custom_resource_definition().items)
    assert names == ["bucketaccessclasses.objectstorage.k8s.io", "bucketaccesses.objectstorage.k8s.io",
                     "bucketclaims.objectstorage.k8s.io", "bucketclasses.objectstorage.k8s.io",
                     "registries.berth.dev"]
    resources = kubernetes.client.CustomObjectsApi(kube_api.client()).get_api_resources(GROUP, VERSION)
    assert {resource.name for resource in resources.resources} == {"registries", "registries/status",
                                                                   "registries/scale"}
    cosi = kubernetes.client.CustomObjectsApi(kube_api.client())
    cosi.create_cluster_custom_object("objectstorage.k8s.io", "v1alpha1", "bucketclasses",
                                      {"metadata": {"name": "fast"}, "driverName": "x", "deletionPolicy": "Delete"})
    claim = cosi.create_namespaced_custom_object("objectstorage.k8s.io", "v1alpha1", NS, "bucketclaims",
                                                 {"metadata": {"name": "b"}, "spec": {"bucketClassName": "fast"}})
    assert claim["kind"] == "BucketClaim" and claim["metadata"]["namespace"] == NS


@pytest.mark.asyncio
async def test_async_code_wraps_the_client_in_threads(kube_api: KubeApi) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube_api.client())
    created = await asyncio.to_thread(custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, registry())
    fetched = await asyncio.to_thread(custom.get_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "r1")
    assert fetched["metadata"]["uid"] == created["metadata"]["uid"]
