"""The CRD's admission on the real API server: the invalid table and the CEL/model combinations of tests/api, each
sent to kube-apiserver as kubectl sends it (strict field validation), with dryRun so nothing is stored.

tests/api re-does admission offline (api.admission) and runs without the binary; this is the check that the
offline re-doing and the models agree with what the API server really does: each case the table marks as
refused by the CRD is refused at the path the model names, each model-only case is accepted; on every CEL
combination the server's verdict is the model's, with the model's messages among the server's; every wrong
JSON type of test_strict_types is refused at the model's field; and the server's defaults are the model's.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from api.test_cel_rules import SPECS, model_problems
from api.test_examples import DOCUMENTS, leaves
from api.test_registry_validation import INVALID
from api.test_strict_types import COERCION_DOCUMENTS
from berth_api import Registry
from support.clusters.apiserver import ApiError, KubeApiServer

REGISTRIES = "berth.dev/v1alpha1/registries"


def server_problems(error: ApiError) -> dict[str, str]:
    """{API path: message} of a refusal, paths written as the models write them (spec.health.tcp.1.addr)."""
    found = {}
    for cause in error.causes:
        field = re.sub(r"\[(\d+)\]", r".\1", cause.get("field") or "").lstrip(".")
        if field and field != "<nil>":
            found.setdefault(field, cause.get("message", ""))
    # Strict field validation refuses unknown fields with a 400 and no causes; the message names each one.
    for field in re.findall(r'unknown field "([^"]+)"', error.body.get("message", "")):
        found[field] = "unknown field"
    return found


def admit(server: KubeApiServer, namespace: str, document: dict[str, Any]) -> dict[str, str]:
    """What the API server says to `document` ({} when it accepts it). A status goes through the status
    subresource (a create drops it), on an object created first."""
    document = copy.deepcopy(document)
    document["metadata"] = {**(document.get("metadata") or {}), "name": "r", "namespace": namespace}
    status = document.pop("status", None)
    try:
        if status is None:
            server.create(document, dryRun="All", fieldValidation="Strict")
        else:
            server.create(document)
            server.request("PATCH", f"/apis/berth.dev/v1alpha1/namespaces/{namespace}/registries/r/status",
                           {"status": status}, content_type="application/merge-patch+json",
                           query={"dryRun": "All", "fieldValidation": "Strict"})
    except ApiError as error:
        assert error.status in (400, 422), error
        return server_problems(error)
    return {}


@pytest.mark.parametrize(("document", "path", "crd_refuses"),
                         [pytest.param(case[1], case[2], case[4], id=case[0]) for case in INVALID])
def test_the_api_server_refuses_what_the_table_says_at_the_same_path(
    kube_apiserver, apiserver_namespace, document, path, crd_refuses
) -> None:
    problems = admit(kube_apiserver, apiserver_namespace, document)
    if crd_refuses:
        # A duplicate list-map key is named at the duplicate entry (status.conditions.1), the model names the list.
        named = [p for p in problems if p == path or re.fullmatch(re.escape(path) + r"\.\d+", p)]
        assert named, f"the API server said {problems}, nothing at {path}"
    else:
        # Enforced by the model alone (docs/design.md §5.1): if the CRD learns it, move the case over.
        assert problems == {}, problems


@pytest.mark.parametrize("spec", SPECS, ids=[str(i) for i in range(len(SPECS))])
def test_the_api_server_and_the_model_agree(kube_apiserver, apiserver_namespace, spec) -> None:
    document = {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "spec": spec}
    by_model = model_problems(document)
    by_server = admit(kube_apiserver, apiserver_namespace, document)
    assert bool(by_model) == bool(by_server), f"model says {by_model}, the API server says {by_server}"
    # Same path, and the model's message inside the server's ("Invalid value: <the rule's message>").
    for path, message in by_model:
        assert path in by_server and message in by_server[path], (by_model, by_server)


# metadata: "r" is left out: admit() names the object, which replaces metadata.
TYPE_CASES = [(name, document) for name, document in COERCION_DOCUMENTS if isinstance(document.get("metadata"), dict)]


@pytest.mark.parametrize("document", [d for _, d in TYPE_CASES], ids=[n for n, _ in TYPE_CASES])
def test_the_api_server_refuses_each_wrong_json_type_where_the_model_does(
    kube_apiserver, apiserver_namespace, document
) -> None:
    by_server = admit(kube_apiserver, apiserver_namespace, document)
    assert by_server, "the API server accepts it: not a type case"
    model_paths = {path for path, _ in model_problems(document)}
    assert any(m == c or m.startswith(c + ".") or c.startswith(m + ".") for m in model_paths for c in by_server), (
        model_paths, by_server)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_api_server_stores_the_models_defaults(kube_apiserver, apiserver_namespace, document) -> None:
    """Structural defaulting on the real server gives what the model builds, for every example and fixture
    (tests/api/test_examples checks the same offline)."""
    document = copy.deepcopy(document)
    document["metadata"] = {"name": "defaults", "namespace": apiserver_namespace}
    stored = kube_apiserver.create(document)
    by_model = Registry.model_validate(document).model_dump(by_alias=True, exclude_none=True)
    assert leaves(stored["spec"]) == leaves(by_model["spec"])
