"""The registry pod template meets every rule of the restricted Pod Security Standard (Kubernetes docs,
"Pod Security Standards", baseline and restricted profiles): through the shared checker (support.clusters.pss), and
asserted field by field here."""

from __future__ import annotations

import copy

import pytest

from berth_operator.builders import build_all
from support.clusters.pss import ALLOWED_VOLUME_SOURCES, restricted_violations


def pod_template(reg, facts) -> dict:
    [deployment] = [o for o in build_all(reg, facts, http_secret_value="v") if o["kind"] == "Deployment"]
    return deployment["spec"]["template"]


def test_pod_template_is_restricted(builder_case):
    reg, facts = builder_case
    template = pod_template(reg, facts)
    assert restricted_violations(template) == []

    pod = template["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["runAsGroup"] == 65532
    assert pod["securityContext"]["fsGroup"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)
    assert {source for volume in pod["volumes"] for source in volume if source != "name"} <= ALLOWED_VOLUME_SOURCES
    containers = [*pod["initContainers"], *pod["containers"]]
    assert [c["name"] for c in containers] == ["agent", "registry-binary", "registry"]  # the copy
    for container in containers:
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == context["runAsGroup"] == 65532, "same UID, so the agent may signal the registry"
        assert context["allowPrivilegeEscalation"] is False
        assert context["privileged"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert context["readOnlyRootFilesystem"] is True
        assert "procMount" not in context and "seLinuxOptions" not in context and "windowsOptions" not in context
        assert all("hostPort" not in port for port in container.get("ports", []))


def test_privileged_port_uses_the_safe_sysctl_only(registry_factory, facts_factory):
    low = pod_template(registry_factory({"http": {"addr": ":443"}, "config": {"storage": {"inmemory": {}}}}),
                       facts_factory())
    assert low["spec"]["securityContext"]["sysctls"] == [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]
    assert restricted_violations(low) == []
    high = pod_template(registry_factory({"config": {"storage": {"inmemory": {}}}}), facts_factory())
    assert "sysctls" not in high["spec"]["securityContext"]


@pytest.mark.parametrize(
    "breach",
    [
        lambda pod: pod["spec"].__setitem__("hostPID", True),
        lambda pod: pod["spec"]["initContainers"][0]["securityContext"].__setitem__("privileged", True),
        lambda pod: pod["spec"]["containers"][0]["securityContext"].__setitem__("allowPrivilegeEscalation", True),
        lambda pod: pod["spec"]["containers"][0]["securityContext"]["capabilities"].__setitem__("add", ["SYS_ADMIN"]),
        lambda pod: pod["spec"]["containers"][0]["securityContext"].__setitem__("capabilities", {}),
        lambda pod: pod["spec"]["containers"][0]["securityContext"].__setitem__(
            "seccompProfile", {"type": "Unconfined"}),
        lambda pod: pod["spec"]["initContainers"][0]["securityContext"].__setitem__("runAsUser", 0),
        lambda pod: pod["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
        lambda pod: pod["spec"]["securityContext"].__setitem__("sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
        lambda pod: pod["spec"]["containers"][0]["ports"][0].__setitem__("hostPort", 5000),
    ],
)
def test_checker_catches_breaches(breach, registry_factory, facts_factory):
    template = copy.deepcopy(pod_template(registry_factory({"config": {"storage": {"inmemory": {}}}}), facts_factory()))
    breach(template)
    assert restricted_violations(template)
