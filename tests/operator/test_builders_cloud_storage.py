"""spec.config.storage.azure and .gcs in the pod: the credentials' Secret is mounted whole as the azure
or gcs volume in the agent only (the agent writes what the registry reads), watched over the API
(--api-secret azure=NAME) and granted by name in the agent's Role; default credentials mount nothing. Two
replicas share the container or bucket (nothing caps them, as for S3)."""

from __future__ import annotations

import pytest

from berth_operator.builders import build_all

AZURE = {"accountName": "berthdata", "container": "registry",
         "credentials": {"type": "shared_key", "secret": {"name": "azure-key", "field": "accountKey"}}}
GCS = {"bucket": "berth-registry", "credentials": {"type": "key", "secret": {"name": "gcs-key", "field": "key.json"}}}


def _objects(registry_factory, facts_factory, storage, replicas=2):
    reg = registry_factory({"replicas": replicas, "config": {"storage": storage}})
    return {(o["kind"], o["metadata"]["name"]): o for o in build_all(reg, facts_factory(), http_secret_value=None)}


@pytest.mark.parametrize(("backend", "body", "volume", "secret"),
                         [("azure", AZURE, "azure", "azure-key"), ("gcs", GCS, "gcs", "gcs-key")])
def test_the_credentials_secret_is_mounted_in_the_agent_watched_and_granted(registry_factory, facts_factory,
                                                                             backend, body, volume, secret):
    objects = _objects(registry_factory, facts_factory, {backend: body})
    deployment = objects["Deployment", "demo"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    agent, registry = pod["initContainers"][0], pod["containers"][0]
    assert {"name": volume, "secret": {"secretName": secret, "defaultMode": 0o440}} in pod["volumes"]
    assert {"name": volume, "mountPath": f"/var/run/berth/{volume}", "readOnly": True} in agent["volumeMounts"]
    assert all(m["name"] != volume for m in registry["volumeMounts"])
    args = agent["args"]
    assert f"{volume}={secret}" in [args[i + 1] for i, a in enumerate(args) if a == "--api-secret"]
    [secret_rule] = [r for r in objects["Role", "demo-agent"]["rules"] if "secrets" in r["resources"]]
    assert secret in secret_rule["resourceNames"]
    assert not any(kind == "PersistentVolumeClaim" for kind, _ in objects)


@pytest.mark.parametrize(("backend", "body"), [
    ("azure", {**AZURE, "credentials": {"type": "default_credentials"}}),
    ("gcs", {**GCS, "credentials": {"type": "default_credentials"}})])
def test_default_credentials_mount_nothing(registry_factory, facts_factory, backend, body):
    pod = _objects(registry_factory, facts_factory, {backend: body})["Deployment", "demo"]["spec"]["template"]["spec"]
    assert all(v["name"] not in ("azure", "gcs") for v in pod["volumes"])


@pytest.mark.parametrize(("backend", "body", "secret", "present", "reason"), [
    ("azure", AZURE, "azure-key", None, "MissingSecret"),
    ("azure", AZURE, "azure-key", {"otherKey": "eA=="}, "MissingSecretKey"),
    ("gcs", GCS, "gcs-key", {"other.json": "e30="}, "MissingSecretKey"),
])
def test_a_missing_secret_or_key_is_reported(operator_harness, kube_api, backend, body, secret, present, reason):
    harness = operator_harness(["cloud-ns"])
    if present is not None:
        kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": "cloud-ns"},
                         "data": present})
    kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                     "metadata": {"name": "c", "namespace": "cloud-ns"},
                     "spec": {"config": {"storage": {backend: body}}}})
    harness.wait_reconciled("cloud-ns", "c")
    degraded = harness.condition("cloud-ns", "c", "Degraded")
    assert degraded["reason"] == reason
    assert f"spec.config.storage.{backend}.credentials.secret" in degraded["message"]
