"""The operator in process against the test API server: what each Registry creates, edits, deletion."""

from __future__ import annotations

import base64
import copy
import pathlib
from typing import Any

import pytest
import yaml

from support.clusters.operator_harness import OWNED_PATHS, OperatorHarness, wait_for

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

# What the cluster has before each Registry: referenced Secrets, claims, accesses and classes.
COSI = "objectstorage.k8s.io/v1alpha1"


def secret(name: str, **data: str) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}


def bucket(claim: str, access: str, creds: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": COSI, "kind": "BucketClaim", "metadata": {"name": claim},
         "spec": {"bucketClassName": "x", "protocols": ["S3"]}, "status": {"bucketReady": True}},
        {"apiVersion": COSI, "kind": "BucketAccess", "metadata": {"name": access},
         "spec": {"bucketClaimName": claim, "credentialsSecretName": creds, "bucketAccessClassName": "y"},
         "status": {"accessGranted": True}},
        secret(creds, BucketInfo="{}"),
    ]


CLASSES = [
    {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
     "provisioner": "example.com/disk"},
    {"apiVersion": COSI, "kind": "BucketClass", "metadata": {"name": "s3-standard"}, "driverName": "d",
     "deletionPolicy": "Retain"},
    {"apiVersion": COSI, "kind": "BucketAccessClass", "metadata": {"name": "s3-key-access"}, "driverName": "d",
     "authenticationType": "Key"},
]

SEEDS: dict[str, list[dict[str, Any]]] = {
    "filesystem-pvc": [{
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "team-registry-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound"},
    }],
    "cosi-existing": bucket("archive-bucket", "archive-bucket-access", "archive-credentials"),
    "full": [
        *bucket("registry-bucket", "registry-bucket-access", "registry-cosi"),
        secret("registry-htpasswd", htpasswd="user:$2y$05$abc"),
        secret("registry-http-secret", secretForLocalDev="planted-http-secret"),
        secret("registry-redis", redisConnection="redis://redis:6379"),
    ],
    # The webhook token's Secret; no prometheus-operator CRD here (kmock), so no ServiceMonitor: Degraded
    # MissingMonitoringCRD, everything else built.
    "monitored": [secret("registry-hooks", token="Bearer planted-token")],
    "azure-shared-key": [secret("registry-azure", accountKey="a2V5"), secret("registry-http-secret", secret="s")],
    "gcs-key": [secret("registry-gcs", **{"key.json": "{}"}), secret("registry-http-secret", secret="s")],
    "s3-secret": [secret("registry-s3", AWS_ACCESS_KEY_ID="AKIA", AWS_SECRET_ACCESS_KEY="planted")],
    "gcs-s3-hmac": [secret("registry-gcs-hmac", AWS_ACCESS_KEY_ID="GOOG1E", AWS_SECRET_ACCESS_KEY="planted")],
}

# Our own Registries for the modes the examples leave out.
OWN = {
    "cosi-claim-with-access-class": {
        "metadata": {"name": "mixed"},
        "spec": {"replicas": 3, "config": {"storage": {"objectStorage": {
            "bucketClaim": "mixed-bucket", "bucketAccessClass": "s3-key-access"}}}},
        "seed": bucket("mixed-bucket", "unused-access", "unused-credentials"),
    },
    "filesystem-class-r3-capped": {
        "metadata": {"name": "capped"},
        "spec": {"replicas": 3, "config": {"storage": {"filesystem": {"storageClass": "standard"}}}},
        "seed": [],
    },
}


def base(name: str, *, http_secret: bool = True) -> set[tuple[str, str]]:
    objs = {("ServiceAccount", f"{name}-agent"), ("Role", f"{name}-agent"), ("RoleBinding", f"{name}-agent"),
            ("Service", name), ("Service", f"{name}-metrics"), ("Deployment", name), ("Lease", f"{name}-reload"),
            ("Lease", f"{name}-gc")}
    return objs | ({("Secret", f"{name}-http-secret")} if http_secret else set())


EXPECTED = {
    "inmemory": base("scratch"),
    "filesystem-pvc": base("team-registry"),
    "filesystem-storageclass": base("ci-cache") | {("PersistentVolumeClaim", "ci-cache-data")},
    "cosi-classes": base("shared-registry") | {("BucketClaim", "shared-registry-bucket"),
                                               ("BucketAccess", "shared-registry-bucket-access"),
                                               ("PodDisruptionBudget", "shared-registry")},
    "cosi-existing": base("archive-registry"),
    "full": base("registry", http_secret=False),
    "monitored": base("monitored") | {("PersistentVolumeClaim", "monitored-data")},
    "cosi-claim-with-access-class": base("mixed") | {("BucketAccess", "mixed-bucket-access"),
                                                     ("PodDisruptionBudget", "mixed")},
    "filesystem-class-r3-capped": base("capped") | {("PersistentVolumeClaim", "capped-data")},
    "azure-shared-key": base("azure-registry", http_secret=False) | {("PodDisruptionBudget", "azure-registry")},
    "gcs-key": base("gcs-registry", http_secret=False) | {("PodDisruptionBudget", "gcs-registry")},
    "workload-identity-eks": base("registry-eks") | {("PersistentVolumeClaim", "registry-eks-data")},
    "workload-identity-gke": base("registry-gke") | {("PodDisruptionBudget", "registry-gke")},
    "workload-identity-aks": base("registry-aks") | {("PodDisruptionBudget", "registry-aks")},
    "s3-secret": base("registry-s3") | {("PodDisruptionBudget", "registry-s3")},
    "s3-irsa-eks": base("registry-s3-irsa"),
    "gcs-s3-hmac": base("registry-gcs-hmac"),
}


def cases() -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    found = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        reg = yaml.safe_load(path.read_text())
        found[path.stem] = (reg, SEEDS.get(path.stem, []))
    for case, own in OWN.items():
        reg = {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": own["metadata"],
               "spec": own["spec"]}
        found[case] = (reg, own["seed"])
    return found


CASES = cases()


def test_every_example_has_an_expectation():
    assert set(CASES) == set(EXPECTED), "add the new example's objects to EXPECTED"


def seed(api, namespace: str, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        obj = copy.deepcopy(obj)
        if obj["kind"] not in ("StorageClass", "BucketClass", "BucketAccessClass"):
            obj["metadata"]["namespace"] = namespace
        status = obj.pop("status", None)
        created = api.create(obj)
        if status is not None:  # a create drops status (the status subresource): play the controller
            plural = {"PersistentVolumeClaim": "v1/persistentvolumeclaims",
                      "BucketClaim": f"{COSI}/bucketclaims", "BucketAccess": f"{COSI}/bucketaccesses"}
            api.patch(plural[obj["kind"]], namespace, created["metadata"]["name"], {"status": status},
                      subresource="status")


@pytest.fixture(scope="module")
def all_cases():
    """One API server and one operator for every case (each in its own namespace): lean on CPU."""
    from support.clusters.kube import KubeApi, install_cosi_crds

    with KubeApi() as api:
        install_cosi_crds(api)  # the COSI examples' kinds (a bare server has none)
        seed(api, "", CLASSES)
        regs = {}
        for case, (reg, objects) in CASES.items():
            seed(api, case, objects)
            reg = copy.deepcopy(reg)
            reg["metadata"]["namespace"] = case
            regs[case] = api.create(reg)
        harness = OperatorHarness(api, sorted(CASES)).start()
        try:
            for case, reg in regs.items():
                harness.wait_reconciled(case, reg["metadata"]["name"])
            yield api, harness, regs
        finally:
            harness.stop()


RETAINED_KINDS = {"PersistentVolumeClaim", "BucketClaim", "BucketAccess"}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_registry_creates_exactly_the_expected_objects(all_cases, case):
    api, harness, regs = all_cases
    reg = regs[case]
    owned = harness.owned(case, reg["metadata"]["uid"])
    # What holds data is made under the default deletion policy, Retain: not owned, labelled and annotated.
    assert set(owned) == {(kind, name) for kind, name in EXPECTED[case] if kind not in RETAINED_KINDS}
    for kind, name in EXPECTED[case]:
        if kind in RETAINED_KINDS:
            meta = api.get(OWNED_PATHS[kind], case, name)["metadata"]
            assert "ownerReferences" not in meta, meta
            assert meta["annotations"]["berth.dev/deletion-policy"] == "Retain"
            assert meta["labels"]["app.kubernetes.io/instance"] == reg["metadata"]["name"]
    for obj in owned.values():
        refs = obj["metadata"]["ownerReferences"]
        assert refs == [{"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "name": reg["metadata"]["name"],
                         "uid": reg["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    # Nothing else was created in the namespace (besides what the test seeded, and Events).
    seeded = {(o["kind"], o["metadata"]["name"]) for o in CASES[case][1]}
    for kind, path in OWNED_PATHS.items():
        names = {(kind, o["metadata"]["name"]) for o in api.list(path, case)}
        assert names <= EXPECTED[case] | seeded, f"unexpected {kind} in {case}"
    # Created events name every object, once: one Event for the reconcile that created them all
    # (`Created ServiceAccount x, Role x, ...`), not one per object.
    def created_objects() -> list[tuple[str, ...]] | None:
        listed = [tuple(obj.split(" ", 1)) for e in harness.events(case) if e["reason"] == "Created"
                  for obj in e["message"].removeprefix("Created ").split(", ")]
        return listed if len(listed) >= len(EXPECTED[case]) else None

    created = wait_for(created_objects, "Created events")
    assert sorted(created) == sorted(EXPECTED[case])


def test_status_of_examples(all_cases):
    _, harness, regs = all_cases
    scratch = harness.registry("inmemory", "scratch")["status"]
    assert scratch["url"] == "http://scratch.inmemory.svc:5000"
    assert scratch["selector"] == "app.kubernetes.io/instance=scratch,app.kubernetes.io/name=registry"
    assert scratch["storage"] == "inmemory"
    assert scratch["replicas"] == 0 and scratch["readyReplicas"] == 0
    # No pods yet: Progressing because of them, nothing degraded.
    conds = {c["type"]: c for c in scratch["conditions"]}
    assert (conds["Progressing"]["status"], conds["Progressing"]["reason"]) == ("True", "WaitingForPods")
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == ("False", "AsExpected")
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "WaitingForPods")
    # The class-made claim is not bound yet.
    fs = {c["type"]: c for c in harness.registry("filesystem-storageclass", "ci-cache")["status"]["conditions"]}
    assert (fs["Progressing"]["status"], fs["Progressing"]["reason"]) == ("True", "WaitingForPVC")
    # Existing storage, bound and granted: only the pods are awaited.
    for case in ("filesystem-pvc", "cosi-existing", "full"):
        name = CASES[case][0]["metadata"]["name"]
        progressing = {c["type"]: c for c in harness.registry(case, name)["status"]["conditions"]}["Progressing"]
        assert progressing["reason"] == "WaitingForPods", (case, progressing)
    capped = {c["type"]: c for c in harness.registry("filesystem-class-r3-capped", "capped")["status"]["conditions"]}
    assert (capped["Degraded"]["status"], capped["Degraded"]["reason"]) == ("True", "ReplicasCapped")
    assert "spec.replicas" in capped["Degraded"]["message"]
    deployment = harness.api.get("apps/v1/deployments", "filesystem-class-r3-capped", "capped")
    assert deployment["spec"]["replicas"] == 1


def test_generated_http_secret_is_random_and_long(all_cases):
    api, _, _ = all_cases
    values = set()
    for case, name in (("inmemory", "scratch"), ("cosi-classes", "shared-registry")):
        data = api.get("v1/secrets", case, f"{name}-http-secret")
        raw = data.get("data", {}).get("secret")
        value = base64.b64decode(raw).decode() if raw else data["stringData"]["secret"]
        assert len(value) >= 43  # secrets.token_urlsafe(32)
        values.add(value)
    assert len(values) == 2


def test_a_terminating_pods_record_is_kept_but_not_counted(kube_api):
    """Scale-down: the pod being deleted still has an older record; it is not a wanted pod, so Ready does not
    wait for it, and its record stays until the pod is gone (then it is pruned)."""
    from berth_api import Registry
    from berth_operator.builders import deployment as deployment_builder
    from berth_operator.builders.meta import REGISTRY_COMPONENT
    from berth_operator.builders.meta import labels as labels_of
    from support.clusters.operator_harness import REGISTRIES_PATH

    body = kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                            "metadata": {"name": "tidy", "namespace": "default"},
                            "spec": {"config": {"storage": {"inmemory": {}}}}})
    reg = Registry.model_validate(body)
    labels = labels_of(reg, REGISTRY_COMPONENT)  # the pod template's, as its ReplicaSet makes them
    for pod, terminating in (("tidy-a", False), ("tidy-b", True)):
        meta = {"name": pod, "namespace": "default", "labels": labels}
        if terminating:
            meta["finalizers"] = ["test/keep"]  # so the delete below leaves it terminating
        kube_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}})
    kube_api.delete("v1/pods", "default", "tidy-b")
    harness = OperatorHarness(kube_api, ["default"]).start()
    try:
        reg = harness.wait_reconciled("default", "tidy")
        gen = reg["metadata"]["generation"]
        deployment = kube_api.get("apps/v1/deployments", "default",
                                  deployment_builder.name(Registry.model_validate(reg)))
        kube_api.patch("apps/v1/deployments", "default", deployment["metadata"]["name"],
                       {"status": {"observedGeneration": deployment["metadata"]["generation"], "replicas": 1,
                                   "readyReplicas": 1, "updatedReplicas": 1}}, subresource="status")
        kube_api.patch(REGISTRIES_PATH, "default", "tidy", {"status": {"agents": {
            "tidy-a": {"observedGeneration": gen, "configHash": "h"},
            "tidy-b": {"observedGeneration": gen - 1, "configHash": "g"}}}}, subresource="status")
        ready = wait_for(lambda: (harness.condition("default", "tidy", "Ready") or {}).get("status") == "True",
                         "Ready with the terminating pod's older record not counted")
        assert ready
        assert "tidy-b" in (harness.registry("default", "tidy")["status"].get("agents") or {})
    finally:
        harness.stop()
