"""A spec.image without /bin/registry: the registry-binary init container fails, and the Registry is
Degraded RegistryBinaryMissing, quoting what cp said."""

from __future__ import annotations

from berth_operator.engine import status
from berth_operator.engine.status import Finding, Observation, binary_findings

CP_SAID = "cp: can't stat '/bin/registry': No such file or directory\n"


def _pod(name: str, init: list[dict]) -> dict:
    return {"metadata": {"name": name}, "status": {"phase": "Pending", "initContainerStatuses": init}}


def test_a_failed_copy_names_the_image_the_pod_and_cps_words():
    pods = [
        _pod("reg-1", [{"name": "agent", "state": {"running": {}}},
                       {"name": "registry-binary", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 1, "message": CP_SAID}}}]),
        _pod("reg-2", [{"name": "registry-binary", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]),
    ]
    [finding] = binary_findings(pods, "example.com/not-a-registry:1")
    assert finding.reason == "RegistryBinaryMissing" and finding.degrades
    assert "spec.image example.com/not-a-registry:1 has no registry binary at /bin/registry" in finding.message
    assert "pod reg-1: cp: can't stat '/bin/registry': No such file or directory" in finding.message
    assert "pod reg-2: Error" in finding.message


def test_a_copy_that_worked_or_has_not_run_is_no_finding():
    pods = [
        _pod("ok", [{"name": "registry-binary", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]),
        _pod("new", [{"name": "registry-binary", "state": {"waiting": {"reason": "PodInitializing"}}}]),
        {"metadata": {"name": "bare"}},
    ]
    assert binary_findings(pods, "registry:3") == []


def test_it_makes_the_registry_degraded():
    finding = Finding("RegistryBinaryMissing", "spec.image x has no registry binary at /bin/registry")
    conds = status.conditions(Observation(generation=1, findings=(finding,)))
    assert conds["Degraded"][:2] == ("True", "RegistryBinaryMissing")
