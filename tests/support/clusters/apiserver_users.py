"""People on the real API server (support.clusters.apiserver), with the roles a cluster admin gives them.

A user is a static-token user of the API server (`--token-auth-file`, as a cluster's OIDC or certificate users are:
a name, no ServiceAccount), given at start; a RoleBinding to one of the built-in user-facing ClusterRoles (`view`,
`edit`, `admin`) in a namespace is what a cluster admin does for a team. Those roles take Berth's kinds only through
ClusterRole aggregation (deploy/base/user-roles.yaml), which the controller manager's clusterrole-aggregation controller
performs: `users_cluster` runs it beside the API server (and nothing else of the controller manager).

    with users_cluster(["alice"]) as (api, tokens):
        install(api)                                  # kubectl apply -k crds, then -k deploy
        bind(api, "team-a", "edit", "alice")
        api.request("POST", ..., token=tokens["alice"])
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from support.clusters.apiserver import REPO, KubeApiServer
from support.clusters.control_plane import ControlPlane, skip_reason
from support.common.polling import wait_for

BUILT_IN_ROLES = ("view", "edit", "admin")
REGISTRIES = "berth.dev/v1alpha1/registries"


class ApiServerWithUsers(KubeApiServer):
    """A KubeApiServer that also authenticates `users`, each by a token of its own (user_tokens)."""

    def __init__(self, users: Sequence[str], **kwargs: Any):
        super().__init__(**kwargs)
        self.user_tokens = {user: secrets.token_urlsafe(24) for user in users}
        # start() writes every entry of component_tokens into --token-auth-file as `token,user,uid`.
        self.component_tokens.update(self.user_tokens)


@contextlib.contextmanager
def users_cluster(users: Sequence[str], **api_args: Any) -> Iterator[tuple[ApiServerWithUsers, dict[str, str]]]:
    """A fresh API server authenticating `users`, with the clusterrole-aggregation controller running: (server,
    {user: token}). Skips, saying why, where the binaries are missing."""
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    with ApiServerWithUsers(users, **api_args) as api, ControlPlane(api, controllers="clusterrole-aggregation"):
        yield api, dict(api.user_tokens)


def kubectl(api: KubeApiServer, *args: str) -> str:
    """`kubectl ARGS` as the cluster admin; its output (a failure raises, with kubectl's stderr)."""
    binary = shutil.which("kubectl")
    assert binary, "kubectl must be on PATH (the install is `kubectl apply -k`)"
    result = subprocess.run([binary, f"--kubeconfig={api.kubeconfig}", *args], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def install(api: KubeApiServer) -> None:
    """The documented install (docs/guide/install.md): `kubectl apply -k crds`, then `kubectl apply -k deploy`; then
    wait until the built-in roles carry deploy/base/user-roles.yaml's rules (the aggregation controller's work)."""
    kubectl(api, "apply", "-k", str(REPO / "crds"))
    kubectl(api, "apply", "-k", str(REPO / "deploy"))
    for role in BUILT_IN_ROLES:
        wait_for(lambda role=role: aggregated(api, role), f"ClusterRole {role} to aggregate Berth's roles", 60)


def aggregated(api: KubeApiServer, role: str) -> bool:
    """Whether the built-in ClusterRole `role` has the rules deploy/base/user-roles.yaml aggregates into it."""
    obj = api.get("rbac.authorization.k8s.io/v1/clusterroles", None, role) or {}
    verbs = {verb for rule in obj.get("rules") or () if "berth.dev" in rule.get("apiGroups", ())
             and "registries" in rule.get("resources", ()) for verb in rule.get("verbs", ())}
    return {"get", "list", "watch"} <= verbs and (role == "view" or "create" in verbs)


def bind(api: KubeApiServer, namespace: str, role: str, user: str) -> dict[str, Any]:
    """A RoleBinding of `user` to the ClusterRole `role` in `namespace` (what a cluster admin does for a team)."""
    return api.create({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"{user}-{role}", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})


def namespace(api: KubeApiServer, name: str) -> str:
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name
