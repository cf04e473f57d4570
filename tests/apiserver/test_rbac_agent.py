"""The agent's ServiceAccount token, on the real API server, can do exactly what docs/design.md §4.8 says and nothing
else: get/list/watch its own Registry (by name: list and watch with fieldSelector metadata.name), patch its
status, get/list/watch the Secrets its pod mounts (each by name, the same way), get and update its Registry's
reload and GC Leases, create and patch Events.

The ServiceAccount, Role, RoleBinding and Leases are the operator's builders' (support.clusters.apiserver_identities),
the token a real one from the TokenRequest API. Remove a rule from builders/role.py and an "allowed" case
here fails with 403; widen one and the rules review at the end fails.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from berth_operator.builders import ClusterFacts
from support.clusters.apiserver import REPO, ApiError, KubeApiServer, api_path
from support.clusters.apiserver_identities import agent_token
from support.clusters.operator_harness import AGENT_IMAGE

REGISTRIES = "berth.dev/v1alpha1/registries"
SECRETS = "v1/secrets"
LEASES = "coordination.k8s.io/v1/leases"
# The full example, serving TLS too, on an existing BucketAccess: every kind of Secret a pod mounts.
BUCKET_ACCESS_SECRET = "access-credentials"
MOUNTED = ["access-credentials", "registry-htpasswd", "registry-http-secret", "registry-redis", "registry-tls"]
UNMOUNTED = "registry-unmounted"


class Agent:
    def __init__(self, server: KubeApiServer, namespace: str, token: str, elsewhere: str, created: dict[str, Any]):
        self.server, self.namespace, self.token, self.elsewhere = server, namespace, token, elsewhere
        self.created = created  # its Registry as first stored

    def __call__(self, method: str, path: str, name: str | None = None, *, subresource: str | None = None,
                 namespace: str | None = None, body: Any = None, content_type: str = "application/json",
                 **query: Any) -> dict[str, Any]:
        target = api_path(path, namespace or self.namespace, name, subresource)
        return self.server.request(method, target, body, token=self.token, content_type=content_type,
                                   query=query or None)


def registry_document(namespace: str, name: str = "registry") -> dict[str, Any]:
    reg = yaml.safe_load((REPO / "examples" / "full.yaml").read_text())
    reg["metadata"] = {"name": name, "namespace": namespace}
    reg["spec"]["http"]["tls"] = {"secretName": "registry-tls"}
    return reg


def secret(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {"k": "dmFsdWU="}}


@pytest.fixture(scope="module")
def agent(kube_apiserver: KubeApiServer) -> Agent:
    """A Registry with its Secrets and the agent's objects in a namespace of its own; a neighbour Registry, and
    a Registry of the same name in another namespace."""
    namespace, elsewhere = f"rbac-{secrets.token_hex(3)}", f"rbac-other-{secrets.token_hex(3)}"
    server = kube_apiserver
    for ns in (namespace, elsewhere):
        server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for name in (*MOUNTED, UNMOUNTED):
            server.create(secret(ns, name))
    created = server.create(registry_document(namespace))
    server.create(registry_document(namespace, "neighbour"))
    server.create(registry_document(elsewhere))
    facts = ClusterFacts(agent_image=AGENT_IMAGE, bucket_access_secret=BUCKET_ACCESS_SECRET)
    token = agent_token(server, created, facts)
    for name in ("neighbour-reload", "neighbour-gc"):
        server.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": name, "namespace": namespace}, "spec": {}})
    return Agent(server, namespace, token, elsewhere, created)


def by_name(name: str) -> dict[str, str]:
    return {"fieldSelector": f"metadata.name={name}"}


def watch(name: str | None = None) -> dict[str, Any]:
    return {"watch": "true", "timeoutSeconds": "1", "allowWatchBookmarks": "true", **(by_name(name) if name else {})}


def update_lease(agent: Agent, name: str) -> dict[str, Any]:
    lease = agent("GET", LEASES, name)
    lease["spec"] = {"holderIdentity": "pod-0", "leaseDurationSeconds": 10}
    return agent("PUT", LEASES, name, body=lease)


def core_event(agent: Agent) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": "registry-", "namespace": agent.namespace},
            "involvedObject": {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "name": "registry",
                               "namespace": agent.namespace}, "reason": "Test", "message": "m", "type": "Normal",
            "source": {"component": "berth-agent"}}


def create_then_patch_event(agent: Agent) -> dict[str, Any]:
    created = agent("POST", "v1/events", body=core_event(agent))
    return agent("PATCH", "v1/events", created["metadata"]["name"], body={"count": 2},
                 content_type="application/merge-patch+json")


def new_style_event(agent: Agent) -> dict[str, Any]:
    return agent("POST", "events.k8s.io/v1/events", body={
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"generateName": "registry-", "namespace": agent.namespace},
        "eventTime": "2026-12-01T10:00:00.000000Z", "reportingController": "berth.dev/agent",
        "reportingInstance": "pod-0", "action": "Reload", "reason": "Test", "type": "Normal",
        "regarding": {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "name": "registry",
                      "namespace": agent.namespace}})


STATUS_PATCH = {"status": {"agents": {"pod-0": {"configHash": "h"}}}}
MERGE = "application/merge-patch+json"

ALLOWED: list[tuple[str, Callable[[Agent], Any]]] = [
    ("get its Registry", lambda a: a("GET", REGISTRIES, "registry")),
    ("list its Registry by name", lambda a: a("GET", REGISTRIES, **by_name("registry"))),
    ("watch its Registry by name", lambda a: a("GET", REGISTRIES, **watch("registry"))),
    ("patch its status", lambda a: a("PATCH", REGISTRIES, "registry", subresource="status", body=STATUS_PATCH,
                                     content_type=MERGE)),
    *[(f"{verb} mounted Secret {name}", fn) for name in MOUNTED for verb, fn in (
        ("get", lambda a, name=name: a("GET", SECRETS, name)),
        ("list", lambda a, name=name: a("GET", SECRETS, **by_name(name))),
        ("watch", lambda a, name=name: a("GET", SECRETS, **watch(name))))],
    ("get its reload Lease", lambda a: a("GET", LEASES, "registry-reload")),
    ("update its reload Lease", lambda a: update_lease(a, "registry-reload")),
    ("get its GC Lease", lambda a: a("GET", LEASES, "registry-gc")),
    ("update its GC Lease", lambda a: update_lease(a, "registry-gc")),
    ("create and patch an Event", create_then_patch_event),
    ("create an events.k8s.io Event", new_style_event),
]

FORBIDDEN: list[tuple[str, Callable[[Agent], Any]]] = [
    ("list every Registry", lambda a: a("GET", REGISTRIES)),
    ("watch every Registry", lambda a: a("GET", REGISTRIES, **watch())),
    ("get the neighbour Registry", lambda a: a("GET", REGISTRIES, "neighbour")),
    ("list the neighbour by name", lambda a: a("GET", REGISTRIES, **by_name("neighbour"))),
    ("patch its own spec", lambda a: a("PATCH", REGISTRIES, "registry", body={"spec": {"replicas": 3}},
                                       content_type=MERGE)),
    ("patch the neighbour's status", lambda a: a("PATCH", REGISTRIES, "neighbour", subresource="status",
                                                 body=STATUS_PATCH, content_type=MERGE)),
    ("delete its Registry", lambda a: a("DELETE", REGISTRIES, "registry")),
    ("create a Registry", lambda a: a("POST", REGISTRIES, body=registry_document(a.namespace, "new"))),
    ("get its Registry in another namespace", lambda a: a("GET", REGISTRIES, "registry", namespace=a.elsewhere)),
    ("get a mounted Secret's namesake in another namespace",
     lambda a: a("GET", SECRETS, "registry-htpasswd", namespace=a.elsewhere)),
    ("get an unmounted Secret", lambda a: a("GET", SECRETS, UNMOUNTED)),
    ("list an unmounted Secret by name", lambda a: a("GET", SECRETS, **by_name(UNMOUNTED))),
    ("watch an unmounted Secret by name", lambda a: a("GET", SECRETS, **watch(UNMOUNTED))),
    ("list every Secret", lambda a: a("GET", SECRETS)),
    ("watch every Secret", lambda a: a("GET", SECRETS, **watch())),
    ("create a Secret", lambda a: a("POST", SECRETS, body=secret(a.namespace, "planted"))),
    ("patch a mounted Secret", lambda a: a("PATCH", SECRETS, "registry-htpasswd", body={"data": {"k": ""}},
                                           content_type=MERGE)),
    ("delete a mounted Secret", lambda a: a("DELETE", SECRETS, "registry-htpasswd")),
    ("list Leases", lambda a: a("GET", LEASES)),
    ("create a Lease", lambda a: a("POST", LEASES, body={"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                                          "metadata": {"name": "x", "namespace": a.namespace}})),
    ("patch its reload Lease", lambda a: a("PATCH", LEASES, "registry-reload", body={"spec": {}},
                                           content_type=MERGE)),
    ("delete its reload Lease", lambda a: a("DELETE", LEASES, "registry-reload")),
    ("get the neighbour's reload Lease", lambda a: a("GET", LEASES, "neighbour-reload")),
    ("update the neighbour's GC Lease", lambda a: a("PUT", LEASES, "neighbour-gc", body={
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "neighbour-gc", "namespace": a.namespace}, "spec": {}})),
    ("list Events", lambda a: a("GET", "v1/events")),
    ("list Pods", lambda a: a("GET", "v1/pods")),
    ("get its Deployment", lambda a: a("GET", "apps/v1/deployments", "registry")),
    ("list ConfigMaps", lambda a: a("GET", "v1/configmaps")),
    ("get its ServiceAccount", lambda a: a("GET", "v1/serviceaccounts", "registry-agent")),
    ("get its Role", lambda a: a("GET", "rbac.authorization.k8s.io/v1/roles", "registry-agent")),
]


# Token auth: trust from a ConfigMap (the bundle) and a Secret (the JWKS); the Role names exactly them.
CONFIG_MAPS = "v1/configmaps"
TRUST = "issuer-trust"  # the ConfigMap the bundle comes from
JWKS_SECRET = "issuer-jwks"


def config_map(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {"ca.pem": "-----BEGIN CERTIFICATE-----"}}


@pytest.fixture(scope="module")
def token_agent(kube_apiserver: KubeApiServer) -> Agent:
    namespace = f"rbac-token-{secrets.token_hex(3)}"
    server = kube_apiserver
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for name in (TRUST, "other-trust"):
        server.create(config_map(namespace, name))
    for name in (JWKS_SECRET, "registry-http-secret", UNMOUNTED):
        server.create(secret(namespace, name))
    created = server.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                             "metadata": {"name": "registry", "namespace": namespace},
                             "spec": {"config": {"storage": {"inmemory": {}, "auth": {"token": {
                                 "realm": "https://auth.example.com/token", "service": "registry",
                                 "issuer": "auth.example.com",
                                 "rootCertBundle": {"configMap": {"name": TRUST, "field": "ca.pem"}},
                                 "jwks": {"secret": {"name": JWKS_SECRET, "field": "jwks.json"}}}}}}}})
    token = agent_token(server, created, ClusterFacts(agent_image=AGENT_IMAGE))
    return Agent(server, namespace, token, namespace, created)


TOKEN_ALLOWED: list[tuple[str, Callable[[Agent], Any]]] = [
    *[(f"{verb} {path} {name}", fn) for path, name in ((CONFIG_MAPS, TRUST), (SECRETS, JWKS_SECRET))
      for verb, fn in (("get", lambda a, path=path, name=name: a("GET", path, name)),
                       ("list", lambda a, path=path, name=name: a("GET", path, **by_name(name))),
                       ("watch", lambda a, path=path, name=name: a("GET", path, **watch(name))))],
]
TOKEN_FORBIDDEN: list[tuple[str, Callable[[Agent], Any]]] = [
    ("get another ConfigMap", lambda a: a("GET", CONFIG_MAPS, "other-trust")),
    ("watch another ConfigMap by name", lambda a: a("GET", CONFIG_MAPS, **watch("other-trust"))),
    ("list every ConfigMap", lambda a: a("GET", CONFIG_MAPS)),
    ("patch the trust ConfigMap", lambda a: a("PATCH", CONFIG_MAPS, TRUST, body={"data": {"ca.pem": ""}},
                                              content_type=MERGE)),
    ("get an unmounted Secret", lambda a: a("GET", SECRETS, UNMOUNTED)),
]


def cases(*groups: tuple[str, list]) -> list:
    """(fixture, action) params over each agent's table: `agent` (the full example) and `token_agent`."""
    return [pytest.param(fixture, action, id=f"{fixture}: {name}") for fixture, table in groups
            for name, action in table]


@pytest.mark.parametrize(("who", "action"), cases(("agent", ALLOWED), ("token_agent", TOKEN_ALLOWED)))
def test_the_agent_may(request, who: str, action) -> None:
    answer = action(request.getfixturevalue(who))  # an ApiError (403: the Role lacks the rule) fails the test
    assert answer.get("kind") or answer.get("events"), answer  # an object or a list, or what the watch saw


@pytest.mark.parametrize(("who", "action"), cases(("agent", FORBIDDEN), ("token_agent", TOKEN_FORBIDDEN)))
def test_the_agent_may_not(request, who: str, action) -> None:
    with pytest.raises(ApiError) as refused:
        action(request.getfixturevalue(who))
    assert refused.value.status == 403, refused.value


def test_the_watch_by_name_delivers_its_object(agent: Agent) -> None:
    """list/watch allowed by resourceNames do reach the object, not just pass authorization
    (docs/upstream.md#k8s-rbac-resource-names)."""
    listing = agent("GET", SECRETS, **by_name("registry-tls"))
    assert [item["metadata"]["name"] for item in listing["items"]] == ["registry-tls"]
    events = agent("GET", REGISTRIES, **watch("registry"))["events"]
    assert [e["object"]["metadata"]["name"] for e in events if e["type"] == "ADDED"] == ["registry"]


def granted_rules(agent: Agent) -> set[tuple[str, str, str, str]]:
    """(group, resource, verb, name) the server says the token may do in its namespace (name `*`: any)."""
    review = agent.server.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": agent.namespace}}, token=agent.token)
    return {(group, resource, verb, name) for rule in review["status"]["resourceRules"]
            for group in rule.get("apiGroups", [])
            for resource in rule.get("resources", [])
            for verb in rule["verbs"]
            for name in rule.get("resourceNames") or ["*"]}


def test_nothing_else_is_granted(agent: Agent) -> None:
    """The server's own account of the token's rules in its namespace: the design's rules, plus what every
    authenticated user may do (the self reviews)."""
    granted = granted_rules(agent)
    everyone = {("authorization.k8s.io", r, "create", "*") for r in ("selfsubjectaccessreviews",
                                                                      "selfsubjectrulesreviews")}
    everyone.add(("authentication.k8s.io", "selfsubjectreviews", "create", "*"))
    expected = {("berth.dev", "registries", verb, "registry") for verb in ("get", "list", "watch")}
    expected.add(("berth.dev", "registries/status", "patch", "registry"))
    expected |= {(group, "events", verb, "*") for group in ("", "events.k8s.io") for verb in ("create", "patch")}
    expected |= {("coordination.k8s.io", "leases", verb, lease) for verb in ("get", "update")
                 for lease in ("registry-reload", "registry-gc")}
    expected |= {("", "secrets", verb, name) for verb in ("get", "list", "watch") for name in MOUNTED}
    assert granted - everyone == expected


def test_the_registry_is_unchanged_by_the_refusals(agent: Agent) -> None:
    """Control for the refused writes: the spec patch and the deletes really did nothing."""
    stored = agent.server.get(REGISTRIES, agent.namespace, "registry")
    assert stored is not None and stored["spec"]["replicas"] == agent.created["spec"]["replicas"]
    assert agent.server.get(SECRETS, agent.namespace, "registry-htpasswd")["data"] == {"k": "dmFsdWU="}



def test_the_token_agent_reads_exactly_its_trust(token_agent: Agent) -> None:
    granted = {(resource, verb, name) for _group, resource, verb, name in granted_rules(token_agent)
               if resource in ("configmaps", "secrets")}
    assert granted == {(resource, verb, name) for resource, name in (("configmaps", TRUST), ("secrets", JWKS_SECRET),
                                                                      ("secrets", "registry-http-secret"))
                       for verb in ("get", "list", "watch")}
    listing = token_agent("GET", CONFIG_MAPS, **by_name(TRUST))
    assert [item["metadata"]["name"] for item in listing["items"]] == [TRUST]
