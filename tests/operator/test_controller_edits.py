"""Edits of a live Registry: hot fields make no write, the image rolls the Deployment, replicas prune the
PodDisruptionBudget, deletion leaves nothing behind but what the deletion policy keeps."""

from __future__ import annotations

import copy
from typing import Any

from support.clusters.operator_harness import OWNED_PATHS, REGISTRIES_PATH, wait_for

COSI = "objectstorage.k8s.io/v1alpha1"

NS = "edits"


def registry(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


INMEMORY = {"config": {"storage": {"inmemory": {}}}}
COSI_R2 = {"replicas": 2, "config": {"storage": {"objectStorage": {"bucketClass": "b", "bucketAccessClass": "a"}}}}

# Fields the agent applies hot (docs/decisions/0009-restart-in-place-not-a-new-pod.md): one edit touching all of them.
HOT_EDIT = {
    "config": {
        "log": {"level": "debug"},
        "storage": {
            "delete": {"enabled": True},
            "redirect": {"disabled": True},
            "cache": {"blobdescriptor": "inmemory"},
            "maintenance": {"readonly": {"enabled": True}, "uploadpurging": {"age": "24h"}},
        },
    },
    "http": {"host": "https://registry.example.com", "relativeURLs": True, "drainTimeout": "10s"},
    "health": {"storagedriver": {"enabled": True}},
    "validation": {"manifests": {"urls": {"allow": ["^https://example\\.com/"]}}},
}


def versions(harness, uid: str) -> dict[tuple[str, str], str]:
    return {key: obj["metadata"]["resourceVersion"] for key, obj in harness.owned(NS, uid).items()}


def test_hot_field_edit_makes_no_write_to_owned_objects(operator_harness, kube_api):
    harness = operator_harness([NS])
    reg = kube_api.create(registry("hot", INMEMORY))
    harness.wait_reconciled(NS, "hot")
    before = versions(harness, reg["metadata"]["uid"])
    deployment_before = kube_api.get("apps/v1/deployments", NS, "hot")
    mark = len(kube_api.requests())

    edited = kube_api.patch(REGISTRIES_PATH, NS, "hot", {"spec": HOT_EDIT})
    assert edited["metadata"]["generation"] == reg["metadata"]["generation"] + 1
    harness.wait_reconciled(NS, "hot")

    assert versions(harness, reg["metadata"]["uid"]) == before
    assert kube_api.get("apps/v1/deployments", NS, "hot") == deployment_before
    # The only writes: the Registry's own status and kopf's bookkeeping annotation on the Registry.
    writes = harness.writes_after(mark)
    assert writes and all(path.startswith(f"/apis/berth.dev/v1alpha1/namespaces/{NS}/registries/hot")
                          for _, path in writes), writes


def test_image_edit_updates_the_deployment_only(operator_harness, kube_api):
    harness = operator_harness([NS])
    reg = kube_api.create(registry("img", INMEMORY))
    harness.wait_reconciled(NS, "img")
    before = versions(harness, reg["metadata"]["uid"])

    kube_api.patch(REGISTRIES_PATH, NS, "img", {"spec": {"image": "docker.io/library/registry:3.0.0"}})
    harness.wait_reconciled(NS, "img")

    deployment = kube_api.get("apps/v1/deployments", NS, "img")
    pod = deployment["spec"]["template"]["spec"]
    images = [c["image"] for c in [*pod["initContainers"], *pod["containers"]]]  # the binary's copy
    assert "docker.io/library/registry:3.0.0" in images
    after = versions(harness, reg["metadata"]["uid"])
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {("Deployment", "img")}
    wait_for(lambda: [e for e in harness.events(NS, "img") if e["reason"] == "Updated"
                      and e["message"] == "Updated Deployment img"], "the Updated event")


def test_placement_edit_rolls_the_deployment_and_progressing_says_so(operator_harness, kube_api):
    """A spec.pod edit changes the Deployment's template only (a ServiceAccount annotation edit changes the
    ServiceAccount too), and Progressing goes from Available to WaitingForPods at the new generation until the
    Deployment reports the new template rolled out (no controller rolls it here)."""
    harness = operator_harness([NS])
    reg = kube_api.create(registry("placed", INMEMORY))
    harness.wait_reconciled(NS, "placed")
    rolled = kube_api.get("apps/v1/deployments", NS, "placed")["metadata"]["generation"]
    kube_api.patch("apps/v1/deployments", NS, "placed", {"status": {  # the Deployment controller's part
        "observedGeneration": rolled, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}}, subresource="status")
    wait_for(lambda: harness.condition(NS, "placed", "Progressing")["reason"] == "Available", "Available")
    before = versions(harness, reg["metadata"]["uid"])
    generation = kube_api.patch(REGISTRIES_PATH, NS, "placed", {"spec": {"pod": {
        "nodeSelector": {"node-role.kubernetes.io/infra": ""}, "imagePullSecrets": [{"name": "pull"}]}}})[
        "metadata"]["generation"]
    harness.wait_reconciled(NS, "placed")
    template = kube_api.get("apps/v1/deployments", NS, "placed")["spec"]["template"]["spec"]
    assert template["nodeSelector"] == {"node-role.kubernetes.io/infra": ""}
    assert template["imagePullSecrets"] == [{"name": "pull"}]
    after = versions(harness, reg["metadata"]["uid"])
    assert {key for key in before if before[key] != after[key]} == {("Deployment", "placed")}
    progressing = harness.condition(NS, "placed", "Progressing")
    assert (progressing["status"], progressing["reason"], progressing["observedGeneration"]) == \
        ("True", "WaitingForPods", generation)

    kube_api.patch(REGISTRIES_PATH, NS, "placed", {"spec": {"serviceAccount": {"annotations": {
        "iam.gke.io/gcp-service-account": "registry@p.iam.gserviceaccount.com"}}}})
    harness.wait_reconciled(NS, "placed")
    changed = versions(harness, reg["metadata"]["uid"])
    assert {key for key in after if after[key] != changed[key]} == {("Deployment", "placed"),
                                                                     ("ServiceAccount", "placed-agent")}


def test_replicas_down_to_one_prunes_the_budget_and_never_the_storage(cosi_crds, operator_harness, kube_api):
    harness = operator_harness([NS])
    reg = kube_api.create(registry("scale", COSI_R2))
    harness.wait_reconciled(NS, "scale")
    assert kube_api.get("policy/v1/poddisruptionbudgets", NS, "scale") is not None

    kube_api.patch(REGISTRIES_PATH, NS, "scale", {"spec": {"replicas": 1}})
    harness.wait_reconciled(NS, "scale")

    assert kube_api.get("policy/v1/poddisruptionbudgets", NS, "scale") is None
    assert kube_api.get("apps/v1/deployments", NS, "scale")["spec"]["replicas"] == 1
    assert kube_api.get("objectstorage.k8s.io/v1alpha1/bucketclaims", NS, "scale-bucket") is not None
    assert kube_api.get("objectstorage.k8s.io/v1alpha1/bucketaccesses", NS, "scale-bucket-access") is not None
    assert ("Deployment", "scale") in harness.owned(NS, reg["metadata"]["uid"])
    wait_for(lambda: [e for e in harness.events(NS, "scale") if e["reason"] == "Deleted"
                      and e["message"] == "Deleted PodDisruptionBudget scale"], "the Deleted event")


def test_edited_owned_object_is_repaired(operator_harness, kube_api):
    """Level-triggered: drift in an owned object is undone by the next reconcile (here: an edit)."""
    harness = operator_harness([NS])
    kube_api.create(registry("drift", INMEMORY))
    harness.wait_reconciled(NS, "drift")
    kube_api.patch("v1/services", NS, "drift", {"spec": {"ports": [{"name": "x", "port": 1}]}})
    kube_api.patch(REGISTRIES_PATH, NS, "drift", {"spec": {"config": {"log": {"level": "warn"}}}})
    harness.wait_reconciled(NS, "drift")
    # The operator reconciles from its caches: the edit's reconcile may run before the Service's watch event
    # reaches them, and then the event's own wake repairs it a moment later.
    wait_for(lambda: [p["port"] for p in kube_api.get("v1/services", NS, "drift")["spec"]["ports"]] == [5000],
             "the Service's port repaired")
    assert [p.get("name") for p in kube_api.get("v1/services", NS, "drift")["spec"]["ports"]] != ["x"]


def with_policy(spec: dict, policy: str) -> dict:
    spec = copy.deepcopy(spec)
    spec["config"]["storage"]["objectStorage"]["deletionPolicy"] = policy
    return spec


def test_deleting_the_registry_under_delete_leaves_nothing_behind(cosi_crds, operator_harness, kube_api):
    harness = operator_harness([NS])
    reg = kube_api.create(registry("gone", with_policy(COSI_R2, "Delete") | {"replicas": 3}))
    harness.wait_reconciled(NS, "gone")
    assert len(harness.owned(NS, reg["metadata"]["uid"])) == 12  # with the reload and GC Leases and the metrics Service

    kube_api.delete(REGISTRIES_PATH, NS, "gone")

    assert kube_api.get(REGISTRIES_PATH, NS, "gone") is None  # no finalizer held it
    assert harness.owned(NS, reg["metadata"]["uid"]) == {}
    for path in OWNED_PATHS.values():
        assert kube_api.list(path, NS) == [], path


def test_deleting_the_registry_under_retain_leaves_its_bucket_claim_and_access_only(cosi_crds, operator_harness,
                                                                                   kube_api):
    """The default policy: what holds data stays, not owned; a Registry made again with the name takes it over
    (no ApplyFailed, no second claim), and a switch to Delete owns it then, in place."""
    harness = operator_harness([NS])
    reg = kube_api.create(registry("kept", COSI_R2))
    harness.wait_reconciled(NS, "kept")
    kube_api.delete(REGISTRIES_PATH, NS, "kept")
    assert harness.owned(NS, reg["metadata"]["uid"]) == {}
    # What has no owner is what stays (a reconcile in flight at the deletion may create an object owned by the
    # gone uid after the emulator's cascade: a cluster's garbage collector deletes that one too).
    left = {(kind, obj["metadata"]["name"]) for kind, path in OWNED_PATHS.items() for obj in kube_api.list(path, NS)
            if not obj["metadata"].get("ownerReferences")}
    assert left == {("BucketClaim", "kept-bucket"), ("BucketAccess", "kept-bucket-access")}
    claim_uid = kube_api.get(f"{COSI}/bucketclaims", NS, "kept-bucket")["metadata"]["uid"]

    again = kube_api.create(registry("kept", COSI_R2))
    harness.wait_reconciled(NS, "kept")
    assert harness.condition(NS, "kept", "Degraded")["reason"] != "ApplyFailed"  # (its classes are not seeded)
    assert kube_api.get(f"{COSI}/bucketclaims", NS, "kept-bucket")["metadata"]["uid"] == claim_uid

    kube_api.patch(REGISTRIES_PATH, NS, "kept", {"spec": with_policy(COSI_R2, "Delete")})
    wait_for(lambda: {("BucketClaim", "kept-bucket"), ("BucketAccess", "kept-bucket-access")}
             <= set(harness.owned(NS, again["metadata"]["uid"])), "the claims owned under Delete")
    claim = kube_api.get(f"{COSI}/bucketclaims", NS, "kept-bucket")
    assert claim["metadata"]["uid"] == claim_uid
    assert claim["metadata"]["annotations"]["berth.dev/deletion-policy"] == "Delete"
    wait_for(lambda: [e for e in harness.events(NS, "kept") if e["reason"] == "Owned"], "the Owned event")


def test_conflicting_write_is_read_again_and_retried(operator_harness, kube_api):
    harness = operator_harness([NS])
    kube_api.create(registry("race", INMEMORY))
    harness.wait_reconciled(NS, "race")
    # Someone else wrote the Deployment between our read and our patch (409 Conflict once).
    kube_api.fail_next(1, status=409, verb="patch", plural="deployments")
    kube_api.patch(REGISTRIES_PATH, NS, "race", {"spec": {"image": "docker.io/library/registry:3.0.0"}})
    harness.wait_reconciled(NS, "race")
    pod = kube_api.get("apps/v1/deployments", NS, "race")["spec"]["template"]["spec"]
    assert "docker.io/library/registry:3.0.0" in [c["image"] for c in [*pod["initContainers"], *pod["containers"]]]
    assert harness.condition(NS, "race", "Degraded")["status"] == "False"


def test_object_of_another_controller_is_left_alone_and_reported(operator_harness, kube_api):
    harness = operator_harness([NS])
    other = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "someone", "uid": "other-uid", "controller": True}
    kube_api.create({"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "taken", "namespace": NS, "ownerReferences": [other]}, "spec": {"ports": [{"port": 80}]}})
    kube_api.create(registry("taken", INMEMORY))
    harness.wait_reconciled(NS, "taken")
    cond = harness.condition(NS, "taken", "Degraded")
    assert (cond["status"], cond["reason"]) == ("True", "ApplyFailed")
    assert "Service taken exists and is controlled by another owner" in cond["message"]
    service = kube_api.get("v1/services", NS, "taken")
    assert service["metadata"]["ownerReferences"] == [other] and service["spec"]["ports"] == [{"port": 80}]


def test_sweep_recreates_a_deleted_object_without_any_edit(operator_harness, kube_api):
    harness = operator_harness([NS], refresh_interval=0.3)
    kube_api.create(registry("heal", INMEMORY))
    harness.wait_reconciled(NS, "heal")
    kube_api.delete("v1/services", NS, "heal")
    service = wait_for(lambda: kube_api.get("v1/services", NS, "heal"), "the Service recreated by the sweep")
    assert [p["port"] for p in service["spec"]["ports"]] == [5000]


def test_naming_another_secret_moves_the_agent_role_to_it(operator_harness, kube_api):
    """The agent Role reads exactly the Secrets the pod mounts; renaming one updates the Role's
    resourceNames (and the Deployment, whose volume changes), granting nothing beyond the new set."""
    for name in ("users", "users-2"):
        kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
                         "data": {"htpasswd": "dXNlcjokMnkkMDUkeA=="}})
    spec = {"config": {"storage": {"inmemory": {}, "auth": {"htpasswd": {"secret": {"name": "users",
                                                                                    "field": "htpasswd"}}}}}}
    harness = operator_harness([NS])
    kube_api.create(registry("auth", spec))
    harness.wait_reconciled(NS, "auth")

    def secret_names() -> list[str]:
        rules = kube_api.get("rbac.authorization.k8s.io/v1/roles", NS, "auth-agent")["rules"]
        return [n for rule in rules if "secrets" in rule["resources"] for n in rule["resourceNames"]]

    assert secret_names() == ["auth-http-secret", "users"]
    kube_api.patch(REGISTRIES_PATH, NS, "auth",
                   {"spec": {"config": {"storage": {"auth": {"htpasswd": {"secret": {"name": "users-2"}}}}}}})
    harness.wait_reconciled(NS, "auth")
    wait_for(lambda: secret_names() == ["auth-http-secret", "users-2"], "the Role to name the new Secret")
    volumes = kube_api.get("apps/v1/deployments", NS, "auth")["spec"]["template"]["spec"]["volumes"]
    assert sorted(v["secret"]["secretName"] for v in volumes if "secret" in v) == secret_names()
