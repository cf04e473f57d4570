"""The classes a spec names, cached: StorageClasses, BucketClasses and BucketAccessClasses are listed and
watched cluster-wide (caches.Caches.of_classes), on the real kube-apiserver with only deploy/ applied and the
operator running as deploy/ runs it (its ServiceAccount, deploy/'s RBAC):

- a Registry naming a class that does not exist is Degraded (MissingStorageClass, MissingBucketClass,
  MissingBucketAccessClass); the class created, it moves on within seconds, far sooner than the 60 s sweep: the
  class's watch wakes the Registries that read it. A class deleted wakes them too (Degraded again);
- COSI's classes are cached once COSI is served (their CRDs installed after the operator started);
- once the classes are listed, no reconcile GETs a class (counted in the audit log), and nothing the operator asked
  was refused (the list and watch of classes are in deploy/clusterrole.yaml).

The server is this module's own: its classes are this test's.
"""

from __future__ import annotations

import time

import pytest

from berth_operator.core.kinds import COSI
from support.clusters.apiserver import KubeApiServer, install_cosi_crds
from support.clusters.apiserver_identities import OPERATOR_USER, operator_on_own_server, refused_requests
from support.clusters.operator_harness import reconciled
from support.common.polling import wait_for

REGISTRIES = "berth.dev/v1alpha1/registries"
NS = "classes"
BOUND = 10.0  # seconds: a wake, not the sweep (60 s)
CLASS_RESOURCES = {"storageclasses", "bucketclasses", "bucketaccessclasses"}


def reasons(api: KubeApiServer, name: str) -> set[str]:
    reg = api.get(REGISTRIES, NS, name) or {}
    return {c["reason"] for c in (reg.get("status") or {}).get("conditions") or ()}


def registry(name: str, storage: dict) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
            "spec": {"config": {"storage": storage}}}


def class_reads(api: KubeApiServer, since: int) -> list[str]:
    return [f"{e['verb']} {e['requestURI']}" for e in api.audit(OPERATOR_USER, since=since)
            if (e.get("objectRef") or {}).get("resource") in CLASS_RESOURCES and e["verb"] == "get"]


def within_bound(api: KubeApiServer, name: str, predicate, what: str) -> None:
    started = time.monotonic()
    wait_for(lambda: predicate(reasons(api, name)), what, 60)
    took = time.monotonic() - started
    assert took < BOUND, f"{what}: {took:.1f} s"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with operator_on_own_server(tmp_path_factory.mktemp("classes"), None, (NS,)) as (api, operator, token):
        wait_for(lambda: "caches of classes synced" in operator.log(), "the classes listed", 60)
        yield api, operator, token


def test_a_class_created_or_deleted_wakes_the_registries_naming_it(cluster):
    api, operator, token = cluster
    mark = api.audit_mark()
    api.create(registry("fs", {"filesystem": {"storageClass": "later"}}))
    wait_for(lambda: "MissingStorageClass" in reasons(api, "fs"), "fs Degraded MissingStorageClass", 60)

    api.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "later"},
                "provisioner": "example.com/none"})
    within_bound(api, "fs", lambda found: "MissingStorageClass" not in found, "fs past MissingStorageClass")
    wait_for(lambda: api.get("v1/persistentvolumeclaims", NS, "fs-data"), "the claim made from the class", 30)

    api.delete("storage.k8s.io/v1/storageclasses", None, "later")
    within_bound(api, "fs", lambda found: "MissingStorageClass" in found, "fs Degraded again")

    # COSI served only now: its classes are cached from then on, and wake as the StorageClass did.
    install_cosi_crds(api)
    api.create(registry("obj", {"objectStorage": {"bucketClass": "b", "bucketAccessClass": "a"}}))
    wait_for(lambda: "MissingBucketClass" in reasons(api, "obj"), "obj Degraded MissingBucketClass", 60)
    api.create({"apiVersion": COSI, "kind": "BucketClass", "metadata": {"name": "b"},
                "driverName": "example.com/none", "deletionPolicy": "Delete"})
    within_bound(api, "obj", lambda found: "MissingBucketClass" not in found and "MissingBucketAccessClass" in found,
                 "obj past MissingBucketClass")
    api.create({"apiVersion": COSI, "kind": "BucketAccessClass", "metadata": {"name": "a"},
                "driverName": "example.com/none", "authenticationType": "Key"})
    within_bound(api, "obj", lambda found: not {"MissingBucketClass", "MissingBucketAccessClass"} & found,
                 "obj past MissingBucketAccessClass")
    wait_for(lambda: api.get(f"{COSI}/bucketclaims", NS, "obj-bucket"), "the BucketClaim made from the class", 30)
    assert reconciled(api, NS, "obj")

    # The COSI classes' informers list once their CRDs are served; a reconcile in that moment reads the server.
    assert [read for read in class_reads(api, mark) if "storageclasses" in read] == []
    assert len(class_reads(api, mark)) <= 2, class_reads(api, mark)
    assert [(e["verb"], e["requestURI"]) for e in refused_requests(api, token)] == []
