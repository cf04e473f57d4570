"""The restricted Pod Security Standard as the real API server enforces it (the PodSecurity admission plugin, a
namespace labelled `pod-security.kubernetes.io/enforce: restricted`, as deploy/base/namespace.yaml labels the
operator's): the registry pod of every example and the operator's own pod are admitted, and every breach
support.clusters.pss claims to catch (tests/deploy/test_pss.py) is refused by the server too, so the offline checker
the builder tests use says what the API server says. Pods are created with dryRun (nothing would run them).
"""

from __future__ import annotations

import copy

import pytest
import yaml

from berth_api import Registry
from berth_operator.builders import ClusterFacts, build_all
from deploy.test_pss import BREAKS, compliant
from support.clusters.apiserver import REPO, ApiError
from support.clusters.operator_harness import AGENT_IMAGE

EXAMPLES = sorted(p.stem for p in (REPO / "examples").glob("*.yaml"))


@pytest.fixture
def restricted(kube_apiserver, apiserver_namespace) -> str:
    kube_apiserver.patch("v1/namespaces", None, apiserver_namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    # Pods name a ServiceAccount that must exist (no controller makes `default` here).
    kube_apiserver.create({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": "default", "namespace": apiserver_namespace}})
    return apiserver_namespace


def create_pod(api, namespace: str, template: dict, service_account: str | None = None) -> dict:
    template = copy.deepcopy(template)
    spec = template["spec"]
    if service_account:
        api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": service_account, "namespace": namespace}})
        spec["serviceAccountName"] = service_account
    metadata = {**template.get("metadata", {}), "name": "p", "namespace": namespace}
    return api.create({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}, dryRun="All")


def _security(spec: dict) -> list:
    return [spec.get("securityContext")] + [(c["name"], c.get("securityContext"))
                                            for c in spec.get("initContainers", []) + spec["containers"]]


def expect_admitted(api, namespace: str, template: dict, service_account: str | None = None) -> None:
    """create_pod, and the server's pod is the one built: every container, each security context unchanged."""
    pod = create_pod(api, namespace, template, service_account)
    assert _security(pod["spec"]) == _security(template["spec"]), pod["spec"]


@pytest.mark.parametrize("name", [*EXAMPLES, "inmemory-on-port-443"])
def test_the_registry_pod_is_admitted(kube_apiserver, restricted, name) -> None:
    document = yaml.safe_load((REPO / "examples" / f"{name.removesuffix('-on-port-443')}.yaml").read_text())
    if name.endswith("-on-port-443"):  # the one safe sysctl (ip_unprivileged_port_start)
        document["spec"].setdefault("http", {})["addr"] = ":443"
    reg = Registry.model_validate({**document, "metadata": {"name": "r", "namespace": restricted, "uid": "u"}})
    facts = ClusterFacts(agent_image=AGENT_IMAGE, bucket_access_secret="access-credentials")
    [deployment] = [o for o in build_all(reg, facts, http_secret_value="v") if o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    expect_admitted(kube_apiserver, restricted, template, template["spec"].pop("serviceAccountName"))


def test_the_operator_pod_is_admitted(kube_apiserver, restricted) -> None:
    deployment = yaml.safe_load((REPO / "deploy" / "base" / "deployment.yaml").read_text())
    template = deployment["spec"]["template"]
    expect_admitted(kube_apiserver, restricted, template, template["spec"].pop("serviceAccountName"))


def test_the_checkers_compliant_pod_is_admitted(kube_apiserver, restricted) -> None:
    expect_admitted(kube_apiserver, restricted, compliant())


# Breaches that Pod validation would refuse before PodSecurity sees them, made valid the way a user would.
VALID_AS_PODS = {
    "privileged": lambda t: t["spec"]["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
    "procMount": lambda t: t["spec"].update(hostUsers=False),
    "windows hostProcess": lambda t: t["spec"].update(hostNetwork=True),
}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_each_breach_is_refused_by_the_server(kube_apiserver, restricted, rule) -> None:
    template = compliant()
    BREAKS[rule](template)
    VALID_AS_PODS.get(rule, lambda t: None)(template)
    with pytest.raises(ApiError) as refused:
        create_pod(kube_apiserver, restricted, template)
    error = refused.value
    if rule == "ephemeral container":  # refused before PodSecurity: a Pod cannot be created with one
        assert error.status == 422 and "ephemeralContainers" in str(error), error
    else:
        assert error.status == 403 and "violates PodSecurity" in str(error), error
