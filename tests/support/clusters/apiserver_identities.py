"""Who talks to the real API server (support.clusters.apiserver) in tests, with the permissions the product gives them:

- an agent: its ServiceAccount, Role and RoleBinding exactly as the operator's builders make them, the Registry's
  two Leases, and a real token from the TokenRequest API;
- the operator: deploy/'s ServiceAccount, ClusterRole, ClusterRoleBinding and leader-election Role (read from the
  files, so a rule removed there is removed here), and a token of that ServiceAccount.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth_api import Registry
from berth_operator.builders import ClusterFacts, lease, role, role_binding, service_account
from berth_operator.builders.meta import namespace as namespace_of
from support.clusters.apiserver import (
    REPO,
    ApiError,
    KubeApiServer,
    forbidden,
    service_account_user,
    skip_reason,
    token_id,
)
from support.clusters.operator_harness import AGENT_IMAGE, OperatorProcess, wait_for

OPERATOR_NAMESPACE = "berth-system"
OPERATOR_SA = "berth-operator"
OPERATOR_USER = service_account_user(OPERATOR_NAMESPACE, OPERATOR_SA)
DEPLOY_RBAC = ("base/namespace.yaml", "base/serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml",
               "base/leader-election-role.yaml", "base/flowschema.yaml")


def agent_objects(registry: Mapping[str, Any], facts: ClusterFacts | None = None) -> list[dict[str, Any]]:
    """What the operator creates for a Registry's agents to authenticate and take turns: SA, Role, RoleBinding,
    the reload and GC Leases (builders; `registry` as stored, with its uid)."""
    reg = Registry.model_validate(dict(registry))
    facts = facts or ClusterFacts(agent_image=AGENT_IMAGE)
    return [build(reg, facts) for build in (service_account.build, role.build, role_binding.build,
                                            lease.build, lease.build_gc)]


def agent_token(server: KubeApiServer, registry: Mapping[str, Any], facts: ClusterFacts | None = None) -> str:
    """Create the agent's objects (agent_objects) and return a token of its ServiceAccount."""
    for obj in agent_objects(registry, facts):
        server.create(obj)
    reg = Registry.model_validate(dict(registry))
    return server.service_account_token(namespace_of(reg), service_account.name(reg))


def install_operator_rbac(server: KubeApiServer) -> None:
    """deploy/'s RBAC objects, once per server (they are cluster-wide and the same for every test)."""
    if getattr(server, "_operator_rbac", False):
        return
    for filename in DEPLOY_RBAC:
        for doc in yaml.safe_load_all((REPO / "deploy" / filename).read_text()):
            if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "FlowSchema"):
                doc["metadata"]["namespace"] = OPERATOR_NAMESPACE  # kustomize sets it in deploy/
            try:
                server.create(doc)
            except ApiError as error:
                if error.status != 409:  # a crashed earlier session-mate made it: the same file
                    raise
    server._operator_rbac = True


def operator_token(server: KubeApiServer) -> str:
    """A token of the operator's ServiceAccount with deploy/'s RBAC (a new token each call, as each replica has)."""
    install_operator_rbac(server)
    return server.service_account_token(OPERATOR_NAMESPACE, OPERATOR_SA)


def start_operator(server: KubeApiServer, name: str, log_dir: Any, namespaces: list[str] | None,
                   **lease: Any) -> tuple[OperatorProcess, str]:
    """`berth-operator` as pod `name`, with a token of its own (returned too: the audit log names it by
    token_id). Its leader Lease is named after the first namespace, so the worker's tests never share one."""
    token = operator_token(server)
    lease = {"name": f"berth-operator-{namespaces[0] if namespaces else 'cluster'}", **lease}
    process = OperatorProcess(server, name, log_dir, namespaces=namespaces, lease=lease,
                              kubeconfig=server.kubeconfig_for(token))
    return process.start(), token


@contextlib.contextmanager
def operator_on_own_server(log_dir: Path, namespaces: list[str] | None, create_namespaces: tuple[str, ...] = (),
                           ) -> Iterator[tuple[KubeApiServer, OperatorProcess, str]]:
    """A kube-apiserver of the caller's own (bare: the worker's shared one gets CRDs installed by other tests) and
    berth-operator on it as deploy/ runs it (start_operator), once it leads: (server, operator, its token). At the
    end the operator is stopped, and after a body that passed its stop must be clean: exit 0, no traceback."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with KubeApiServer() as api:
        for namespace in create_namespaces:
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        operator, token = start_operator(api, "berth-operator-0", log_dir, namespaces)
        try:
            try:
                wait_for(lambda: (health := operator.health()) is not None and health[0] == 200, "operator leading",
                         60)
            except AssertionError as error:
                raise AssertionError(f"{error}\n{operator.log()[-3000:]}") from None
            yield api, operator, token
        except BaseException:
            operator.stop()
            raise
        code = operator.stop()
        assert code == 0, operator.log()[-3000:]
        assert "Traceback" not in operator.log(), operator.log()[-3000:]


def refused_requests(server: KubeApiServer, token: str) -> list[dict[str, Any]]:
    """The audit log's requests RBAC refused to the operator holding `token` (start_operator's), not to another
    operator of the same ServiceAccount on this server."""
    mine = token_id(token)
    return [e for e in server.audit(OPERATOR_USER) if forbidden(e)
            and (e["user"].get("extra") or {}).get("authentication.kubernetes.io/credential-id") == [mine]]


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every combination the rules name."""
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def cluster_role_grants() -> set[tuple[str, str, str]]:
    return grants(yaml.safe_load((REPO / "deploy" / "clusterrole.yaml").read_text())["rules"])


def leader_role_grants() -> set[tuple[str, str, str]]:
    """The namespaced Role for the leader Lease: it holds in OPERATOR_NAMESPACE only."""
    docs = yaml.safe_load_all((REPO / "deploy" / "base" / "leader-election-role.yaml").read_text())
    [leader_role] = [doc for doc in docs if doc["kind"] == "Role"]
    return grants(leader_role["rules"])
