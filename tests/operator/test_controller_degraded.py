"""Invalid, unsatisfiable and not-yet-satisfied Registries: clear conditions and Events, never a retry loop."""

from __future__ import annotations

import base64
import time
from typing import Any

from support.clusters.operator_harness import REGISTRIES_PATH, wait_for

NS = "degraded"


def registry(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


def condition(harness, name: str, ctype: str) -> tuple[str, str, str]:
    cond = harness.condition(NS, name, ctype) or {}
    return cond.get("status"), cond.get("reason"), cond.get("message", "")


def warning_events(harness, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in harness.events(NS, name) if e["type"] == "Warning" and e["reason"] == reason]


def test_invalid_spec_is_degraded_with_the_field_named_and_not_retried(operator_harness, kube_api):
    harness = operator_harness([NS])
    # Two backends (the API server's CEL rule would refuse it; kmock does not validate, so the operator must).
    kube_api.create(registry("twice", {"config": {"storage": {"inmemory": {}, "filesystem": {"storageClass": "s"}}},
                                       "replicas": -1}))
    harness.wait_reconciled(NS, "twice")
    status, reason, message = condition(harness, "twice", "Degraded")
    assert (status, reason) == ("True", "InvalidSpec")
    assert "spec.replicas" in message and "spec.config.storage" in message
    assert condition(harness, "twice", "Ready")[:2] == ("False", "InvalidSpec")
    events = wait_for(lambda: warning_events(harness, "twice", "InvalidSpec"), "the InvalidSpec event")
    assert "spec.replicas" in events[0]["message"]
    # Nothing was created for it.
    assert harness.owned(NS, kube_api.get(REGISTRIES_PATH, NS, "twice")["metadata"]["uid"]) == {}

    # No retry loop: kopf recorded the spec as handled (no progress/backoff annotation left behind), and a
    # while later the handler has still run just once (a retry would come within kopf's backoff).
    reg = kube_api.get(REGISTRIES_PATH, NS, "twice")
    annotations = reg["metadata"].get("annotations") or {}
    assert "berth.dev/last-handled-configuration" in annotations
    assert not [k for k in annotations if k.startswith("berth.dev/") and "reconcile-on-" in k]
    calls = harness.ctx.reconciles
    time.sleep(1.5)
    assert harness.ctx.reconciles == calls == 1
    assert len(warning_events(harness, "twice", "InvalidSpec")) == 1

    # A fix re-triggers the reconcile and clears the condition.
    kube_api.patch(REGISTRIES_PATH, NS, "twice", [
        {"op": "remove", "path": "/spec/config/storage/filesystem"},
        {"op": "replace", "path": "/spec/replicas", "value": 1},
    ], content_type="application/json-patch+json")
    harness.wait_reconciled(NS, "twice")
    assert condition(harness, "twice", "Degraded")[:2] == ("False", "AsExpected")
    assert kube_api.get("apps/v1/deployments", NS, "twice") is not None


def test_registry_without_a_spec_survives(operator_harness, kube_api):
    harness = operator_harness([NS])
    kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                     "metadata": {"name": "empty", "namespace": NS}, "spec": {"bogus": 1}})
    harness.wait_reconciled(NS, "empty")
    status, reason, message = condition(harness, "empty", "Degraded")
    assert (status, reason) == ("True", "InvalidSpec")
    assert "spec.config" in message and "spec.bogus" in message


def test_unsatisfiable_replicas_are_capped_and_reported(operator_harness, kube_api):
    harness = operator_harness([NS])
    kube_api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": "rwo", "namespace": NS},
                     "spec": {"accessModes": ["ReadWriteOnce"]}})
    kube_api.create(registry("many", {"replicas": 3, "config": {"storage": {"filesystem": {
        "persistentVolumeClaim": "rwo"}}}}))
    harness.wait_reconciled(NS, "many")
    status, reason, message = condition(harness, "many", "Degraded")
    assert (status, reason) == ("True", "ReplicasCapped")
    assert "spec.replicas: 3" in message and "ReadWriteOnce" in message
    deployment = kube_api.get("apps/v1/deployments", NS, "many")
    assert deployment["spec"]["replicas"] == 1
    # ReadWriteOnce: a roll surges beside the running pod, on its node (the surge pod is not a replica).
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert kube_api.get("policy/v1/poddisruptionbudgets", NS, "many") is None
    wait_for(lambda: warning_events(harness, "many", "ReplicasCapped"), "the ReplicasCapped event")


def test_missing_secret_then_created(operator_harness, kube_api):
    harness = operator_harness([NS])  # no sweep: the watch by name wakes it (cluster/named.py)
    kube_api.create(registry("auth", {"config": {"storage": {
        "inmemory": {}, "auth": {"htpasswd": {"secret": {"name": "users", "field": "htpasswd"}}}}}}))
    harness.wait_reconciled(NS, "auth")
    status, reason, message = condition(harness, "auth", "Degraded")
    assert (status, reason) == ("True", "MissingSecret")
    assert "Secret users (spec.config.storage.auth.htpasswd.secret)" in message
    assert condition(harness, "auth", "Ready")[:2] == ("False", "MissingSecret")
    wait_for(lambda: warning_events(harness, "auth", "MissingSecret"), "the MissingSecret event")
    # Objects are still applied: the pods start once the Secret exists.
    assert kube_api.get("apps/v1/deployments", NS, "auth") is not None

    # The Secret appears with the wrong key, then with the right one; its watch by name wakes the Registry.
    kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "users", "namespace": NS},
                     "data": {"other": base64.b64encode(b"x").decode()}})
    wait_for(lambda: condition(harness, "auth", "Degraded")[1] == "MissingSecretKey", "MissingSecretKey")
    assert "has no key htpasswd" in condition(harness, "auth", "Degraded")[2]
    # A wake posts Events too (a new Degraded reason: a new Warning).
    wait_for(lambda: warning_events(harness, "auth", "MissingSecretKey"), "the wake's MissingSecretKey event")
    kube_api.patch("v1/secrets", NS, "users", {"data": {"htpasswd": base64.b64encode(b"u:$2y$05$x").decode()}})
    wait_for(lambda: condition(harness, "auth", "Degraded")[0] == "False", "Degraded cleared")


def test_missing_proxy_credentials_secret_and_key(operator_harness, kube_api):
    """The Secret of spec.config.proxy.credentials, and its username and password keys."""
    harness = operator_harness([NS])  # no sweep: the watch by name wakes it (cluster/named.py)
    kube_api.create(registry("mirror", {"config": {"storage": {"inmemory": {}}, "proxy": {
        "remoteURL": "https://registry-1.docker.io", "credentials": {"secretName": "hub"}}}}))
    harness.wait_reconciled(NS, "mirror")
    status, reason, message = condition(harness, "mirror", "Degraded")
    assert (status, reason) == ("True", "MissingSecret")
    assert "Secret hub (spec.config.proxy.credentials.secretName)" in message
    kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hub", "namespace": NS},
                     "type": "kubernetes.io/basic-auth", "data": {"username": base64.b64encode(b"u").decode()}})
    wait_for(lambda: condition(harness, "mirror", "Degraded")[1] == "MissingSecretKey", "MissingSecretKey")
    assert "has no key password" in condition(harness, "mirror", "Degraded")[2]
    kube_api.patch("v1/secrets", NS, "hub", {"data": {"password": base64.b64encode(b"p").decode()}})
    wait_for(lambda: condition(harness, "mirror", "Degraded")[0] == "False", "Degraded cleared")


def test_a_secret_created_while_the_reconcile_that_missed_it_still_runs_wakes_it(operator_harness, kube_api):
    """A reconcile's reads are indexed for the watch by name when it ends. The Secret it found missing, created
    after its status said so but before it ended (its status write's answer held here; a loaded node's
    scheduler in CI), woke nothing: the Registry stayed Degraded until a sweep (none here)."""
    harness = operator_harness([NS])
    kube_api.delay_next(3.0, verb="patch", plural="registries", subresource="status")
    kube_api.create(registry("late", {"config": {"storage": {"inmemory": {}}, "proxy": {
        "remoteURL": "https://registry-1.docker.io", "credentials": {"secretName": "hub-late"}}}}))
    wait_for(lambda: condition(harness, "late", "Degraded")[1] == "MissingSecret", "MissingSecret")
    kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hub-late", "namespace": NS},
                     "type": "kubernetes.io/basic-auth", "data": {"username": base64.b64encode(b"u").decode(),
                                                                   "password": base64.b64encode(b"p").decode()}})
    wait_for(lambda: condition(harness, "late", "Degraded")[0] == "False", "Degraded cleared")
    assert condition(harness, "late", "Degraded")[1] != "MissingSecret"


def test_waiting_for_pvc_then_pods_then_ready(operator_harness, kube_api):
    harness = operator_harness([NS], refresh_interval=0.3)
    kube_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "disk"},
                     "provisioner": "example.com/disk"})
    kube_api.create(registry("fs", {"config": {"storage": {"filesystem": {"storageClass": "disk"}}}}))
    harness.wait_reconciled(NS, "fs")
    assert condition(harness, "fs", "Progressing")[:2] == ("True", "WaitingForPVC")
    assert "fs-data is Pending" in condition(harness, "fs", "Progressing")[2]
    assert condition(harness, "fs", "Ready")[:2] == ("False", "WaitingForPVC")

    kube_api.patch("v1/persistentvolumeclaims", NS, "fs-data", {"status": {"phase": "Bound"}}, subresource="status")
    wait_for(lambda: condition(harness, "fs", "Progressing")[1] == "WaitingForPods", "WaitingForPods")

    # The Deployment controller's part: the pod is ready (a Deployment status change triggers a reconcile).
    generation = kube_api.get("apps/v1/deployments", NS, "fs")["metadata"]["generation"]
    kube_api.patch("apps/v1/deployments", NS, "fs", {"status": {
        "observedGeneration": generation, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}},
        subresource="status")
    wait_for(lambda: condition(harness, "fs", "Ready")[:2] == ("True", "Available"), "Ready")
    reg = kube_api.get(REGISTRIES_PATH, NS, "fs")
    assert reg["status"]["readyReplicas"] == 1 and reg["status"]["replicas"] == 1
    assert condition(harness, "fs", "Progressing")[:2] == ("False", "Available")


def test_deployment_status_change_alone_updates_ready(operator_harness, kube_api):
    """No periodic sweep here: the Deployment event is what refreshes the status."""
    harness = operator_harness([NS])
    kube_api.create(registry("fast", {"config": {"storage": {"inmemory": {}}}}))
    harness.wait_reconciled(NS, "fast")
    generation = kube_api.get("apps/v1/deployments", NS, "fast")["metadata"]["generation"]
    kube_api.patch("apps/v1/deployments", NS, "fast", {"status": {
        "observedGeneration": generation, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}},
        subresource="status")
    wait_for(lambda: condition(harness, "fast", "Ready")[:2] == ("True", "Available"), "Ready")
    assert condition(harness, "fast", "Progressing")[0] == "False", "Ready, yet still Progressing"


def test_waiting_for_bucket_access(cosi_crds, operator_harness, kube_api):
    harness = operator_harness([NS])  # no sweep: the watch by name wakes it (cluster/named.py)
    cosi = "objectstorage.k8s.io/v1alpha1"
    kube_api.create({"apiVersion": cosi, "kind": "BucketClaim", "metadata": {"name": "bc", "namespace": NS},
                     "spec": {"bucketClassName": "x"}})
    kube_api.patch(f"{cosi}/bucketclaims", NS, "bc", {"status": {"bucketReady": True}}, subresource="status")
    kube_api.create({"apiVersion": cosi, "kind": "BucketAccess", "metadata": {"name": "ba", "namespace": NS},
                     "spec": {"bucketClaimName": "bc", "credentialsSecretName": "ba-creds"}})
    kube_api.create(registry("s3", {"config": {"storage": {"objectStorage": {
        "bucketClaim": "bc", "bucketAccess": "ba"}}}}))
    harness.wait_reconciled(NS, "s3")
    assert condition(harness, "s3", "Progressing")[:2] == ("True", "WaitingForBucketAccess")
    assert condition(harness, "s3", "Ready")[:2] == ("False", "WaitingForBucketAccess")
    # The COSI controller grants access, then its sidecar writes the Secret.
    kube_api.patch(f"{cosi}/bucketaccesses", NS, "ba", {"status": {"accessGranted": True}}, subresource="status")
    wait_for(lambda: "does not exist yet" in condition(harness, "s3", "Progressing")[2], "waiting for the Secret")
    kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ba-creds", "namespace": NS},
                     "data": {"BucketInfo": base64.b64encode(b"{}").decode()}})
    wait_for(lambda: condition(harness, "s3", "Progressing")[1] == "WaitingForPods", "WaitingForPods")


def test_missing_existing_bucket_access_is_degraded(cosi_crds, operator_harness, kube_api):
    harness = operator_harness([NS])
    kube_api.create(registry("nob", {"config": {"storage": {"objectStorage": {
        "bucketClaim": "nope", "bucketAccess": "nada"}}}}))
    harness.wait_reconciled(NS, "nob")
    status, reason, message = condition(harness, "nob", "Degraded")
    assert (status, reason) == ("True", "MissingBucketClaim")
    assert "BucketAccess nada" in message and "BucketClaim nope" in message


def test_refused_write_is_degraded_apply_failed_with_an_event(operator_harness, kube_api):
    harness = operator_harness([NS])
    # The Deployment is created by server-side apply (a PATCH).
    kube_api.fail_next(1, status=403, verb="patch", plural="deployments")
    kube_api.create(registry("denied", {"config": {"storage": {"inmemory": {}}}}))
    harness.wait_reconciled(NS, "denied")
    status, reason, message = condition(harness, "denied", "Degraded")
    assert (status, reason) == ("True", "ApplyFailed")
    assert message.startswith("apply Deployment denied: HTTP 403")
    assert condition(harness, "denied", "Ready")[:2] == ("False", "ApplyFailed")
    wait_for(lambda: warning_events(harness, "denied", "ApplyFailed"), "the ApplyFailed event")
    # The next reconcile (an edit here; the sweep otherwise) completes the job.
    kube_api.patch(REGISTRIES_PATH, NS, "denied", {"spec": {"config": {"log": {"level": "warn"}}}})
    harness.wait_reconciled(NS, "denied")
    assert condition(harness, "denied", "Degraded")[:2] == ("False", "AsExpected")
    assert kube_api.get("apps/v1/deployments", NS, "denied") is not None


def test_cluster_wide_operator_sees_every_namespace(operator_harness, kube_api):
    harness = operator_harness(None)  # --all-namespaces
    for namespace in ("team-a", "team-b"):
        kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                         "metadata": {"name": "r", "namespace": namespace},
                         "spec": {"config": {"storage": {"inmemory": {}}}}})
    for namespace in ("team-a", "team-b"):
        harness.wait_reconciled(namespace, "r")
        assert kube_api.get("apps/v1/deployments", namespace, "r") is not None


def test_agent_image_from_env_or_the_operators_own_pod(kube_api, monkeypatch):
    from berth_operator.engine import facts
    from berth_operator.kube.client import Kube

    kube = Kube(_configuration(kube_api))
    try:
        monkeypatch.setenv("BERTH_AGENT_IMAGE", "example.com/berth:env")
        assert facts.agent_image(kube) == "example.com/berth:env"
        monkeypatch.delenv("BERTH_AGENT_IMAGE")
        kube_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "op-1", "namespace": "berth-system"},
                         "spec": {"containers": [{"name": "sidecar", "image": "other"},
                                                 {"name": "operator", "image": "example.com/berth:own"}]}})
        monkeypatch.setenv("POD_NAME", "op-1")
        monkeypatch.setenv("POD_NAMESPACE", "berth-system")
        assert facts.agent_image(kube) == "example.com/berth:own"
        monkeypatch.delenv("POD_NAME")
        try:
            facts.agent_image(kube)
        except RuntimeError as exc:
            assert "BERTH_AGENT_IMAGE" in str(exc)
        else:
            raise AssertionError("no image should be an error")
    finally:
        kube.close()


def _configuration(kube_api):
    import kubernetes.client

    configuration = kubernetes.client.Configuration()
    configuration.host = kube_api.url
    return configuration


def test_valid_then_invalid_keeps_what_runs(operator_harness, kube_api):
    harness = operator_harness([NS])
    kube_api.create(registry("was-ok", {"config": {"storage": {"inmemory": {}}}}))
    harness.wait_reconciled(NS, "was-ok")
    url = kube_api.get(REGISTRIES_PATH, NS, "was-ok")["status"]["url"]
    mark = len(kube_api.requests())
    kube_api.patch(REGISTRIES_PATH, NS, "was-ok", {"spec": {"http": {"addr": ":99999"}}})
    harness.wait_reconciled(NS, "was-ok")
    status, reason, message = condition(harness, "was-ok", "Degraded")
    assert (status, reason) == ("True", "InvalidSpec") and "spec.http.addr" in message
    assert kube_api.get(REGISTRIES_PATH, NS, "was-ok")["status"]["url"] == url
    assert all("/registries/was-ok" in path for _, path in harness.writes_after(mark))


def test_junk_in_status_does_not_break_the_reconcile(operator_harness, kube_api):
    harness = operator_harness([NS])
    kube_api.create(registry("junk", {"config": {"storage": {"inmemory": {}}}}))
    harness.wait_reconciled(NS, "junk")
    kube_api.patch(REGISTRIES_PATH, NS, "junk", {"status": {"conditions": "bad", "agents": ["not", "a", "map"]}},
                   subresource="status")
    kube_api.patch(REGISTRIES_PATH, NS, "junk", {"spec": {"image": "registry:3.0.1"}})
    harness.wait_reconciled(NS, "junk")
    assert condition(harness, "junk", "Degraded")[:2] == ("False", "AsExpected")
    assert "agents" not in kube_api.get(REGISTRIES_PATH, NS, "junk")["status"]


def test_missing_trust_config_map_then_created(operator_harness, kube_api):
    """Token auth trusting a ConfigMap key: a missing ConfigMap, then a missing key, are Degraded naming the
    field (the pod cannot start without the volume), and clear once the key is there."""
    harness = operator_harness([NS])  # no sweep: the watch by name wakes it (cluster/named.py)
    trust = {"configMap": {"name": "issuer-trust", "field": "ca.crt"}}
    kube_api.create(registry("tok", {"config": {"storage": {"inmemory": {}}, "auth": {"token": {
        "realm": "https://issuer.example/token", "service": "registry", "issuer": "issuer",
        "rootCertBundle": trust}}}}))
    harness.wait_reconciled(NS, "tok")
    status, reason, message = condition(harness, "tok", "Degraded")
    assert (status, reason) == ("True", "MissingConfigMap")
    assert "ConfigMap issuer-trust (spec.config.auth.token.rootCertBundle.configMap)" in message
    assert condition(harness, "tok", "Ready")[:2] == ("False", "MissingConfigMap")
    wait_for(lambda: warning_events(harness, "tok", "MissingConfigMap"), "the MissingConfigMap event")

    kube_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "issuer-trust", "namespace": NS},
                     "data": {"other": "x"}})
    wait_for(lambda: condition(harness, "tok", "Degraded")[1] == "MissingConfigMapKey", "MissingConfigMapKey")
    assert "has no key ca.crt" in condition(harness, "tok", "Degraded")[2]
    kube_api.patch("v1/configmaps", NS, "issuer-trust", {"data": {"ca.crt": "-----BEGIN CERTIFICATE-----"}})
    wait_for(lambda: condition(harness, "tok", "Degraded")[0] == "False", "Degraded cleared")
