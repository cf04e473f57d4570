"""A bare cluster: a real kube-apiserver with only deploy/ applied (Berth's CRD, its namespace and RBAC),
no COSI, no prometheus-operator. berth-operator runs as deploy/ runs it (`--all-namespaces`, leader election, a
token of its ServiceAccount).

- Every example that needs no optional API gets its Deployment and a written status (examples/inmemory.yaml and
  examples/filesystem-pvc.yaml within 10 s of their creation), and is not Degraded for a missing API.
- The examples that need one are Degraded, the message naming the kinds, their apiVersion and what to install:
  MissingCOSI for object storage, MissingMonitoringCRD for spec.monitoring.serviceMonitor.
- Then the COSI CRDs are installed: within 10 s the COSI examples move on (MissingCOSI gone; the storage they
  name is looked up). The user then makes the BucketClaim and BucketAccess cosi-existing.yaml names: within 10 s
  of them existing it is WaitingForBucket or further (their watch by name wakes it, not the 60 s sweep). Then
  prometheus-operator's CRDs: the ServiceMonitor is created. Same operator process
  throughout, and nothing it asked was refused.

The server is this module's own (the worker's shared one gets CRDs installed by other tests).
"""

from __future__ import annotations

import pathlib
import time

import pytest
import yaml

from berth_operator.core.kinds import COSI
from support.clusters.apiserver import KubeApiServer, install_cosi_crds, install_monitoring_crds
from support.clusters.apiserver_identities import operator_on_own_server, refused_requests
from support.clusters.operator_harness import reconciled
from support.common.polling import wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
REGISTRIES = "berth.dev/v1alpha1/registries"
NEEDS_COSI = {"cosi-classes", "cosi-existing", "full"}
NEEDS_MONITORING = {"monitored"}
BOUND = 10.0  # seconds: the bound for each Registry's answer on a bare cluster
COSI_MESSAGE = "BucketClaim, BucketAccess"  # and the classes a spec names, then:
COSI_MISSING = "(objectstorage.k8s.io/v1alpha1) are not served by this cluster: install the COSI CRDs and controller"
MONITORING_MESSAGE = "ServiceMonitor (monitoring.coreos.com/v1) is not served by this cluster: install " \
                     "prometheus-operator or its CRDs"
# After the COSI CRDs: the API is used (the bucket named in the spec is looked up, or the claim waited for).
COSI_PROGRESS = {"WaitingForBucket", "WaitingForBucketAccess", "MissingBucketClaim", "MissingBucketAccess",
                 "MissingBucketClass", "MissingBucketAccessClass"}
# Once the storage it names exists: the bucket is waited for, or more (no COSI controller here makes it ready).
COSI_FURTHER = {"WaitingForBucket", "WaitingForBucketAccess", "WaitingForPods", "Available"}
COSI_MISSING_REASONS = {"MissingCOSI", "MissingBucketClaim", "MissingBucketAccess"}


def examples() -> dict[str, list[dict]]:
    """Each example file's objects, by a short name (the file's stem, or its directory for a multi-file one)."""
    found: dict[str, list[dict]] = {}
    for path in sorted((REPO / "examples").rglob("*.yaml")):
        key = path.stem if path.parent.name == "examples" else path.parent.name
        found.setdefault(key, []).extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def conditions(api: KubeApiServer, namespace: str, name: str) -> dict[str, dict]:
    reg = api.get(REGISTRIES, namespace, name) or {}
    return {c["type"]: c for c in (reg.get("status") or {}).get("conditions") or ()}


def reasons(api: KubeApiServer, namespace: str, name: str) -> set[str]:
    return {c["reason"] for c in conditions(api, namespace, name).values()}


def messages(api: KubeApiServer, namespace: str, name: str) -> str:
    return " ".join(c.get("message") or "" for c in conditions(api, namespace, name).values())


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    with operator_on_own_server(tmp_path_factory.mktemp("bare"), None) as running:
        yield running


def create_example(api: KubeApiServer, key: str, docs: list[dict]) -> tuple[str, str]:
    """Create an example in a namespace of its own, with the claim it names and the Secret monitored.yaml's comment
    asks for (the Secrets of full.yaml are left missing: another condition, which comes first)."""
    namespace = f"ex-{key}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    if key == "monitored":  # the Secret its comment tells the user to create
        api.create({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "registry-hooks", "namespace": namespace},
                    "stringData": {"token": "Bearer not-a-real-token"}})
    name = ""
    for doc in docs:
        doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
        if doc["kind"] == "Registry":
            name = doc["metadata"]["name"]
            claim = ((doc["spec"]["config"]["storage"].get("filesystem") or {}).get("persistentVolumeClaim"))
            if claim:
                api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                            "metadata": {"name": claim, "namespace": namespace},
                            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        api.create(doc)
    return namespace, name


def test_a_bare_cluster_serves_what_needs_nothing_and_names_what_is_missing(bare):
    api, operator, token = bare
    api.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
                "provisioner": "example.com/none", "allowVolumeExpansion": True})
    made: dict[str, tuple[str, str]] = {}
    for key, docs in examples().items():
        created = time.monotonic()
        made[key] = namespace, name = create_example(api, key, docs)
        if key in ("inmemory", "filesystem-pvc"):
            wait_for(lambda namespace=namespace, name=name: api.get("apps/v1/deployments", namespace, name),
                     f"the Deployment of {key}", 60)
            took = time.monotonic() - created
            assert took < BOUND, f"{key}: its Deployment came {took:.1f} s after the Registry"

    for key, (namespace, name) in made.items():
        try:
            wait_for(lambda namespace=namespace, name=name: reconciled(api, namespace, name), f"{key} reconciled", 60)
        except AssertionError:
            raise AssertionError(f"{key}: {api.get(REGISTRIES, namespace, name).get('status')}\n"
                                 f"{operator.log()[-3000:]}") from None
        found, text = reasons(api, namespace, name), messages(api, namespace, name)
        if key in NEEDS_COSI:
            assert COSI_MESSAGE in text and COSI_MISSING in text, (key, text)
            if key != "full":  # full.yaml also lacks its Secrets, which come first
                assert conditions(api, namespace, name)["Degraded"]["reason"] == "MissingCOSI", (key, found)
        elif key in NEEDS_MONITORING:
            assert MONITORING_MESSAGE in text, (key, text)
            assert "MissingMonitoringCRD" in found, (key, found)
        else:
            assert not {"MissingCOSI", "MissingMonitoringCRD"} & found, (key, text)
            assert "not served" not in text, (key, text)
        if key not in ("cosi-existing", "full"):  # these wait for a named BucketAccess's Secret name first
            assert api.get("apps/v1/deployments", namespace, name), f"{key}: no Deployment"

    # COSI arrives: the COSI examples move on within seconds, with the same process.
    install_cosi_crds(api)
    installed = time.monotonic()
    for key in ("cosi-existing", "cosi-classes"):
        namespace, name = made[key]
        wait_for(lambda namespace=namespace, name=name: "MissingCOSI" not in reasons(api, namespace, name)
                 and COSI_PROGRESS & reasons(api, namespace, name), f"{key} past MissingCOSI", 60)
        took = time.monotonic() - installed
        assert took < BOUND, f"{key}: {took:.1f} s after the COSI CRDs"
    # The user makes what cosi-existing.yaml names, as its comment says exists.
    namespace, name = made["cosi-existing"]
    storage = examples()["cosi-existing"][0]["spec"]["config"]["storage"]["objectStorage"]
    api.create({"apiVersion": COSI, "kind": "BucketClaim",
                "metadata": {"name": storage["bucketClaim"], "namespace": namespace},
                "spec": {"bucketClassName": "archive", "protocols": ["s3"]}})
    api.create({"apiVersion": COSI, "kind": "BucketAccess",
                "metadata": {"name": storage["bucketAccess"], "namespace": namespace},
                "spec": {"bucketClaimName": storage["bucketClaim"], "bucketAccessClassName": "archive",
                         "credentialsSecretName": "archive-bucket-creds", "protocol": "s3"}})
    made_storage = time.monotonic()
    wait_for(lambda: COSI_FURTHER & reasons(api, namespace, name)
             and not COSI_MISSING_REASONS & reasons(api, namespace, name), "cosi-existing WaitingForBucket", 60)
    took = time.monotonic() - made_storage
    assert took < BOUND, f"cosi-existing: {took:.1f} s after its BucketClaim and BucketAccess"

    namespace, name = made["cosi-classes"]
    try:
        claim = wait_for(lambda: api.get(f"{COSI}/bucketclaims", namespace, f"{name}-bucket"), "the BucketClaim", 30)
    except AssertionError:
        status = api.get(REGISTRIES, namespace, name).get("status")
        raise AssertionError(f"{status}\n{operator.log()[-5000:]}") from None
    assert claim["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth"

    # prometheus-operator arrives: the ServiceMonitor is made, MissingMonitoringCRD goes.
    install_monitoring_crds(api)
    installed = time.monotonic()
    namespace, name = made["monitored"]
    wait_for(lambda: api.get("monitoring.coreos.com/v1/servicemonitors", namespace, name), "the ServiceMonitor", 60)
    wait_for(lambda: "MissingMonitoringCRD" not in reasons(api, namespace, name), "MissingMonitoringCRD gone", 30)
    took = time.monotonic() - installed
    assert took < BOUND, f"monitored: {took:.1f} s after the prometheus-operator CRDs"

    refused = [(e["verb"], e["requestURI"]) for e in refused_requests(api, token)]
    assert refused == []
    assert "HTTP 404" not in operator.log(), "a kind the cluster does not serve was asked for"
