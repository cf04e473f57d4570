"""The restricted Pod Security Standard checker (tests/support/clusters/pss.py) catches every rule it claims to."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from support.clusters.pss import restricted_violations


def compliant() -> dict:
    context = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [{"name": "agent", "image": "a", "securityContext": copy.deepcopy(context)}],
            "containers": [{"name": "registry", "image": "r", "securityContext": copy.deepcopy(context),
                            "ports": [{"containerPort": 5000}]}],
            "volumes": [{"name": "config", "emptyDir": {"medium": "Memory"}},
                        {"name": "s", "secret": {"secretName": "s"}},
                        {"name": "d", "persistentVolumeClaim": {"claimName": "d"}}],
        },
    }


def spec(template: dict) -> dict:
    return template["spec"]


def init_context(template: dict) -> dict:
    return template["spec"]["initContainers"][0]["securityContext"]


def main_context(template: dict) -> dict:
    return template["spec"]["containers"][0]["securityContext"]


BREAKS: dict[str, Callable[[dict], None]] = {
    "hostNetwork": lambda t: spec(t).update(hostNetwork=True),
    "hostPID": lambda t: spec(t).update(hostPID=True),
    "hostIPC": lambda t: spec(t).update(hostIPC=True),
    "hostPath volume": lambda t: spec(t)["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "other volume type": lambda t: spec(t)["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
    "privileged": lambda t: main_context(t).update(privileged=True),
    "escalation unset on init": lambda t: init_context(t).pop("allowPrivilegeEscalation"),
    "escalation true": lambda t: main_context(t).update(allowPrivilegeEscalation=True),
    "capabilities not dropped": lambda t: main_context(t).update(capabilities={"drop": ["NET_RAW"]}),
    "capability added": lambda t: main_context(t)["capabilities"].update(add=["SYS_ADMIN"]),
    "hostPort": lambda t: spec(t)["containers"][0]["ports"][0].update(hostPort=5000),
    "runAsNonRoot unset": lambda t: spec(t)["securityContext"].pop("runAsNonRoot"),
    "runAsNonRoot false on a container": lambda t: init_context(t).update(runAsNonRoot=False),
    "runAsUser 0": lambda t: main_context(t).update(runAsUser=0),
    "seccomp unset": lambda t: spec(t)["securityContext"].pop("seccompProfile"),
    "seccomp unconfined on a container": lambda t: init_context(t).update(seccompProfile={"type": "Unconfined"}),
    "unsafe sysctl": lambda t: spec(t)["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    "apparmor unconfined": lambda t: main_context(t).update(appArmorProfile={"type": "Unconfined"}),
    "apparmor annotation": lambda t: t["metadata"].update(
        annotations={"container.apparmor.security.beta.kubernetes.io/registry": "unconfined"}),
    "selinux custom type": lambda t: main_context(t).update(seLinuxOptions={"type": "spc_t"}),
    "selinux user": lambda t: spec(t)["securityContext"].update(seLinuxOptions={"user": "root"}),
    "procMount": lambda t: main_context(t).update(procMount="Unmasked"),
    "windows hostProcess": lambda t: spec(t)["securityContext"].update(windowsOptions={"hostProcess": True}),
    "ephemeral container": lambda t: spec(t).update(ephemeralContainers=[{"name": "debug", "image": "d"}]),
}


def test_a_compliant_template_passes() -> None:
    assert restricted_violations(compliant()) == []
    assert restricted_violations(compliant()["spec"]) == []  # a bare pod spec too


def test_container_level_settings_satisfy_the_pod_level_rules() -> None:
    template = compliant()
    pod_context = spec(template).pop("securityContext")
    for context in (init_context(template), main_context(template)):
        context.update(runAsNonRoot=True, seccompProfile=pod_context["seccompProfile"])
    assert restricted_violations(template) == []


def test_net_bind_service_may_be_added() -> None:
    template = compliant()
    main_context(template)["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    assert restricted_violations(template) == []


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_each_rule_is_enforced(rule: str) -> None:
    template = compliant()
    BREAKS[rule](template)
    assert restricted_violations(template), f"{rule} was not caught"
