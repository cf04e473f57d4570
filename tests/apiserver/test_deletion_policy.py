"""The deletion policy of what holds a Registry's data, on a real API server with the controller manager's garbage
collector (support.clusters.control_plane) and `berth-operator` as deploy/ runs it (its RBAC, and
OwnerReferencesPermissionEnforcement on: changing an owner reference needs delete on the object).

- Retain (the default): the claim Berth makes from a class (a PersistentVolumeClaim, or a COSI BucketClaim and
  BucketAccess) carries no owner reference, survives the Registry's deletion once the collector has removed the
  rest, and a Registry created again with the name takes it over: the same object (uid), no ApplyFailed.
- A policy change on a live Registry sets the owner reference in place: Delete then Retain never loses the object
  (same uid throughout).
- Delete: the collector deletes it with the Registry.
Nothing the operator asks is refused (the audit log).
"""

from __future__ import annotations

import pytest

from support.clusters.apiserver import ApiError, install_cosi_crds
from support.clusters.apiserver_identities import refused_requests, start_operator
from support.clusters.operator_harness import REGISTRIES_PATH
from support.clusters.operator_harness import reconciled as reconciled_registry
from support.common.polling import wait_for

COSI = "objectstorage.k8s.io/v1alpha1"
POLICY = "berth.dev/deletion-policy"

FILESYSTEM = ({"filesystem": {"storageClass": "berth-test-slow"}},
              {"v1/persistentvolumeclaims": "{name}-data"})
OBJECT_STORAGE = ({"objectStorage": {"bucketClass": "berth-test-bucket", "bucketAccessClass": "berth-test-access"}},
                  {f"{COSI}/bucketclaims": "{name}-bucket", f"{COSI}/bucketaccesses": "{name}-bucket-access"})


def registry(namespace: str, name: str, storage: dict, policy: str | None = None) -> dict:
    backend, fields = next(iter(storage.items()))
    fields = {**fields, **({"deletionPolicy": policy} if policy else {})}
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": namespace},
            "spec": {"config": {"storage": {backend: fields}}}}


def install_classes(api) -> None:
    install_cosi_crds(api)
    for obj in ({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "berth-test-slow"},
                 "provisioner": "example.com/none"},
                {"apiVersion": COSI, "kind": "BucketClass", "metadata": {"name": "berth-test-bucket"},
                 "driverName": "example.com/none", "deletionPolicy": "Delete"},
                {"apiVersion": COSI, "kind": "BucketAccessClass", "metadata": {"name": "berth-test-access"},
                 "driverName": "example.com/none", "authenticationType": "Key"}):
        try:
            api.create(obj)
        except ApiError as error:
            if error.status != 409:  # 409: another test of this worker made it
                raise


@pytest.fixture
def operator(kube_control_plane, control_plane_namespace, tmp_path):
    install_classes(kube_control_plane.api)
    process, token = start_operator(kube_control_plane.api, "operator-policy", tmp_path, [control_plane_namespace])
    yield process, token
    assert process.stop() == 0, process.log()[-3000:]
    assert "Traceback" not in process.log()


def claims(api, namespace: str, name: str, storage: tuple) -> dict[str, dict | None]:
    return {path: api.get(path, namespace, template.format(name=name)) for path, template in storage[1].items()}


def owners(obj: dict | None) -> list[str] | None:
    return None if obj is None else [ref["uid"] for ref in obj["metadata"].get("ownerReferences") or ()]


@pytest.mark.parametrize("storage", [FILESYSTEM, OBJECT_STORAGE], ids=["filesystem", "cosi"])
def test_retain_keeps_the_claims_through_a_deletion_and_a_namesake_adopts_them(kube_control_plane,
                                                                               control_plane_namespace, operator,
                                                                               storage):
    api, ns = kube_control_plane.api, control_plane_namespace
    _process, token = operator
    first = api.create(registry(ns, "keep", storage[0]))
    made = wait_for(lambda: (found := claims(api, ns, "keep", storage)) and all(found.values()) and found,
                    "the claims made", 60)
    uids = {path: obj["metadata"]["uid"] for path, obj in made.items()}
    for obj in made.values():
        assert owners(obj) == [] and obj["metadata"]["annotations"][POLICY] == "Retain"
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "keep"

    # Delete then Retain on the live Registry: the owner reference comes and goes, the objects stay the same.
    api.patch(REGISTRIES_PATH, ns, "keep", {"spec": registry(ns, "keep", storage[0], "Delete")["spec"]})
    wait_for(lambda: all(owners(obj) == [first["metadata"]["uid"]] for obj in claims(api, ns, "keep", storage)
                         .values()), "the claims owned under Delete", 60)
    api.patch(REGISTRIES_PATH, ns, "keep", {"spec": registry(ns, "keep", storage[0], "Retain")["spec"]})
    wait_for(lambda: all(owners(obj) == [] for obj in claims(api, ns, "keep", storage).values()),
             "the claims retained again", 60)
    assert {path: obj["metadata"]["uid"] for path, obj in claims(api, ns, "keep", storage).items()} == uids

    api.delete(REGISTRIES_PATH, ns, "keep")
    # The collector removed what the Registry owned: the Deployment and the ServiceAccount.
    wait_for(lambda: api.get("apps/v1/deployments", ns, "keep") is None
             and api.get("v1/serviceaccounts", ns, "keep-agent") is None, "the owned objects collected", 60)
    kept = claims(api, ns, "keep", storage)
    assert {path: obj and obj["metadata"]["uid"] for path, obj in kept.items()} == uids
    assert not any(obj["metadata"].get("deletionTimestamp") for obj in kept.values())

    again = api.create(registry(ns, "keep", storage[0]))
    done = wait_for(lambda: reconciled_registry(api, ns, "keep"), "the new Registry reconciled", 60)
    degraded = {c["type"]: c for c in done["status"]["conditions"]}["Degraded"]
    assert degraded["reason"] != "ApplyFailed", degraded
    assert {path: obj["metadata"]["uid"] for path, obj in claims(api, ns, "keep", storage).items()} == uids

    # Delete on the namesake: it owns the same objects, and they go with it.
    api.patch(REGISTRIES_PATH, ns, "keep", {"spec": registry(ns, "keep", storage[0], "Delete")["spec"]})
    wait_for(lambda: all(owners(obj) == [again["metadata"]["uid"]] for obj in claims(api, ns, "keep", storage)
                         .values()), "the claims owned by the namesake", 60)
    api.delete(REGISTRIES_PATH, ns, "keep")
    wait_for(lambda: not any((obj is not None and not obj["metadata"].get("deletionTimestamp"))
                             for obj in claims(api, ns, "keep", storage).values()),
             "the claims collected under Delete", 60)
    assert refused_requests(api, token) == []
