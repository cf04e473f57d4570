"""Token auth's trust in the pod and the Role: a Secret or a ConfigMap volume per trust source, mounted
whole in the agent only, named to the agent (--api-secret / --api-configmap), and read by name."""

from __future__ import annotations

from berth_api import Registry
from berth_api.pod import MOUNT_ROOT, TOKEN_BUNDLE_VOLUME, TOKEN_JWKS_VOLUME
from berth_operator.builders import ClusterFacts, deployment, role

FACTS = ClusterFacts(agent_image="ghcr.io/berth-dev/berth:0.1.0")


def token_registry(bundle: dict, jwks: dict | None = None) -> Registry:
    token = {"realm": "https://auth.example.com/token", "service": "registry", "issuer": "auth",
             "rootCertBundle": bundle, **({"jwks": jwks} if jwks else {})}
    return Registry.model_validate({"metadata": {"name": "demo", "namespace": "ns", "uid": "u"}, "spec": {
        "config": {"storage": {"inmemory": {}}, "auth": {"token": token}}}})


def pod_spec(reg: Registry) -> dict:
    return deployment.build(reg, FACTS)["spec"]["template"]["spec"]


def test_a_config_map_bundle_and_a_secret_jwks():
    reg = token_registry({"configMap": {"name": "issuer-trust", "field": "ca.pem"}},
                         {"secret": {"name": "issuer-keys", "field": "jwks.json"}})
    spec = pod_spec(reg)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[TOKEN_BUNDLE_VOLUME]["configMap"] == {"name": "issuer-trust", "defaultMode": 0o440}
    assert volumes[TOKEN_JWKS_VOLUME]["secret"] == {"secretName": "issuer-keys", "defaultMode": 0o440}
    agent, registry = spec["initContainers"][0], spec["containers"][0]
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    for volume in (TOKEN_BUNDLE_VOLUME, TOKEN_JWKS_VOLUME):
        assert mounts[volume] == {"name": volume, "mountPath": f"{MOUNT_ROOT}/{volume}", "readOnly": True}
        assert volume not in {m["name"] for m in registry["volumeMounts"]}
    args = agent["args"]
    assert "token-bundle=issuer-trust" == args[args.index("--api-configmap") + 1]
    assert "token-jwks=issuer-keys" in args

    rules = role.build(reg, FACTS)["rules"]
    config_maps = [r for r in rules if "configmaps" in r["resources"]]
    assert config_maps == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["issuer-trust"],
                            "verbs": ["get", "list", "watch"]}]
    secrets = next(r for r in rules if "secrets" in r["resources"])
    assert secrets["resourceNames"] == ["demo-http-secret", "issuer-keys"]


def test_no_config_map_rule_without_a_config_map():
    reg = token_registry({"secret": {"name": "issuer-trust", "field": "ca.pem"}})
    assert not [r for r in role.build(reg, FACTS)["rules"] if "configmaps" in r["resources"]]
    assert "--api-configmap" not in pod_spec(reg)["initContainers"][0]["args"]
