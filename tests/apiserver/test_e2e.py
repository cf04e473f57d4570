"""berth-operator and the agents as processes on the real API server, each with its own real token: the
end-to-end scenarios that need no kubelet (status, Events, reload Lease turns, GC requests and acks).

The operator (deploy/'s RBAC) makes the Registry's objects; each agent runs with a token of the ServiceAccount
the operator made (the TokenRequest API, as the kubelet asks for a pod's projected token), so only the Role the
operator built authorizes it. The registry pods are this machine's (support.pod: agent + supervise.sh +
docker-registry); the Pod objects exist too, with the Deployment's selector labels, so the operator's pod list
finds them as it would find real pods, and the test plays the Deployment controller's status. Every request of
every process must pass RBAC (the audit log says so).
"""

from __future__ import annotations

import hashlib

import pytest

from support.apiserver import KubeApiServer, forbidden, token_id
from support.apiserver_identities import OPERATOR_USER, start_operator
from support.gc import GatedRegistry, gc_status, wait_last_run, wait_until
from support.operator_harness import reconciled, wait_for
from support.pod import filesystem_spec, registry_object
from support.ports import free_port
from support.registry import make_oci_image, push_image
from support.replicas import running_replicas
from support.supervisor import REGISTRY_BIN

from berth_api import GC_REQUEST_ANNOTATION

REGISTRIES = "berth.dev/v1alpha1/registries"
AGENT = "reg-agent"  # the ServiceAccount the operator makes for Registry "reg"


def agent_user(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{AGENT}"


class Cluster:
    def __init__(self, api: KubeApiServer, namespace: str, root):
        self.api, self.namespace, self.root = api, namespace, root

    def claim(self, name: str = "data") -> None:
        """A bound ReadWriteMany claim (filesystem_spec names it): replicas share it."""
        self.api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {"name": name, "namespace": self.namespace},
                         "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
        self.api.patch("v1/persistentvolumeclaims", self.namespace, name, {"status": {"phase": "Bound"}},
                       subresource="status")

    def pods(self, names: list[str]) -> dict:
        """Pod objects for the agents (what a Deployment's pods would be), once the operator made the
        Deployment and the agent's ServiceAccount; returns a kubeconfig with its own token for each."""
        deployment = wait_for(lambda: self.api.get("apps/v1/deployments", self.namespace, "reg"), "the Deployment", 60)
        wait_for(lambda: self.api.get("v1/serviceaccounts", self.namespace, AGENT), "the agent ServiceAccount", 60)
        labels = deployment["spec"]["selector"]["matchLabels"]
        kubeconfigs = {}
        for name in names:
            self.api.create({"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
                             "spec": {"serviceAccountName": AGENT, "automountServiceAccountToken": False,
                                      "containers": [{"name": "registry", "image": "registry:2"}]}})
            token = self.api.service_account_token(self.namespace, AGENT)
            kubeconfigs[name] = self.api.kubeconfig_for(token, name=f"{self.namespace}-{name}")
            self.tokens[name] = token
        return kubeconfigs

    tokens: dict

    def api_secret_args(self) -> list[str]:
        """The `--api-secret DIR=SECRET` arguments the operator gave the agent container (each mounted Secret,
        also watched over the API with the agent's token)."""
        deployment = self.api.get("apps/v1/deployments", self.namespace, "reg")
        [agent] = deployment["spec"]["template"]["spec"]["initContainers"]
        args = agent["args"]
        return [word for index, word in enumerate(args) if word == "--api-secret"
                or (index and args[index - 1] == "--api-secret")]

    def deployment_ready(self, replicas: int) -> None:
        """The Deployment controller's part: every replica updated and ready."""
        deployment = self.api.get("apps/v1/deployments", self.namespace, "reg")
        self.api.patch("apps/v1/deployments", self.namespace, "reg", {"status": {
            "observedGeneration": deployment["metadata"]["generation"], "replicas": replicas,
            "updatedReplicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}},
            subresource="status")

    def registry(self) -> dict:
        return self.api.get(REGISTRIES, self.namespace, "reg") or {}

    def records(self) -> dict:
        return (self.registry().get("status") or {}).get("agents") or {}

    def condition(self, ctype: str) -> tuple[str, str] | None:
        found = [(c["status"], c["reason"]) for c in (self.registry().get("status") or {}).get("conditions") or ()
                 if c["type"] == ctype]
        return found[0] if found else None

    def refused(self) -> list[tuple[str, str, str]]:
        return sorted({(e["user"]["username"], e["verb"], e["requestURI"].split("?")[0]) for e in self.api.audit()
                       if forbidden(e) and e["user"]["username"] in (OPERATOR_USER, agent_user(self.namespace))})


@pytest.fixture
def cluster(kube_apiserver, apiserver_namespace, tmp_path) -> Cluster:
    made = Cluster(kube_apiserver, apiserver_namespace, tmp_path)
    made.tokens = {}
    return made


def applied(pod, record: dict, generation: int, level: str) -> bool:
    try:
        config = (pod.config_dir / "config.yml").read_bytes()
    except OSError:
        return False
    return (f"level: {level}".encode() in config and record.get("observedGeneration") == generation
            and record.get("configHash") == hashlib.sha256(config).hexdigest() and not record.get("error"))


def test_two_replicas_report_status_post_events_and_take_turns(cluster: Cluster) -> None:
    api, ns = cluster.api, cluster.namespace
    spec = filesystem_spec(free_port())
    cluster.claim()
    api.create(registry_object({**spec, "replicas": 2}, namespace=ns))
    operator, _ = start_operator(api, "operator", cluster.root, [ns])
    try:
        kubeconfigs = cluster.pods(["pod-a", "pod-b"])
        api_secrets = cluster.api_secret_args()
        assert api_secrets == ["--api-secret", "http-secret=reg-http-secret"], api_secrets
        with running_replicas(cluster.root / "pods", api, spec, count=2, namespace=ns, extra=api_secrets,
                              kubeconfigs=kubeconfigs) as pods:
            wait_for(lambda: all(applied(pods[n], cluster.records().get(n) or {}, 1, "info") for n in pods),
                     "both agents to report generation 1", 60)
            cluster.deployment_ready(2)
            wait_for(lambda: cluster.condition("Ready") == ("True", "Available"), "Ready", 60)

            api.patch(REGISTRIES, ns, "reg", {"spec": {"config": {"log": {"level": "debug"}}}})
            wait_for(lambda: all(applied(pods[n], cluster.records().get(n) or {}, 2, "debug") for n in pods),
                     "both agents to apply generation 2", 60)
            wait_for(lambda: (reg := reconciled(api, ns, "reg")) and reg["status"]["observedGeneration"] == 2
                     and cluster.condition("Ready") == ("True", "Available"), "generation 2 Ready", 60)
            # Each took its turn: each pod's own token updated the reload Lease (the update is guarded by
            # resourceVersion; a stale one is the server's 409), and the Lease is free again.
            turns = {pod: [e["responseStatus"]["code"] for e in api.audit(agent_user(ns))
                           if (e.get("objectRef") or {}).get("name") == "reg-reload" and e["verb"] == "update"
                           and (e["user"].get("extra") or {}).get("authentication.kubernetes.io/credential-id")
                           == [token_id(token)]] for pod, token in cluster.tokens.items()}
            assert all(200 in codes for codes in turns.values()), turns
            for pod in pods.values():
                assert pod.registry_starts() >= 2, pod.agent_log_text()[-2000:]
            # Each agent read and watched its mounted Secret over the API, by name, with its own token.
            for token in cluster.tokens.values():
                verbs = {e["verb"] for e in api.audit(agent_user(ns))
                         if (e.get("objectRef") or {}).get("resource") == "secrets"
                         and e["responseStatus"]["code"] == 200
                         and "fieldSelector=metadata.name%3Dreg-http-secret" in e["requestURI"]
                         and (e["user"].get("extra") or {}).get("authentication.kubernetes.io/credential-id")
                         == [token_id(token)]}
                assert verbs >= {"list", "watch"}, verbs
        # The agents' Events are on the Registry, posted with their own tokens.
        events = [e for e in api.list("v1/events", ns) if (e.get("source") or {}).get("component") == "berth-agent"
                  or e.get("reportingComponent") == "berth-agent"]
        assert events and all(e["involvedObject"]["name"] == "reg" for e in events), events
        assert any(e["verb"] == "create" and (e.get("objectRef") or {}).get("resource") == "events"
                   and e["responseStatus"]["code"] == 201 for e in api.audit(agent_user(ns)))
    finally:
        assert operator.stop() == 0, operator.log()[-3000:]
    assert cluster.refused() == [], "RBAC refused the operator or an agent"


def test_a_gc_request_is_acknowledged_run_and_recorded(cluster: Cluster) -> None:
    """A run asked for with the annotation: the operator writes the request, the agent turns read-only and
    acknowledges it, takes the GC Lease, runs the command (held at its start until the test saw the
    acknowledgement), and records lastRun; the operator clears the request."""
    api, ns = cluster.api, cluster.namespace
    spec = filesystem_spec(free_port(), garbageCollection={"dryRun": True, "readOnlyTimeout": "10m"})
    cluster.claim()
    api.create(registry_object(spec, namespace=ns))
    gated = GatedRegistry(cluster.root / "gated", REGISTRY_BIN)
    operator, _ = start_operator(api, "operator", cluster.root, [ns])
    try:
        kubeconfigs = cluster.pods(["pod-a"])
        with running_replicas(cluster.root / "pods", api, spec, count=1, namespace=ns, kubeconfigs=kubeconfigs,
                              binary=str(gated.path)) as pods:
            cluster.deployment_ready(1)
            wait_for(lambda: (cluster.records().get("pod-a") or {}).get("observedGeneration") == 1,
                     "the agent's record", 60)
            # Something to collect (on empty storage the agent records a run without starting the command).
            push_image(make_oci_image(cluster.root / "image"), pods["pod-a"].host, "demo/app:a")
            gated.hold()
            api.patch(REGISTRIES, ns, "reg", {"metadata": {"annotations": {
                GC_REQUEST_ANNOTATION: "2026-12-01T00:00:00Z"}}})
            request = wait_for(lambda: gc_status(api, "reg", ns).get("request"), "the operator's request", 60)
            wait_until(gated.invocations, 60, lambda: f"the command to start (after every acknowledgement); status "
                       f"{cluster.registry().get('status')}\n{pods['pod-a'].agent_log_text()[-4000:]}")
            assert "--dry-run" in gated.invocations()[0][2]
            assert cluster.records()["pod-a"].get("readOnlyFor") == request["id"], cluster.records()
            assert gc_status(api, "reg", ns).get("active"), gc_status(api, "reg", ns)
            gated.release()
            last = wait_last_run(api, request["id"], "reg", ns, context=pods["pod-a"].agent_log_text)
            assert last.get("runner") == "pod-a" and last.get("result") in ("Succeeded", "DryRun"), last
            wait_for(lambda: not gc_status(api, "reg", ns).get("request"), "the request cleared", 60)
            wait_for(lambda: "readOnlyFor" not in cluster.records()["pod-a"], "the acknowledgement cleared", 60)
    finally:
        gated.release()
        assert operator.stop() == 0, operator.log()[-3000:]
    reasons = {e["reason"] for e in api.list("v1/events", ns)}
    assert "GarbageCollectionStarted" in reasons, reasons
    assert cluster.refused() == [], "RBAC refused the operator or an agent"
