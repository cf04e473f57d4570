"""The pod overrides on the real API server:

- workload identity: berth-operator (deploy/'s RBAC) makes each cloud's example into a ServiceAccount carrying
  exactly the annotations that cloud's webhook or metadata server keys on, and a pod (created from the Deployment's
  template, as the ReplicaSet controller would) carrying the pod label Azure's webhook selects by, running as that
  ServiceAccount;
- the registry pod with every field of spec.pod and spec.env set is admitted under the restricted Pod Security
  Standard (a PriorityClass exists, as the Priority admission plugin requires);
- `kubectl apply -k deploy`, exactly as the README says, installs Berth on a bare API server with the CRD this
  issue grew: kubectl's client-side apply keeps the whole CRD in its last-applied annotation, limited to 256 KiB.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from apiserver.test_apply import operator  # noqa: F401 (the fixture: berth-operator with deploy/'s RBAC)
from apiserver.test_pod_security import create_pod, restricted  # noqa: F401 (the fixture)
from berth_api import Registry
from berth_operator.builders import ClusterFacts, build_all
from support.clusters.apiserver import REPO, KubeApiServer, skip_reason
from support.clusters.operator_harness import AGENT_IMAGE, reconciled
from support.common.polling import wait_for

REGISTRIES = "berth.dev/v1alpha1/registries"
# What each cloud keys on (the examples' comments cite the documentation).
IDENTITY = {
    "workload-identity-eks": ({"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/berth-registry",
                               "eks.amazonaws.com/sts-regional-endpoints": "true"}, {}),
    "workload-identity-gke": ({"iam.gke.io/gcp-service-account": "registry@my-project.iam.gserviceaccount.com"}, {}),
    "workload-identity-aks": ({"azure.workload.identity/client-id": "00000000-0000-0000-0000-00000000c1d0",
                               "azure.workload.identity/tenant-id": "00000000-0000-0000-0000-0000000a7e1a"},
                              {"azure.workload.identity/use": "true"}),
}
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ANNOTATIONS_LIMIT = 256 * 1024  # the API server's limit on all of an object's annotations together


def test_each_clouds_example_gives_the_service_account_and_pod_exactly_its_keys(
        kube_apiserver, apiserver_namespace, operator) -> None:  # noqa: F811
    api, ns = kube_apiserver, apiserver_namespace
    for example in IDENTITY:
        document = yaml.safe_load((REPO / "examples" / f"{example}.yaml").read_text())
        api.create({**document, "metadata": {**document["metadata"], "namespace": ns}})
    for example, (keys, pod_labels) in IDENTITY.items():
        name = yaml.safe_load((REPO / "examples" / f"{example}.yaml").read_text())["metadata"]["name"]
        wait_for(lambda name=name: reconciled(api, ns, name), f"{name} reconciled", 60)
        account = api.get("v1/serviceaccounts", ns, f"{name}-agent")
        # Exactly the cloud's keys, beside Berth's own bookkeeping (berth.dev/, which a user's may not use).
        theirs = {k: v for k, v in account["metadata"]["annotations"].items() if not k.startswith("berth.dev/")}
        assert theirs == keys, example
        template = api.get("apps/v1/deployments", ns, name)["spec"]["template"]
        assert template["spec"]["serviceAccountName"] == f"{name}-agent"
        # The pod the ReplicaSet controller would make (no controller runs on this server): what a webhook sees.
        pod = api.create({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {**template["metadata"], "name": f"{name}-pod", "namespace": ns},
                          "spec": template["spec"]})
        assert {k: v for k, v in pod["metadata"]["labels"].items() if not k.startswith("app.kubernetes.io/")} == \
            pod_labels, example
        assert pod["spec"]["serviceAccountName"] == f"{name}-agent"


def test_the_pod_with_every_override_is_admitted_under_restricted(kube_apiserver, restricted) -> None:  # noqa: F811
    priority = f"berth-infra-{restricted}"
    kube_apiserver.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": priority}, "value": 1000})
    document = yaml.safe_load((REPO / "examples" / "corporate-cache" / "registry.yaml").read_text())
    spec = document["spec"]
    spec["pod"]["priorityClassName"] = priority
    spec["pod"]["affinity"]["podAntiAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "gpu"}},
                                           "topologyKey": "kubernetes.io/hostname"}}]}
    spec["env"].append({"name": "HTTP_PROXY", "valueFrom": {"secretKeyRef": {"name": "egress", "key": "url"}}})
    spec["serviceAccount"] = {"annotations": IDENTITY["workload-identity-eks"][0]}
    reg = Registry.model_validate({**document, "metadata": {"name": "r", "namespace": restricted, "uid": "u"}})
    [deployment] = [o for o in build_all(reg, ClusterFacts(agent_image=AGENT_IMAGE), http_secret_value="v")
                    if o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    admitted = create_pod(kube_apiserver, restricted, template, template["spec"].pop("serviceAccountName"))
    assert admitted["spec"]["priorityClassName"] == priority and admitted["spec"]["priority"] == 1000
    assert admitted["spec"]["imagePullSecrets"] == [{"name": "mirror-pull"}]


def test_kubectl_apply_k_deploy_as_the_readme_says(tmp_path, capsys) -> None:
    if skip_reason():
        pytest.skip(skip_reason())
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed (the base image has it)"
    readme = (REPO / "README.md").read_text()
    assert "kubectl apply -k crds\n" in readme and "kubectl apply -k deploy\n" in readme
    with KubeApiServer() as api:  # bare: nothing installed
        env = {"KUBECONFIG": str(api.kubeconfig), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        for attempt in ("install", "re-apply"):
            for directory in ("crds", "deploy"):  # the CRD first, as README says (then its Established)
                done = subprocess.run([kubectl, "apply", "-k", directory], cwd=REPO, env=env, capture_output=True,
                                      text=True, timeout=120)
                assert done.returncode == 0, f"{attempt} {directory}: {done.stderr}"
        crd = api.get("apiextensions.k8s.io/v1/customresourcedefinitions", None, "registries.berth.dev")
        annotations = crd["metadata"]["annotations"]
        size = sum(len(k) + len(v) for k, v in annotations.items())
        assert json.loads(annotations[LAST_APPLIED])["spec"]["group"] == "berth.dev"
        assert size < ANNOTATIONS_LIMIT
        with capsys.disabled():
            print(f"\nCRD last-applied annotation: {size} bytes, {100 * size / ANNOTATIONS_LIMIT:.0f}% of 256 KiB")
        assert api.get("apps/v1/deployments", "berth-system", "berth-operator") is not None
