"""spec.config.notifications in the pod: the headers' Secret is mounted whole as the notifications volume
in the agent only, watched over the API (--api-secret notifications=NAME) and granted by name in the agent's Role;
no Secret, no volume. The operator reports a missing Secret or key like every other."""

from __future__ import annotations

from berth_operator.builders import build_all

HOOKS = {"secretName": "hooks", "endpoints": [{"name": "scan", "url": "https://hooks.example.com/e",
                                                "headers": [{"name": "Authorization", "secretKey": "token"}]}]}


def _objects(registry_factory, facts_factory, notifications):
    reg = registry_factory({"config": {"storage": {"inmemory": {}}, "notifications": notifications}})
    return {(o["kind"], o["metadata"]["name"]): o for o in build_all(reg, facts_factory(), http_secret_value=None)}


def test_the_headers_secret_is_mounted_in_the_agent_watched_and_granted(registry_factory, facts_factory):
    objects = _objects(registry_factory, facts_factory, HOOKS)
    pod = objects["Deployment", "demo"]["spec"]["template"]["spec"]
    agent, registry = pod["initContainers"][0], pod["containers"][0]
    assert {"name": "notifications", "secret": {"secretName": "hooks", "defaultMode": 0o440}} in pod["volumes"]
    assert {"name": "notifications", "mountPath": "/var/run/berth/notifications", "readOnly": True} \
        in agent["volumeMounts"]
    assert all(m["name"] != "notifications" for m in registry["volumeMounts"])
    args = agent["args"]
    assert "notifications=hooks" in [args[i + 1] for i, a in enumerate(args) if a == "--api-secret"]
    [secret_rule] = [r for r in objects["Role", "demo-agent"]["rules"] if "secrets" in r["resources"]]
    assert "hooks" in secret_rule["resourceNames"]


def test_plain_headers_need_no_volume(registry_factory, facts_factory):
    plain = {"endpoints": [{"name": "scan", "url": "https://hooks.example.com/e",
                            "headers": [{"name": "X-Team", "value": "a"}]}]}
    pod = _objects(registry_factory, facts_factory, plain)["Deployment", "demo"]["spec"]["template"]["spec"]
    assert all(v["name"] != "notifications" for v in pod["volumes"])


def test_a_missing_key_is_reported(operator_harness, kube_api):
    import base64

    harness = operator_harness(["hooks-ns"])
    kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hooks", "namespace": "hooks-ns"},
                     "data": {"other": base64.b64encode(b"x").decode()}})
    kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                     "metadata": {"name": "n", "namespace": "hooks-ns"},
                     "spec": {"config": {"storage": {"inmemory": {}}, "notifications": HOOKS}}})
    harness.wait_reconciled("hooks-ns", "n")
    degraded = harness.condition("hooks-ns", "n", "Degraded")
    assert degraded["reason"] == "MissingSecretKey"
    assert "spec.config.notifications.secretName" in degraded["message"] and "token" in degraded["message"]
