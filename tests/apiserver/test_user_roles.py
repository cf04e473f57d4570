"""Roles for users: after the documented install (`kubectl apply -k crds`, `kubectl apply -k deploy`), the
built-in user-facing roles carry Berth's kind, through deploy/base/user-roles.yaml's aggregated ClusterRoles.

On a real API server with the controller manager's clusterrole-aggregation controller
(support.clusters.apiserver_users), three users are each bound by a RoleBinding in namespace A to one built-in
ClusterRole, as a cluster admin binds a team: `view`, `edit`, `admin`. Every case is a real request with the
user's own token, and RBAC's answer is the verdict:

- `edit` and `admin`: create, get, list, watch, update, patch, scale, delete and deletecollection of Registries in A;
- `view`: get, list, watch (and read status and scale) in A, and no write;
- none of them may write a Registry's status (the operator's and the agents'), nor do anything in namespace B, nor
  list Registries cluster-wide.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from support.clusters.apiserver import ApiError, KubeApiServer, api_path
from support.clusters.apiserver_users import REGISTRIES, bind, install, namespace, users_cluster

MERGE = "application/merge-patch+json"
USERS = {"vera": "view", "eddie": "edit", "ada": "admin"}


def registry(name: str, ns: str) -> dict[str, Any]:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": ns},
            "spec": {"config": {"storage": {"inmemory": {}}}}}


class Person:
    def __init__(self, api: KubeApiServer, token: str, home: str, elsewhere: str):
        self.api, self.token, self.home, self.elsewhere = api, token, home, elsewhere

    def __call__(self, method: str, name: str | None = None, *, subresource: str | None = None, body: Any = None,
                 namespace: str | None = "", content_type: str = "application/json", **query: Any) -> dict[str, Any]:
        ns = self.home if namespace == "" else namespace
        return self.api.request(method, api_path(REGISTRIES, ns, name, subresource), body, token=self.token,
                                content_type=content_type, query=query or None)


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    with users_cluster(list(USERS)) as (api, tokens):
        install(api)
        home = namespace(api, f"team-a-{secrets.token_hex(3)}")
        elsewhere = namespace(api, f"team-b-{secrets.token_hex(3)}")
        for user, role in USERS.items():
            bind(api, home, role, user)
        # Something to read and to be refused in each namespace (made by the cluster admin).
        for ns in (home, elsewhere):
            api.create(registry("existing", ns))
        yield {"api": api, "people": {role: Person(api, tokens[user], home, elsewhere) for user, role in USERS.items()}}


def put(p: Person, name: str) -> dict[str, Any]:
    current = p("GET", name)
    current["metadata"].setdefault("labels", {})["touched"] = "yes"
    return p("PUT", name, body=current)


def delete_collection(p: Person) -> dict[str, Any]:
    return p("DELETE", labelSelector="team=nothing-matches")


def write_cases(prefix: str) -> list[tuple[str, Callable[[Person], Any]]]:
    return [
        ("create", lambda p: p("POST", body=registry(f"{prefix}-{secrets.token_hex(3)}", p.home))),
        ("update", lambda p: put(p, "existing")),
        ("patch", lambda p: p("PATCH", "existing", body={"spec": {"replicas": 1}}, content_type=MERGE)),
        ("patch scale", lambda p: p("PATCH", "existing", subresource="scale", body={"spec": {"replicas": 1}},
                                    content_type=MERGE)),
        ("delete", lambda p: p("DELETE", (p("POST", body=registry(f"{prefix}-{secrets.token_hex(3)}", p.home))
                                          ["metadata"]["name"]))),
        ("deletecollection", delete_collection),
    ]


READ_CASES: list[tuple[str, Callable[[Person], Any]]] = [
    ("get", lambda p: p("GET", "existing")),
    ("list", lambda p: p("GET")),
    ("watch", lambda p: p("GET", watch="true", timeoutSeconds="1")),
    ("get status", lambda p: p("GET", "existing", subresource="status")),
    ("get scale", lambda p: p("GET", "existing", subresource="scale")),
]

# Never, for any of the three.
REFUSED_TO_ALL: list[tuple[str, Callable[[Person], Any]]] = [
    ("patch status", lambda p: p("PATCH", "existing", subresource="status",
                                 body={"status": {"observedGeneration": 9}}, content_type=MERGE)),
    ("get in B", lambda p: p("GET", "existing", namespace=p.elsewhere)),
    ("list in B", lambda p: p("GET", namespace=p.elsewhere)),
    ("create in B", lambda p: p("POST", namespace=p.elsewhere, body=registry("intruder", p.elsewhere))),
    ("patch in B", lambda p: p("PATCH", "existing", namespace=p.elsewhere, body={"spec": {"replicas": 2}},
                               content_type=MERGE)),
    ("delete in B", lambda p: p("DELETE", "existing", namespace=p.elsewhere)),
    ("list cluster-wide", lambda p: p("GET", namespace=None)),
]


def cases(listed: list[tuple[str, Callable[[Person], Any]]]) -> list[Any]:
    return [pytest.param(what, action, id=what.replace(" ", "-")) for what, action in listed]


def expect_allowed(action: Callable[[Person], Any], person: Person) -> None:
    """The server answers (RBAC refuses with an ApiError): an object or a list, or what the watch saw."""
    answer = action(person)
    assert answer.get("kind") or answer.get("events"), answer


def expect_refused(action: Callable[[Person], Any], person: Person) -> None:
    with pytest.raises(ApiError) as answer:
        action(person)
    assert answer.value.status == 403, answer.value


@pytest.mark.parametrize("role", ["edit", "admin"])
@pytest.mark.parametrize(("what", "action"), cases(READ_CASES + write_cases("w")))
def test_edit_and_admin_write_registries_in_their_namespace(cluster: dict, role: str, what: str,
                                                           action: Callable[[Person], Any]) -> None:
    expect_allowed(action, cluster["people"][role])


@pytest.mark.parametrize(("what", "action"), cases(READ_CASES))
def test_view_reads_registries_in_its_namespace(cluster: dict, what: str, action: Callable[[Person], Any]) -> None:
    expect_allowed(action, cluster["people"]["view"])


@pytest.mark.parametrize(("what", "action"), cases(write_cases("v")))
def test_view_writes_nothing(cluster: dict, what: str, action: Callable[[Person], Any]) -> None:
    if what == "delete":  # its Registry must exist for the refusal to be RBAC's: the admin makes it
        api = cluster["api"]
        person = cluster["people"]["view"]
        api.create(registry("to-delete", person.home))
        expect_refused(lambda p: p("DELETE", "to-delete"), person)
        return
    expect_refused(action, cluster["people"]["view"])


@pytest.mark.parametrize("role", ["view", "edit", "admin"])
@pytest.mark.parametrize(("what", "action"), cases(REFUSED_TO_ALL))
def test_no_role_writes_status_or_reaches_another_namespace(cluster: dict, role: str, what: str,
                                                            action: Callable[[Person], Any]) -> None:
    expect_refused(action, cluster["people"][role])


def test_the_write_was_the_users_own(cluster: dict) -> None:
    """The Registries the edit user created are in A, and B has only the admin's (nothing of theirs got there)."""
    api, person = cluster["api"], cluster["people"]["edit"]
    assert [r["metadata"]["name"] for r in api.list(REGISTRIES, person.elsewhere)] == ["existing"]
