"""The registry pod template meets every rule of the restricted Pod Security Standard (Kubernetes docs,
"Pod Security Standards", baseline and restricted profiles), asserted field by field."""

from __future__ import annotations

import copy

import pytest

from berth_operator.builders import build_all

ALLOWED_VOLUME_SOURCES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
ALLOWED_SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t"}


def restricted_violations(template: dict) -> list[str]:
    """Every rule of the baseline and restricted profiles that the pod template breaks."""
    found = []
    meta, pod = template.get("metadata", {}), template["spec"]
    pod_context = pod.get("securityContext", {})
    containers = [*pod.get("initContainers", []), *pod["containers"], *pod.get("ephemeralContainers", [])]

    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            found.append(f"spec.{key}")
    for annotation, value in meta.get("annotations", {}).items():
        if annotation.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            found.append(f"annotation {annotation}")
    for sysctl in pod_context.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']}")
    for volume in pod.get("volumes", []):
        sources = set(volume) - {"name"}
        if not sources <= ALLOWED_VOLUME_SOURCES:
            found.append(f"volume {volume['name']} uses {sorted(sources - ALLOWED_VOLUME_SOURCES)}")

    def check_common(context: dict, where: str) -> None:
        if context.get("windowsOptions", {}).get("hostProcess"):
            found.append(f"{where}.windowsOptions.hostProcess")
        if context.get("seLinuxOptions", {}).get("type") not in ALLOWED_SELINUX_TYPES:
            found.append(f"{where}.seLinuxOptions.type")
        for key in ("user", "role"):
            if context.get("seLinuxOptions", {}).get(key):
                found.append(f"{where}.seLinuxOptions.{key}")
        if context.get("appArmorProfile", {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"{where}.appArmorProfile")
        if context.get("seccompProfile", {}).get("type") == "Unconfined":
            found.append(f"{where}.seccompProfile Unconfined")
        if context.get("runAsUser") == 0:
            found.append(f"{where}.runAsUser 0")

    check_common(pod_context, "spec.securityContext")
    for container in containers:
        where = f"container {container['name']}"
        context = container.get("securityContext", {})
        check_common(context, f"{where} securityContext")
        if context.get("privileged"):
            found.append(f"{where} privileged")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{where} procMount")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where} allowPrivilegeEscalation is not false")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{where} does not drop ALL capabilities")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{where} adds capabilities")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"{where} hostPort")
        run_as_non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
        if run_as_non_root is not True:
            found.append(f"{where} runAsNonRoot is not true (container or pod)")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{where} seccompProfile is not RuntimeDefault or Localhost (container or pod)")
    return found


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
    assert [c["name"] for c in containers] == ["agent", "registry"]
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
