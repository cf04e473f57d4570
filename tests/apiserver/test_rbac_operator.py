"""deploy/clusterrole.yaml (and deploy/base/leader-election-role.yaml, for the leader Lease in the operator's
namespace) suffice for everything berth-operator does, on the real API server, and grant nothing it does not
need.

`berth-operator -A` runs as a process, as deploy/base/deployment.yaml runs it (leader election on), with a real
token of deploy/'s ServiceAccount bound by deploy/'s ClusterRoleBinding and RoleBinding (read from the files:
remove a rule there and this fails). It goes through the examples, a hot edit of each (which must rewrite
none of the objects as the server stored them: its defaults are not drift), a drift of the owned objects, an
edit, a scale-down, a claim expansion and a delete. The API server's audit log says what it asked and what RBAC
answered: nothing may be refused, every Registry must be reconciled, and every grant it did not use must be
listed below with the reason it is needed. The API server also enforces what the kmock tier could only
compare: a Role the operator creates for an agent may only grant what the operator holds (escalation
prevention), and an owner reference with blockOwnerDeletion needs update on registries/finalizers
(OwnerReferencesPermissionEnforcement is on).
"""

from __future__ import annotations

import secrets
import ssl
import urllib.error
import urllib.request

import pytest
import yaml

from support.clusters.apiserver import REPO, KubeApiServer, forbidden, install_cosi_crds, token_id
from support.clusters.apiserver_identities import (
    OPERATOR_NAMESPACE,
    OPERATOR_USER,
    cluster_role_grants,
    leader_role_grants,
    operator_token,
    start_operator,
)
from support.clusters.operator_harness import reconciled
from support.common.polling import wait_for

COSI = "objectstorage.k8s.io/v1alpha1"
REGISTRIES = "berth.dev/v1alpha1/registries"

# Granted but not asked for in this scenario, and why each is still needed.
UNEXERCISED_GRANTS = {
    ("berth.dev", "registries/finalizers", "update"):
        "owner references set blockOwnerDeletion; OwnerReferencesPermissionEnforcement checks this grant (it is "
        "an authorization check, not a request: without it every owned object's create is refused)",
    ("events.k8s.io", "events", "create"): "the agent Role grants it (escalation prevention)",
    ("events.k8s.io", "events", "patch"): "the agent Role grants it (escalation prevention)",
    ("", "events", "patch"): "the agent Role grants it (escalation prevention)",
    ("", "namespaces", "list"): "kopf watches Namespaces when run with --namespace instead of --all-namespaces",
    ("", "namespaces", "watch"): "kopf watches Namespaces when run with --namespace instead of --all-namespaces",
    ("coordination.k8s.io", "leases", "update"): "the agent Role grants it (escalation prevention)",
    ("", "pods", "get"): "berth-operator reads its own Pod (POD_NAME) at start to learn the agent image",
    ("coordination.k8s.io", "leases", "get"): "the agent Role grants it on the reload and gc Leases (escalation "
                                              "prevention); the operator reads Leases from its watch cache and "
                                              "GETs one only on a cache miss, which a run may not have",
    ("objectstorage.k8s.io", "bucketaccesses", "delete"): "a BucketAccess the operator made is pruned when the "
                                                          "Registry switches to an existing one",
    # A deletionPolicy change patches the claims' owner reference (exercised by test_deletion_policy.py, with the
    # garbage collector); OwnerReferencesPermissionEnforcement admits that only from who may delete the object.
    ("", "persistentvolumeclaims", "delete"): "admits the owner-reference patch of a deletionPolicy change",
    ("objectstorage.k8s.io", "bucketclaims", "patch"): "sets the owner reference when deletionPolicy changes",
    ("objectstorage.k8s.io", "bucketclaims", "delete"): "admits the owner-reference patch of a deletionPolicy change",
    ("objectstorage.k8s.io", "bucketaccesses", "patch"): "sets the owner reference when deletionPolicy changes",
    # spec.monitoring.serviceMonitor: exercised by tests/apiserver/test_monitoring.py, where the
    # prometheus-operator CRDs are installed; this scenario's examples ask for no ServiceMonitor.
    ("monitoring.coreos.com", "servicemonitors", "get"): "applies a Registry's ServiceMonitor (spec.monitoring)",
    ("monitoring.coreos.com", "servicemonitors", "create"): "applies a Registry's ServiceMonitor (spec.monitoring)",
    ("monitoring.coreos.com", "servicemonitors", "patch"): "applies a Registry's ServiceMonitor (spec.monitoring)",
    ("monitoring.coreos.com", "servicemonitors", "delete"): "prunes it when spec.monitoring is removed",
    ("monitoring.coreos.com", "servicemonitors", "list"): "cached once the CRD is served (not in this scenario)",
    ("monitoring.coreos.com", "servicemonitors", "watch"): "cached once the CRD is served (not in this scenario)",
}
# Server-side apply creates a missing object: the audit log records a patch, and the API server authorizes a
# create besides it (apply.py applies these kinds; only the create-only kinds are POSTed).
APPLY_CREATES = "server-side apply of a missing object is a create: authorized as one, audited as a patch"
# Exposure: exercised by tests/apiserver/test_exposure.py and test_exposure_optional.py (their CRDs installed there);
# this scenario's examples make no Ingress, HTTPRoute or Certificate and replace no Service. All four are cached
# (the prune's look is a cache read), so the Ingress's list and watch are exercised, its get is not; the
# optional kinds are never asked for while not served.
EXPOSURE_GRANTS = "an Ingress, HTTPRoute or Certificate (spec.ingress, spec.gateway, an issuerRef): test_exposure*"
UNEXERCISED_GRANTS.update({(group, resource, verb): EXPOSURE_GRANTS for group, resource, verbs in (
    ("networking.k8s.io", "ingresses", ("get", "create", "patch", "delete")),
    ("gateway.networking.k8s.io", "httproutes", ("get", "list", "watch", "create", "patch", "delete")),
    ("cert-manager.io", "certificates", ("get", "list", "watch", "create", "patch", "delete"))) for verb in verbs})
# spec.networkPolicy, exercised by tests/apiserver/test_network_policy.py; this scenario's examples ask
# for none. Cached, so its list and watch are exercised here.
UNEXERCISED_GRANTS.update({("networking.k8s.io", "networkpolicies", verb): "a Registry's NetworkPolicy "
                           "(spec.networkPolicy): applied, and pruned when the field goes (test_network_policy)"
                           for verb in ("get", "create", "patch", "delete")})
UNEXERCISED_GRANTS[("", "services", "delete")] = ("replaces the Service for another loadBalancerClass "
                                                  "(test_exposure)")
UNEXERCISED_GRANTS.update({(group, resource, "create"): APPLY_CREATES for group, resource in (
    ("apps", "deployments"), ("", "services"), ("", "serviceaccounts"), ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "rolebindings"), ("policy", "poddisruptionbudgets"))})
# A cache miss is applied unforced, with no read first (apply.py): an applied kind is read (GET) only when the
# server refuses that apply because the object exists without Berth's label (another controller's, or made by
# hand), or for the Deployment of an invalid spec when it is not cached; a run may have neither.
READ_ON_REFUSAL = "read only when an unforced apply of a cache miss is refused (the object exists, not Berth's)"
UNEXERCISED_GRANTS.update({(group, resource, "get"): READ_ON_REFUSAL for group, resource in (
    ("apps", "deployments"), ("", "services"), ("", "serviceaccounts"), ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "rolebindings"), ("policy", "poddisruptionbudgets"))})
# The classes a spec names are read from the caches of classes (caches.Caches.of_classes) once those have listed;
# a reconcile does not wait for that list, and GETs a class only before it (test_classes.py counts those reads).
CLASS_BEFORE_LISTED = "a class read before the caches of classes have listed (a reconcile does not wait for them)"
UNEXERCISED_GRANTS.update({(group, resource, "get"): CLASS_BEFORE_LISTED for group, resource in (
    ("storage.k8s.io", "storageclasses"), ("objectstorage.k8s.io", "bucketclasses"),
    ("objectstorage.k8s.io", "bucketaccessclasses"))})

# Kinds the apply layer patches only when the live object drifted from what the builders make.
DRIFTED_KINDS = {
    "ServiceAccount": "v1/serviceaccounts",
    "Role": "rbac.authorization.k8s.io/v1/roles",
    "RoleBinding": "rbac.authorization.k8s.io/v1/rolebindings",
    "Service": "v1/services",
    "PodDisruptionBudget": "policy/v1/poddisruptionbudgets",
}


def example(name: str, namespace: str) -> dict:
    reg = yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text())
    reg["metadata"]["namespace"] = namespace
    return reg


def bind_claim(api: KubeApiServer, namespace: str, name: str) -> None:
    """What the PV controller does once a volume is bound (there is none here)."""
    api.patch("v1/persistentvolumeclaims", namespace, name, {"status": {"phase": "Bound"}}, subresource="status")


def seed(api: KubeApiServer, ns: dict[str, str]) -> None:
    install_cosi_crds(api)  # the COSI example needs them (a bare cluster: tests/apiserver/test_bare_cluster.py)
    for namespace in ns.values():
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    suffix = ns["fs-class"]
    api.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": f"standard-{suffix}"},
                "provisioner": "example.com/none", "allowVolumeExpansion": True})
    api.create({"apiVersion": COSI, "kind": "BucketClass", "metadata": {"name": f"s3-standard-{suffix}"},
                "driverName": "example.com/none", "deletionPolicy": "Delete"})
    api.create({"apiVersion": COSI, "kind": "BucketAccessClass", "metadata": {"name": f"s3-key-access-{suffix}"},
                "driverName": "example.com/none", "authenticationType": "Key"})
    api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "team-registry-data", "namespace": ns["fs-pvc"]},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    bind_claim(api, ns["fs-pvc"], "team-registry-data")


def token_registry(namespace: str) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
            "metadata": {"name": "token-registry", "namespace": namespace},
            "spec": {"config": {"storage": {"inmemory": {}, "auth": {"token": {
                "realm": "https://auth.example.com/token", "service": "registry", "issuer": "auth.example.com",
                "rootCertBundle": {"configMap": {"name": "issuer-trust", "field": "ca.pem"}}}}}}}}


@pytest.fixture(scope="module")
def scenario(kube_apiserver: KubeApiServer, tmp_path_factory) -> dict:
    """{"audit": the audit entries of the operator's token across the scenario, "failure": why the scenario
    stopped short, or None}. A failure is handed to the tests: a refusal in the audit log explains it best."""
    api = kube_apiserver
    suffix = secrets.token_hex(3)
    ns = {key: f"{key}-{suffix}" for key in ("fs-class", "fs-pvc", "cosi", "full", "token")}
    seed(api, ns)
    # The examples name cluster-wide classes: give each its own, so a session-mate's cannot be taken for it.
    fs_class = example("filesystem-storageclass", ns["fs-class"])
    fs_class["spec"]["config"]["storage"]["filesystem"]["storageClass"] += f"-{ns['fs-class']}"
    cosi = example("cosi-classes", ns["cosi"])
    storage = cosi["spec"]["config"]["storage"]["objectStorage"]
    storage["bucketClass"] += f"-{ns['fs-class']}"
    storage["bucketAccessClass"] += f"-{ns['fs-class']}"
    created = {
        ("fs-class", "ci-cache"): api.create(fs_class),
        ("fs-pvc", "team-registry"): api.create(example("filesystem-pvc", ns["fs-pvc"])),
        ("cosi", "shared-registry"): api.create(cosi),
        ("full", "registry"): api.create(example("full", ns["full"])),  # its Secrets are missing: Degraded
        # Token auth trusting a ConfigMap: the agent Role grants configmaps by name (escalation prevention).
        ("token", "token-registry"): api.create(token_registry(ns["token"])),
    }
    # Cluster-wide, as deploy/ runs it; short Lease timings: renewals happen during the scenario.
    operator, token = start_operator(api, "berth-operator-0", tmp_path_factory.mktemp("operator"), None,
                                     duration=3.0, renew_deadline=2.0, retry_period=0.2)
    failure, steady = None, []
    try:
        for key, name in created:
            wait_for(lambda key=key, name=name: reconciled(api, ns[key], name), f"{name} reconciled", 90)
        # Steady state: a hot edit of each (the log level) is a reconcile that must rewrite none of the objects
        # as the server stored them (its defaults and normalised quantities are not drift).
        mark = api.audit_mark()
        for key, name in created:
            api.patch(REGISTRIES, ns[key], name, {"spec": {"config": {"log": {"level": "warn"}}}})
        for key, name in created:
            wait_for(lambda key=key, name=name: (reg := reconciled(api, ns[key], name))
                     and reg["status"]["observedGeneration"] == 2, f"{name} reconciled at generation 2", 60)
        # Its writes in this scenario's namespaces (cluster-wide, it also reconciles the worker's other tests').
        steady = [e for e in api.audit(OPERATOR_USER, since=mark)
                  if (e.get("objectRef") or {}).get("namespace") in ns.values()]
        # Drift: strip the labels of what the COSI registry owns; the next reconcile patches them back.
        uid = created["cosi", "shared-registry"]["metadata"]["uid"]
        drifted = [(kind, obj["metadata"]["name"]) for kind, path in DRIFTED_KINDS.items()
                   for obj in api.list(path, ns["cosi"])
                   if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ())]
        assert {kind for kind, _ in drifted} == set(DRIFTED_KINDS)
        for kind, name in drifted:
            api.patch(DRIFTED_KINDS[kind], ns["cosi"], name, {"metadata": {"labels": None}})
        api.patch(REGISTRIES, ns["cosi"], "shared-registry", {"spec": {"config": {"log": {"level": "debug"}}}})
        wait_for(lambda: reconciled(api, ns["cosi"], "shared-registry"), "shared-registry reconciled", 60)
        for kind, name in drifted:
            wait_for(lambda kind=kind, name=name: api.get(DRIFTED_KINDS[kind], ns["cosi"], name)["metadata"].get(
                "labels"), f"{kind} {name} labels restored", 60)
        # Scale the COSI registry down: its PodDisruptionBudget is pruned.
        assert api.get("policy/v1/poddisruptionbudgets", ns["cosi"], "shared-registry") is not None
        api.patch(REGISTRIES, ns["cosi"], "shared-registry", {"spec": {"replicas": 1}})
        wait_for(lambda: api.get("policy/v1/poddisruptionbudgets", ns["cosi"], "shared-registry") is None,
                 "PodDisruptionBudget pruned", 60)
        # An image edit patches the Deployment; a larger size grows the claim (once bound: the API server
        # refuses to resize a pending claim); a delete goes through kopf's finalizer.
        api.patch(REGISTRIES, ns["fs-class"], "ci-cache", {"spec": {"image": "registry:3.0.0"}})
        wait_for(lambda: reconciled(api, ns["fs-class"], "ci-cache"), "ci-cache reconciled", 60)
        bind_claim(api, ns["fs-class"], "ci-cache-data")
        api.patch(REGISTRIES, ns["fs-class"], "ci-cache",
                  {"spec": {"config": {"storage": {"filesystem": {"size": "60Gi"}}}}})
        wait_for(lambda: api.get("v1/persistentvolumeclaims", ns["fs-class"], "ci-cache-data")["spec"]["resources"]
                 ["requests"]["storage"] == "60Gi", "the claim to grow", 60)
        api.delete(REGISTRIES, ns["fs-pvc"], "team-registry")
        wait_for(lambda: api.get(REGISTRIES, ns["fs-pvc"], "team-registry") is None, "Registry deleted", 60)
    except AssertionError as error:
        failure = str(error)
    finally:
        code = operator.stop()
    log = operator.log()
    if failure is None and (code != 0 or "Traceback" in log):
        failure = f"berth-operator exited {code}:\n{log[-3000:]}"
    mine = token_id(token)
    audit = [entry for entry in api.audit(OPERATOR_USER)
             if (entry["user"].get("extra") or {}).get("authentication.kubernetes.io/credential-id") == [mine]]
    return {"audit": audit, "failure": failure, "steady": steady}


@pytest.fixture(scope="module")
def audit(scenario: dict) -> list[dict]:
    return scenario["audit"]


def triple(entry: dict) -> tuple[str, str, str] | None:
    ref = entry.get("objectRef")
    if not ref or "resource" not in ref:
        return None  # /api, /apis, /version: discovery, open to every authenticated user
    resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return ref.get("apiGroup", ""), resource, entry["verb"]


def is_leader_lease(entry: dict) -> bool:
    """The operator's own Lease (deploy/base/leader-election-role.yaml grants it, in its namespace); the Registries'
    reload Leases, in their namespaces, are the ClusterRole's."""
    ref = entry.get("objectRef") or {}
    return ref.get("namespace") == OPERATOR_NAMESPACE and ref.get("resource") == "leases"


def test_nothing_the_operator_asked_was_refused(scenario: dict) -> None:
    audit = scenario["audit"]
    assert audit, "the audit log has nothing of the operator's token"
    refused = sorted({(e["verb"], e["requestURI"].split("?")[0]) for e in audit if forbidden(e)})
    assert refused == [], "RBAC refused the operator"
    assert scenario["failure"] is None, scenario["failure"]


def test_a_hot_edit_rewrites_nothing_the_server_stored(scenario: dict) -> None:
    assert scenario["steady"], "no requests recorded for the hot edits"
    writes = sorted({(e["verb"], e["objectRef"]["resource"], e["objectRef"]["namespace"],
                      e["objectRef"].get("name", ""))
                     for e in scenario["steady"] if e["verb"] in ("create", "update", "patch", "delete")
                     and e["objectRef"].get("resource") not in ("registries", "events") and not is_leader_lease(e)})
    assert writes == [], "the operator rewrote objects it had made, with nothing changed but a hot field"


def test_every_request_is_allowed_by_the_cluster_role(audit: list[dict]) -> None:
    exercised = {t for e in audit if (t := triple(e)) and not is_leader_lease(e)}
    assert exercised - cluster_role_grants() == set(), "the operator makes requests deploy/clusterrole.yaml forbids"


def test_every_grant_is_used_or_justified(audit: list[dict]) -> None:
    exercised = {t for e in audit if (t := triple(e)) and not is_leader_lease(e)}
    unused = cluster_role_grants() - exercised
    assert unused - set(UNEXERCISED_GRANTS) == set(), "grants nothing uses: drop them or say why in UNEXERCISED_GRANTS"
    assert set(UNEXERCISED_GRANTS) <= cluster_role_grants(), "UNEXERCISED_GRANTS names something not granted"


def test_the_leader_lease_requests_match_the_namespaced_role(audit: list[dict]) -> None:
    lease = {t for e in audit if (t := triple(e)) and is_leader_lease(e)}
    assert lease, "the scenario elected no leader"
    assert lease == leader_role_grants()



def test_the_leader_lease_requests_have_the_leader_election_priority(kube_apiserver: KubeApiServer) -> None:
    """deploy/base/flowschema.yaml: API Priority and Fairness puts the leader's Lease requests at `leader-election`, not
    in the operator's own flow behind its reconciles (the API server names the schema and level in each answer)."""
    api, token = kube_apiserver, operator_token(kube_apiserver)
    schema = api.get("flowcontrol.apiserver.k8s.io/v1/flowschemas", None, "berth-operator-leader-election")
    level = api.get("flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations", None, "leader-election")
    assert schema is not None and level is not None
    dangling = [c for c in (schema.get("status") or {}).get("conditions") or () if c["type"] == "Dangling"]
    assert all(c["status"] == "False" for c in dangling), dangling

    def classified(path: str) -> tuple[str, str]:
        request = urllib.request.Request(api.url + path, headers={"Authorization": f"Bearer {token}"})
        context = ssl.create_default_context(cafile=str(api.ca_file))
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as answer:
                headers = answer.headers
        except urllib.error.HTTPError as error:  # a missing Lease: classified all the same
            headers = error.headers
        return headers["X-Kubernetes-PF-FlowSchema-UID"], headers["X-Kubernetes-PF-PriorityLevel-UID"]

    lease = classified(f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/berth-operator")
    assert lease == (schema["metadata"]["uid"], level["metadata"]["uid"])
    other = classified("/apis/berth.dev/v1alpha1/registries")  # a reconcile's read keeps the operator's own level
    assert other[1] != level["metadata"]["uid"]
