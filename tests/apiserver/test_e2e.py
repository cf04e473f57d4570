"""berth-operator and the agents as processes on the real API server, each with its own real token: the
end-to-end scenarios that need no kubelet (status and Ready, Events, reload Lease turns, Secrets watched over
the API, GC requests and acknowledgements).

The operator (deploy/'s RBAC) makes the Registry's objects. support.clusters.workload plays the Deployment controller
and the kubelet for its Deployment: registry pods on this machine (agent + berth-supervise + docker-registry), a
Pod object for each from the template (so the ServiceAccount the operator made must exist, and the operator's
label selector finds them), the Deployment's status. Each agent runs with its own token of that ServiceAccount
(the TokenRequest API, as the kubelet asks for a pod's projected token) and the `--api-secret` arguments of
the template, so only the Role the operator built authorizes it. Every request of every process must pass
RBAC (the audit log says so).
"""

from __future__ import annotations

import hashlib

import pytest

from berth_api import GC_REQUEST_ANNOTATION
from support.clusters.apiserver import KubeApiServer, forbidden, service_account_user, token_id
from support.clusters.apiserver_identities import OPERATOR_USER, start_operator
from support.clusters.workload import RegistryWorkload, create_shared_claim, ready_at_generation
from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.gc import GatedRegistry, gc_status, wait_last_run
from support.registries.pod import filesystem_spec, registry_object
from support.registries.registry import make_oci_image, push_image
from support.registries.supervisor import REGISTRY_BIN

pytestmark = pytest.mark.e2e  # berth-operator and real agents as processes: not in the quick run

REGISTRIES = "berth.dev/v1alpha1/registries"
AGENT = "reg-agent"  # the ServiceAccount the operator makes for Registry "reg"


class Agents:
    """Each pod's token (by pod name), minted when the workload starts the pod."""

    def __init__(self, api: KubeApiServer, namespace: str):
        self.api, self.namespace, self.tokens = api, namespace, {}
        self.user = service_account_user(namespace, AGENT)

    def kubeconfig(self, pod_name: str):
        token = self.tokens[pod_name] = self.api.service_account_token(self.namespace, AGENT)
        return self.api.kubeconfig_for(token, name=f"{self.namespace}-{pod_name}")

    def requests(self, pod_name: str) -> list[dict]:
        mine = [token_id(self.tokens[pod_name])]
        return [e for e in self.api.audit(self.user)
                if (e["user"].get("extra") or {}).get("authentication.kubernetes.io/credential-id") == mine]


def records(api: KubeApiServer, namespace: str) -> dict:
    return ((api.get(REGISTRIES, namespace, "reg") or {}).get("status") or {}).get("agents") or {}


def refused(api: KubeApiServer, namespace: str) -> list[tuple[str, str, str]]:
    users = (OPERATOR_USER, service_account_user(namespace, AGENT))
    return sorted({(e["user"]["username"], e["verb"], e["requestURI"].split("?")[0]) for e in api.audit()
                   if forbidden(e) and e["user"]["username"] in users})


def applied(pod, record: dict, generation: int, level: str) -> bool:
    try:
        config = (pod.config_dir / "config.yml").read_bytes()
    except OSError:
        return False
    return (f"level: {level}".encode() in config and record.get("observedGeneration") == generation
            and record.get("configHash") == hashlib.sha256(config).hexdigest() and not record.get("error"))


@pytest.fixture
def operator(kube_apiserver, apiserver_namespace, tmp_path):
    process, _ = start_operator(kube_apiserver, "operator", tmp_path, [apiserver_namespace])
    yield process
    assert process.stop() == 0, process.log()[-3000:]
    assert refused(kube_apiserver, apiserver_namespace) == [], "RBAC refused the operator or an agent"


def test_two_replicas_report_status_post_events_and_take_turns(kube_apiserver, apiserver_namespace, tmp_path,
                                                                operator) -> None:
    api, ns = kube_apiserver, apiserver_namespace
    port = free_port()
    create_shared_claim(api, namespace=ns)
    api.create(registry_object({**filesystem_spec(port), "replicas": 2}, namespace=ns))
    agents = Agents(api, ns)
    with RegistryWorkload(tmp_path / "pods", api, port=port, namespace=ns, kubeconfig=agents.kubeconfig,
                          api_secrets=True) as workload:
        ready_at_generation(api, 1, namespace=ns, workload=workload)
        api.patch(REGISTRIES, ns, "reg", {"spec": {"config": {"log": {"level": "debug"}}}})
        ready_at_generation(api, 2, namespace=ns, workload=workload)
        pods = workload.running()
        assert len(pods) == 2 and set(records(api, ns)) == set(pods)
        assert all(applied(pod, records(api, ns)[name], 2, "debug") for name, pod in pods.items())
        assert all(count >= 1 for count in workload.restarts().values()), workload.restarts()
        for name in pods:
            requests = agents.requests(name)
            # Its turn: its own token updated the reload Lease (guarded by resourceVersion: a stale update is
            # the server's 409).
            assert any(e["verb"] == "update" and e["objectRef"].get("name") == "reg-reload"
                       and e["responseStatus"]["code"] == 200 for e in requests), name
            # Its mounted Secret read and watched over the API, by name.
            assert {e["verb"] for e in requests if e["objectRef"].get("resource") == "secrets"
                    and e["responseStatus"]["code"] == 200
                    and "fieldSelector=metadata.name%3Dreg-http-secret" in e["requestURI"]} >= {"list", "watch"}
            # Its Events, on the Registry.
            assert any(e["verb"] == "create" and e["objectRef"].get("resource") == "events"
                       and e["responseStatus"]["code"] == 201 for e in requests), name
    events = [e for e in api.list("v1/events", ns) if (e.get("source") or {}).get("component") == "berth-agent"]
    assert events and all(e["involvedObject"]["name"] == "reg" for e in events), events


def test_a_gc_request_is_acknowledged_run_and_recorded(kube_apiserver, apiserver_namespace, tmp_path,
                                                       operator) -> None:
    """A run asked for with the annotation: the operator writes the request, the agent turns read-only and
    acknowledges it, takes the GC Lease, runs the command (held at its start until the test saw the
    acknowledgement), and records lastRun; the operator clears the request."""
    api, ns = kube_apiserver, apiserver_namespace
    port = free_port()
    create_shared_claim(api, namespace=ns)
    api.create(registry_object(filesystem_spec(port, garbageCollection={"dryRun": True, "readOnlyTimeout": "10m"}),
                               namespace=ns))
    gated = GatedRegistry(tmp_path / "gated", REGISTRY_BIN)
    agents = Agents(api, ns)
    try:
        with RegistryWorkload(tmp_path / "pods", api, port=port, namespace=ns, kubeconfig=agents.kubeconfig,
                              binary=str(gated.path)) as workload:
            ready_at_generation(api, 1, namespace=ns, workload=workload)
            [(name, pod)] = workload.running().items()
            # Something to collect (on empty storage the agent records a run without starting the command).
            push_image(make_oci_image(tmp_path / "image"), pod.host, "demo/app:a")
            gated.hold()
            api.patch(REGISTRIES, ns, "reg", {"metadata": {"annotations": {
                GC_REQUEST_ANNOTATION: "2026-12-01T00:00:00Z"}}})
            request = wait_for(lambda: gc_status(api, "reg", ns).get("request"),
                               "the operator's request", 60, interval=0.1)
            wait_for(gated.invocations, lambda: f"the command to start (after every acknowledgement); "
                     f"status {gc_status(api, 'reg', ns)}\n{pod.agent_log_text()[-4000:]}", 60, interval=0.1)
            assert "--dry-run" in gated.invocations()[0][2]
            assert records(api, ns)[name].get("readOnlyFor") == request["id"], records(api, ns)
            assert gc_status(api, "reg", ns).get("active"), gc_status(api, "reg", ns)
            gated.release()
            last = wait_last_run(api, request["id"], "reg", ns, context=pod.agent_log_text)
            assert last.get("runner") == name and last.get("result") == "Succeeded", last
            wait_for(lambda: not gc_status(api, "reg", ns).get("request"), "the request cleared", 60, interval=0.1)
            wait_for(lambda: "readOnlyFor" not in records(api, ns)[name],
                     "the acknowledgement cleared", 60, interval=0.1)
    finally:
        gated.release()
    reasons = {e["reason"] for e in api.list("v1/events", ns)}
    assert "GarbageCollectionStarted" in reasons, reasons
