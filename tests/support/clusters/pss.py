"""The `restricted` Pod Security Standard (which includes `baseline`), checked field by field.

Rules as the Kubernetes docs "Pod Security Standards" state them for the latest policy version. Use on any
pod template or pod spec::

    from support.clusters.pss import restricted_violations
    assert restricted_violations(deployment["spec"]["template"]) == []

Each violation names the field (a path from the pod template) and the rule, so a failure says what to fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# Restricted: "Volume Types" (every other volume source is refused).
ALLOWED_VOLUME_SOURCES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
})
# Baseline: "Sysctls" (the safe set).
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
})
# Baseline: "SELinux" (types; user and role must be unset).
ALLOWED_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# Restricted: "Capabilities" (drop ALL; the only capability that may be added).
ALLOWED_ADDED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for field in CONTAINER_LISTS:
        for index, container in enumerate(spec.get(field) or []):
            yield f"spec.{field}[{index}]({container.get('name', '?')})", container


def _common_context(context: Mapping[str, Any], where: str) -> Iterator[str]:
    """Rules that apply to the pod's and to every container's securityContext alike."""
    if (context.get("windowsOptions") or {}).get("hostProcess"):
        yield f"{where}.windowsOptions.hostProcess: must not be true"
    selinux = context.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in ALLOWED_SELINUX_TYPES:
        yield f"{where}.seLinuxOptions.type: {selinux['type']!r} is not an allowed type"
    for key in ("user", "role"):
        if selinux.get(key):
            yield f"{where}.seLinuxOptions.{key}: must be unset"
    apparmor = (context.get("appArmorProfile") or {}).get("type")
    if apparmor not in (None, "RuntimeDefault", "Localhost"):
        yield f"{where}.appArmorProfile.type: {apparmor!r} (only RuntimeDefault or Localhost)"
    seccomp = (context.get("seccompProfile") or {}).get("type")
    if seccomp is not None and seccomp not in ("RuntimeDefault", "Localhost"):
        yield f"{where}.seccompProfile.type: {seccomp!r} (only RuntimeDefault or Localhost)"
    if context.get("runAsUser") == 0:
        yield f"{where}.runAsUser: must not be 0"
    if context.get("runAsNonRoot") is False:
        yield f"{where}.runAsNonRoot: must not be false"


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """Every `restricted` (and `baseline`) rule the pod template (or pod spec) breaks; [] when it complies."""
    spec = pod["spec"] if "spec" in pod else pod
    meta = pod.get("metadata") or {}
    pod_context = spec.get("securityContext") or {}
    found: list[str] = []

    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            found.append(f"spec.{key}: must not be true")
    for annotation, value in (meta.get("annotations") or {}).items():
        if annotation.startswith(APPARMOR_ANNOTATION) and not (
                value == "runtime/default" or value.startswith("localhost/")):
            found.append(f"metadata.annotations[{annotation}]: {value!r} (AppArmor must not be unconfined)")
    for sysctl in pod_context.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"spec.securityContext.sysctls: {sysctl.get('name')!r} is not a safe sysctl")
    for index, volume in enumerate(spec.get("volumes") or []):
        sources = set(volume) - {"name"}
        if sources - ALLOWED_VOLUME_SOURCES:
            found.append(f"spec.volumes[{index}]({volume.get('name')}): {sorted(sources - ALLOWED_VOLUME_SOURCES)} "
                         f"is not an allowed volume type (hostPath included)")
    found += _common_context(pod_context, "spec.securityContext")

    for where, container in _containers(spec):
        context = container.get("securityContext") or {}
        found += _common_context(context, f"{where}.securityContext")
        if context.get("privileged"):
            found.append(f"{where}.securityContext.privileged: must not be true")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{where}.securityContext.procMount: must be Default")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}.securityContext.allowPrivilegeEscalation: must be false")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{where}.securityContext.capabilities.drop: must include ALL")
        added = set(capabilities.get("add") or []) - ALLOWED_ADDED_CAPABILITIES
        if added:
            found.append(f"{where}.securityContext.capabilities.add: {sorted(added)} (only NET_BIND_SERVICE)")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                found.append(f"{where}.ports: hostPort {port['hostPort']} (must be unset or 0)")
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            found.append(f"{where}: runAsNonRoot must be true (container or pod securityContext)")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{where}: seccompProfile.type must be RuntimeDefault or Localhost (container or pod)")
    return found
