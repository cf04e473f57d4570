"""What the Kubernetes API server does with a Registry, re-done offline from the committed CRD.

In the API server's order: unknown fields are found (the server prunes them, or rejects them under
kubectl's default strict field validation), defaults are applied, the openAPIV3Schema is checked (here with
`jsonschema`, docs/upstream.md#parts-offline-validation) and so is the uniqueness of list-map keys, and the CEL rules
(`x-kubernetes-validations`) are evaluated with cel-python.
Every problem is reported as (API path, message), paths written like the models' (spec.http.addr,
spec.health.tcp.0.addr) so the two can be compared.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "berth.dev_registries.yaml"

Problem = tuple[str, str]


@cache
def committed_crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))


def crd_schema() -> dict[str, Any]:
    return committed_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path; map values are `*`, list items `[]`."""
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from walk(prop, join(path, name))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], join(path, "*"))
    if "items" in schema:
        yield from walk(schema["items"], join(path, "[]"))


def present(obj: Any, schema: dict[str, Any], path: str = "") -> Iterator[tuple[Any, dict[str, Any], str]]:
    """Every value in obj with its schema node and path, a node before what it holds. Lazy: what a caller adds
    to a node when it gets it (a default) is visited too."""
    yield obj, schema, path
    if isinstance(obj, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in obj:
                yield from present(obj[name], prop, join(path, name))
        if isinstance(schema.get("additionalProperties"), dict):
            for key, value in obj.items():
                yield from present(value, schema["additionalProperties"], join(path, key))
    elif isinstance(obj, list) and "items" in schema:
        for index, item in enumerate(obj):
            yield from present(item, schema["items"], join(path, index))


def unknown_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[Problem]:
    """Fields the API server would prune (structural schemas have no `additionalProperties: false`)."""
    problems: list[Problem] = []
    if isinstance(obj, dict) and schema.get("type") == "object":
        if "properties" in schema:
            for key, value in obj.items():
                if key in schema["properties"]:
                    problems += unknown_fields(value, schema["properties"][key], join(path, key))
                else:
                    problems.append((join(path, key), "unknown field (pruned by the API server)"))
        elif isinstance(schema.get("additionalProperties"), dict):
            for key, value in obj.items():
                problems += unknown_fields(value, schema["additionalProperties"], join(path, key))
        # metadata: `type: object` alone; the API server owns its schema.
    elif isinstance(obj, list) and "items" in schema:
        for index, item in enumerate(obj):
            problems += unknown_fields(item, schema["items"], join(path, index))
    return problems


def apply_defaults(obj: Any, schema: dict[str, Any]) -> Any:
    """Structural defaulting: a missing property with a `default` is set, then defaulted in turn."""
    obj = copy.deepcopy(obj)
    _default_in_place(obj, schema)
    return obj


def _default_in_place(obj: Any, schema: dict[str, Any]) -> None:
    for value, node, _ in present(obj, schema):
        if isinstance(value, dict):
            for name, prop in node.get("properties", {}).items():
                if name not in value and "default" in prop:
                    value[name] = copy.deepcopy(prop["default"])  # then visited and defaulted in turn


def schema_problems(obj: Any, schema: dict[str, Any]) -> tuple[list[Problem], bool]:
    """The schema's complaints, and whether one is a wrong type (which stops the API server before CEL)."""
    problems = []
    wrong_type = False
    for error in jsonschema.Draft202012Validator(schema).iter_errors(obj):
        path = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "required":
            missing = [name for name in error.validator_value if name not in error.instance]
            path = join(path, missing[0])
        wrong_type |= error.validator == "type"
        problems.append((path, error.message))
    return problems, wrong_type


def list_map_problems(obj: Any, schema: dict[str, Any]) -> list[Problem]:
    """Duplicate keys in `x-kubernetes-list-type: map` lists, which the API server refuses."""
    problems: list[Problem] = []
    for value, node, path in present(obj, schema):
        if isinstance(value, list) and node.get("x-kubernetes-list-type") == "map":
            keys = [tuple(item.get(k) for k in node["x-kubernetes-list-map-keys"]) for item in value]
            if len(keys) != len(set(keys)):
                problems.append((path, "duplicate entries for the list-map keys"))
    return problems


@cache
def _program(rule: str) -> celpy.Runner:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


def cel_rules(schema: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """(schema path, rule) for every x-kubernetes-validations entry."""
    return [(path, rule) for path, node in walk(schema) for rule in node.get("x-kubernetes-validations", [])]


def evaluate_rule(rule: str, value: Any) -> bool:
    try:
        result = _program(rule).evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELEvalError as exc:
        # The API server reports a rule that errors as invalid too; here it means the rule itself is wrong.
        raise AssertionError(f"CEL rule {rule!r} failed to evaluate on {value!r}: {exc}") from None
    return bool(result)


def cel_problems(obj: Any, schema: dict[str, Any]) -> list[Problem]:
    """Evaluate each rule on each value present at its node, as the API server does after defaulting."""
    return [(path, rule["message"]) for value, node, path in present(obj, schema)
            for rule in node.get("x-kubernetes-validations", []) if not evaluate_rule(rule["rule"], value)]


def admit(obj: dict[str, Any]) -> list[Problem]:
    """Every reason the API server (with strict field validation) would refuse obj; empty when it accepts."""
    schema = crd_schema()
    problems = unknown_fields(obj, schema)
    defaulted = apply_defaults(obj, schema)
    structural, wrong_type = schema_problems(defaulted, schema)
    problems += structural + list_map_problems(defaulted, schema)
    # The API server skips the CEL rules when the schema found a wrong type (its "blocking" errors).
    return problems + ([] if wrong_type else cel_problems(defaulted, schema))
