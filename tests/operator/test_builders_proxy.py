"""A pull-through cache's credentials in the pod and the Role: the Secret mounted whole as the `proxy`
volume in the agent only, named to the agent (--api-secret proxy=NAME) and read by name; none for an anonymous
upstream."""

from __future__ import annotations

from berth_api import Registry
from berth_api.pod import MOUNT_ROOT, PROXY_VOLUME
from berth_operator.builders import ClusterFacts, deployment, role

FACTS = ClusterFacts(agent_image="ghcr.io/berth-dev/berth:0.1.0")


def proxy_registry(**proxy) -> Registry:
    return Registry.model_validate({"metadata": {"name": "mirror", "namespace": "ns", "uid": "u"}, "spec": {
        "config": {"storage": {"filesystem": {"storageClass": "standard"}},
                   "proxy": {"remoteURL": "https://registry-1.docker.io", **proxy}}}})


def test_the_credentials_secret_is_mounted_in_the_agent_only_and_named_to_it():
    reg = proxy_registry(credentials={"secretName": "dockerhub-token"})
    spec = deployment.build(reg, FACTS)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[PROXY_VOLUME]["secret"] == {"secretName": "dockerhub-token", "defaultMode": 0o440}
    agent, registry = spec["initContainers"][0], spec["containers"][0]
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert mounts[PROXY_VOLUME] == {"name": PROXY_VOLUME, "mountPath": f"{MOUNT_ROOT}/proxy", "readOnly": True}
    assert PROXY_VOLUME not in {m["name"] for m in registry["volumeMounts"]}
    assert "proxy=dockerhub-token" in agent["args"]
    secrets = next(r for r in role.build(reg, FACTS)["rules"] if "secrets" in r["resources"])
    assert secrets["resourceNames"] == ["dockerhub-token", "mirror-http-secret"]


def test_an_anonymous_upstream_mounts_nothing():
    reg = proxy_registry()
    spec = deployment.build(reg, FACTS)["spec"]["template"]["spec"]
    assert PROXY_VOLUME not in {v["name"] for v in spec["volumes"]}
    assert not [a for a in spec["initContainers"][0]["args"] if a.startswith("proxy=")]
