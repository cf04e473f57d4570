"""The Deployment and its pod: the mount contract (docs/design.md section 3), the agent as a native sidecar,
the registry container, replicas and strategy."""

from __future__ import annotations

import argparse

from berth_agent.commands import run as run_command
from berth_operator.builders import build_all, deployment, http_secret

TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SECRET_VOLUMES = {"cosi", "htpasswd", "http-secret", "redis", "tls"}


def built(reg, facts) -> dict[str, dict]:
    """The first object of each kind (the registry's Service before the metrics Service)."""
    found: dict[str, dict] = {}
    for o in build_all(reg, facts, http_secret_value="v"):
        found.setdefault(o["kind"], o)
    return found


def containers(dep: dict) -> tuple[dict, dict]:
    pod = dep["spec"]["template"]["spec"]
    [agent, _copy] = pod["initContainers"]
    [registry] = pod["containers"]
    return agent, registry


def mounts(container: dict) -> dict[str, dict]:
    return {m["name"]: m for m in container["volumeMounts"]}


def test_mount_contract_holds(builder_case):
    reg, facts = builder_case
    dep = built(reg, facts)["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    agent, registry = containers(dep)
    agent_mounts, registry_mounts = mounts(agent), mounts(registry)

    assert volumes["config"] == {"name": "config", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}
    assert agent_mounts["config"] == {"name": "config", "mountPath": "/etc/berth"}
    assert registry_mounts["config"] == {"name": "config", "mountPath": "/etc/berth", "readOnly": True}
    for name in SECRET_VOLUMES & set(volumes):
        assert set(volumes[name]["secret"]) == {"secretName", "defaultMode"}, "whole Secret: no items"
        assert agent_mounts[name] == {"name": name, "mountPath": f"/var/run/berth/{name}", "readOnly": True}
        assert name not in registry_mounts
    for container in (agent, registry):
        assert all("subPath" not in m and "subPathExpr" not in m for m in container["volumeMounts"])
        assert set(mounts(container)) <= set(volumes)

    storage = reg.spec.config.storage
    expected_secrets = {"http-secret"}
    expected_secrets |= {"cosi"} if storage.object_storage else set()
    expected_secrets |= {"htpasswd"} if storage.auth.htpasswd else set()
    expected_secrets |= {"redis"} if reg.spec.redis else set()
    expected_secrets |= {"tls"} if reg.spec.http.tls else set()
    assert SECRET_VOLUMES & set(volumes) == expected_secrets
    secret_name = reg.spec.http.secret.name if reg.spec.http.secret else http_secret.name(reg)
    assert volumes["http-secret"]["secret"]["secretName"] == secret_name

    if storage.filesystem is not None:
        claim = storage.filesystem.persistent_volume_claim or "demo-data"
        assert volumes["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
        assert agent_mounts["data"]["mountPath"] == registry_mounts["data"]["mountPath"] == "/var/lib/registry"
    else:
        assert "data" not in volumes and "data" not in agent_mounts and "data" not in registry_mounts


def test_token_only_in_the_agent(builder_case):
    reg, facts = builder_case
    dep = built(reg, facts)["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    agent, registry = containers(dep)
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "demo-agent"
    [token] = [v for v in pod["volumes"] if v["name"] == "agent-token"]
    assert token["projected"]["sources"] == [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]
    assert mounts(agent)["agent-token"] == {"name": "agent-token", "mountPath": TOKEN_DIR, "readOnly": True}
    assert "agent-token" not in mounts(registry)
    assert all(m["mountPath"] != TOKEN_DIR for m in registry["volumeMounts"])


def test_agent_is_a_native_sidecar(builder_case):
    reg, facts = builder_case
    dep = built(reg, facts)["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    agent, _ = containers(dep)
    assert pod["shareProcessNamespace"] is True
    assert pod["enableServiceLinks"] is False
    assert agent["restartPolicy"] == "Always"
    assert agent["image"] == facts.agent_image
    assert agent["command"] == ["berth-agent"]
    assert agent["args"][:17] == [
        "run", "--registry", "registries/demo", "--mounts", "/var/run/berth", "--config-dir", "/etc/berth",
        "--data-dir", "/var/lib/registry", "--health-addr", "0.0.0.0:8081", "--leave-seconds", "5",
        "--state-dir", "/tmp/berth",  # berth-supervise's files: the config volume is read-only there
        "--registry-metrics-addr", "0.0.0.0:8082",  # the registry's own metrics, stable across reloads
    ]
    # Then one --api-secret DIR=SECRET per mounted Secret volume (test_builders_role_secrets).
    mounted = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert agent["args"][17:] == [arg for item in mounted.items() for arg in ("--api-secret", "=".join(item))]
    # The agent's own command line accepts them (parsed, not run).
    parser = argparse.ArgumentParser(prog="berth-agent")
    run_command.add_parser(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args(agent["args"])
    assert (parsed.registry, str(parsed.mounts), parsed.health_addr) == \
        ("registries/demo", "/var/run/berth", "0.0.0.0:8081")
    assert run_command._api_secrets(parsed.api_secret) == mounted
    assert agent["env"] == [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "PYTHONOPTIMIZE", "value": "2"},  # the image's .opt-2.pyc (Containerfile)
    ]
    assert agent["ports"] == [{"name": "agent-health", "containerPort": 8081, "protocol": "TCP"},
                              {"name": "reg-metrics", "containerPort": 8082, "protocol": "TCP"}]
    assert parsed.registry_metrics_addr == "0.0.0.0:8082"
    assert agent["startupProbe"]["httpGet"] == {"path": "/startupz", "port": "agent-health"}
    assert agent["startupProbe"]["periodSeconds"] * agent["startupProbe"]["failureThreshold"] >= 120
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert agent["livenessProbe"]["httpGet"]["path"] == "/livez"


def test_registry_container(builder_case):
    reg, facts = builder_case
    _, registry = containers(built(reg, facts)["Deployment"])
    scheme = "HTTPS" if reg.spec.http.tls else "HTTP"
    port_name = scheme.lower()
    # The Berth image runs berth-supervise, which holds the listening socket for Distribution 3; the
    # registry binary is spec.image's, copied by the init container after the agent.
    assert registry["image"] == facts.agent_image
    assert registry["command"] == ["berth-supervise"]
    assert registry["env"] == [
        {"name": "BERTH_CONFIG", "value": "/etc/berth/config.yml"},
        {"name": "BERTH_REGISTRY_BIN", "value": "/opt/berth/registry/registry"},
        # Whatever the major: the supervisor holds it only for a binary that says it is v3 (spec.distribution is hot).
        {"name": "BERTH_LISTEN_ADDR", "value": f":{reg.spec.http.port}"},
        {"name": "BERTH_STATE_DIR", "value": "/tmp/berth"},  # the supervisor's files, read by the agent
        # the loopback debug ports the supervisor gives its registries (never the registry's own port)
        {"name": "BERTH_DEBUG_PORTS", "value": "5302 5303" if reg.spec.http.port == 5301 else "5301 5302"},
        {"name": "OTEL_TRACES_EXPORTER", "value": "none"},
    ]
    assert registry["ports"] == [{"name": port_name, "containerPort": reg.spec.http.port, "protocol": "TCP"}]
    assert registry["readinessProbe"]["httpGet"] == {"path": "/", "port": port_name, "scheme": scheme}
    assert registry["livenessProbe"]["tcpSocket"] == {"port": port_name}
    expected = {k: v for k, v in reg.spec.resources.model_dump().items() if v}
    assert registry["resources"] == expected
    assert mounts(registry)["registry-bin"] == {"name": "registry-bin", "mountPath": "/opt/berth/registry",
                                                "readOnly": True}


def test_the_registry_binary_is_copied_out_of_spec_image(builder_case):
    reg, facts = builder_case
    pod = built(reg, facts)["Deployment"]["spec"]["template"]["spec"]
    agent, copy = pod["initContainers"]
    assert agent["name"] == "agent" and agent["restartPolicy"] == "Always"  # first: it runs whatever the image
    assert copy["image"] == reg.spec.image and "restartPolicy" not in copy
    assert copy["command"] == ["cp", "/bin/registry", "/opt/berth/registry/registry"]
    assert copy["terminationMessagePolicy"] == "FallbackToLogsOnError"  # cp's words when the binary is missing
    assert mounts(copy) == {"registry-bin": {"name": "registry-bin", "mountPath": "/opt/berth/registry"}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["registry-bin"] == {"name": "registry-bin", "emptyDir": {"sizeLimit": "256Mi"}}


def test_resources_from_spec(registry_factory, facts_factory):
    reg = registry_factory({"resources": {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
                            "config": {"storage": {"inmemory": {}}}})
    _, registry = containers(built(reg, facts_factory())["Deployment"])
    assert registry["resources"] == {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}


def test_replicas_and_strategy(registry_factory, facts_factory):
    def shape(spec, **facts):
        dep = built(registry_factory(spec), facts_factory(**facts))
        return dep["Deployment"]["spec"]["replicas"], dep["Deployment"]["spec"]["strategy"]["type"], \
            "PodDisruptionBudget" in dep

    rwo_class = {"config": {"storage": {"filesystem": {"storageClass": "standard"}}}}
    claim = {"config": {"storage": {"filesystem": {"persistentVolumeClaim": "data"}}}}
    cosi = {"config": {"storage": {"objectStorage": {"bucketClass": "s3", "bucketAccessClass": "rw"}}}}
    # ReadWriteOnce (the created claim, or modes that say so): the new pod surges beside the old one, on its node.
    assert shape({**rwo_class, "replicas": 3}) == (1, "RollingUpdate", False)
    assert shape({**rwo_class, "replicas": 0}) == (0, "RollingUpdate", False)
    assert shape({**claim, "replicas": 3}, pvc_access_modes=("ReadWriteOnce",)) == (1, "RollingUpdate", False)
    assert shape({**rwo_class}, rollout_fallback=True) == (1, "Recreate", False)  # a stalled surge goes on so
    assert shape({**claim, "replicas": 3}) == (1, "Recreate", False)  # access modes unknown: one writer
    assert shape({**claim, "replicas": 3}, pvc_access_modes=("ReadWriteOncePod",)) == (1, "Recreate", False)
    assert shape({**claim, "replicas": 3}, pvc_access_modes=("ReadWriteOnce", "ReadWriteMany")) == \
        (3, "RollingUpdate", True)
    assert shape({**cosi, "replicas": 1}) == (1, "RollingUpdate", False)
    assert shape({**cosi, "replicas": 3}) == (3, "RollingUpdate", True)
    # inmemory: a new pod has none of the old one's data, so two never serve at once.
    assert shape({"config": {"storage": {"inmemory": {}}}, "replicas": 3}) == (1, "Recreate", False)
    # Placement that keeps the Registry's pods on different nodes cannot surge on one node: Recreate.
    apart = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                            "whenUnsatisfiable": "DoNotSchedule"}]}
    assert shape({**rwo_class, "pod": apart}) == (1, "Recreate", False)


def test_a_readwriteonce_claim_places_the_new_pod_beside_the_running_one(registry_factory, facts_factory):
    user = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}]},
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}}
    reg = registry_factory({"config": {"storage": {"filesystem": {"storageClass": "standard"}}},
                            "pod": {"affinity": user}})
    dep = built(reg, facts_factory())["Deployment"]
    terms = dep["spec"]["template"]["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == [user["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0], {
        "labelSelector": {"matchLabels": dep["spec"]["selector"]["matchLabels"]},
        "topologyKey": "kubernetes.io/hostname"}]  # the user's terms, then Berth's
    assert dep["spec"]["template"]["spec"]["affinity"]["nodeAffinity"] == user["nodeAffinity"]
    # A stalled surge changes the strategy only: the template (and so the pods) stay as they are.
    fallback = built(reg, facts_factory(rollout_fallback=True))["Deployment"]
    assert fallback["spec"]["template"] == dep["spec"]["template"]
    assert fallback["metadata"]["annotations"] == {"berth.dev/rollout-fallback": "true"}
    assert "annotations" not in dep["metadata"]
    for storage in ({"objectStorage": {"bucketClass": "s3", "bucketAccessClass": "rw"}}, {"inmemory": {}}):
        other = built(registry_factory({"config": {"storage": storage}}), facts_factory())["Deployment"]
        assert "affinity" not in other["spec"]["template"]["spec"]


def test_the_registry_container_stays_in_service_until_its_endpoints_are_gone(registry_factory, facts_factory):
    dep = built(registry_factory({"config": {"storage": {"inmemory": {}}}}), facts_factory())["Deployment"]
    registry = dep["spec"]["template"]["spec"]["containers"][0]
    assert registry["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert dep["spec"]["progressDeadlineSeconds"] == 600
    later = registry_factory({"config": {"storage": {"inmemory": {}}}, "rollout": {"progressDeadlineSeconds": 90}})
    changed = built(later, facts_factory())["Deployment"]
    assert changed["spec"]["progressDeadlineSeconds"] == 90 and changed["spec"]["template"] == dep["spec"]["template"]


def test_pdb_selects_the_pods(registry_factory, facts_factory):
    reg = registry_factory({"replicas": 2, "config": {"storage": {"objectStorage": {
        "bucketClass": "s3", "bucketAccessClass": "rw"}}}})
    objects = built(reg, facts_factory())
    pdb, dep = objects["PodDisruptionBudget"], objects["Deployment"]
    assert pdb["metadata"]["name"] == "demo"
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": dep["spec"]["selector"]}
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert objects["Service"]["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_existing_bucket_access_mounts_its_secret(registry_factory, facts_factory):
    reg = registry_factory({"config": {"storage": {"objectStorage": {
        "bucketClaim": "team-bucket", "bucketAccess": "team-access"}}}})
    dep = deployment.build(reg, facts_factory(bucket_access_secret="team-creds"))
    cosi = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "cosi"]
    assert cosi == [{"name": "cosi", "secret": {"secretName": "team-creds", "defaultMode": 0o440}}]
    # Not known yet: no Deployment rather than a pod that cannot configure itself.
    assert deployment.build(reg, facts_factory()) is None
    kinds = [o["kind"] for o in build_all(reg, facts_factory(), http_secret_value="v")]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Secret", "Service", "Service", "Lease", "Lease"]


def test_created_bucket_access_mounts_the_deterministic_secret(registry_factory, facts_factory):
    reg = registry_factory({"config": {"storage": {"objectStorage": {
        "bucketClass": "s3", "bucketAccessClass": "rw"}}}})
    objects = built(reg, facts_factory())
    cosi = [v for v in objects["Deployment"]["spec"]["template"]["spec"]["volumes"] if v["name"] == "cosi"]
    assert cosi[0]["secret"]["secretName"] == objects["BucketAccess"]["spec"]["credentialsSecretName"] \
        == "demo-cosi-credentials"
