"""docs/reference/api.md, the Registry field reference, generated from the CRD's schema (itself generated from the
pydantic models), so the reference says exactly what the API server enforces.

`berth-crd --reference > docs/reference/api.md` regenerates the committed page; `berth-crd --reference --check
FILE` exits 1 when FILE differs. One table per object, in schema order: every field with its type, default,
validation (ranges, lengths, patterns, enums, CEL rules' messages) and description.
"""

from __future__ import annotations

import json
from typing import Any

from .crd import registry_schema
from .registry import GROUP, KIND, VERSION

REGENERATE_COMMAND = "berth-crd --reference > docs/reference/api.md"


def render_reference() -> str:
    """The page as Markdown text, byte-stable for the same models."""
    schema = registry_schema()
    lines = [
        f"<!-- Generated from agent/berth_api by `{REGENERATE_COMMAND}`. Do not edit. -->",
        "",
        f"# {KIND} API reference ({GROUP}/{VERSION})",
        "",
        f"Every field of `spec`, as the CRD validates it. `kubectl explain {KIND.lower()}.spec` shows the same "
        "descriptions in a cluster. Status is written by the operator and the agents; its conditions are "
        "explained in [troubleshooting](../guide/troubleshooting.md).",
        "",
        "Validation lists what the API server checks at admission: ranges, lengths, patterns, enums and the "
        "rules (CEL) an object carries, by their messages. The agent's pre-flight checks (a key that does not "
        "open the bucket, a certificate that does not match its key) come on top, at apply time.",
        "",
    ]
    for path, node in _objects(schema["properties"]["spec"], "spec"):
        lines += _object_section(path, node)
    return "\n".join(lines).rstrip("\n") + "\n"


def _objects(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, schema) of every object with properties under node, node first, depth first in schema order."""
    found = [(path, node)] if node.get("properties") else []
    for name, prop in (node.get("properties") or {}).items():
        found += _objects(_element(prop), f"{path}.{name}{_suffix(prop)}")
    return found


def _element(node: dict[str, Any]) -> dict[str, Any]:
    """The schema a field's values follow: a list's items, a map's values, or the field itself."""
    if node.get("type") == "array":
        return node.get("items") or {}
    if isinstance(node.get("additionalProperties"), dict):
        return node["additionalProperties"]
    return node


def _suffix(node: dict[str, Any]) -> str:
    if node.get("type") == "array":
        return "[]"
    if isinstance(node.get("additionalProperties"), dict):
        return ".*"
    return ""


def _object_section(path: str, node: dict[str, Any]) -> list[str]:
    lines = [f"## `{path}`", ""]
    if path != "spec" and node.get("description"):
        lines += [_cell(node["description"]), ""]
    rules = _rules(node)
    if rules:
        lines += ["Rules:", ""] + [f"- {_cell(rule)}" for rule in rules] + [""]
    lines += ["| Field | Type | Default | Validation | Description |", "|---|---|---|---|---|"]
    required = set(node.get("required") or ())
    for name, prop in node["properties"].items():
        field = f"`{name}`" + (" (required)" if name in required else "")
        default = f"`{_compact(prop['default'])}`" if "default" in prop else ""
        lines.append(f"| {field} | {_type(prop)} | {_cell(default)} | {_cell('; '.join(_validation(prop)))} | "
                     f"{_cell(prop.get('description', ''))} |")
    return lines + [""]


def _type(node: dict[str, Any]) -> str:
    kind = node.get("type", "")
    if kind == "array":
        return f"list of {_type(node.get('items') or {})}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    if node.get("format"):
        return f"{kind} ({node['format']})"
    return kind


def _validation(node: dict[str, Any]) -> list[str]:
    """The checks on a field and, for a list or a map, on its elements when those are not objects of their own."""
    checks = _checks(node)
    element = _element(node)
    if element is not node and not element.get("properties"):
        checks += [f"each: {c}" for c in _checks(element)]
    return checks


def _checks(node: dict[str, Any]) -> list[str]:
    checks = []
    if "enum" in node:
        checks.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, word in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤"),
                      ("minItems", "items ≥"), ("maxItems", "items ≤"), ("maxProperties", "entries ≤")):
        if key in node:
            checks.append(f"{word} {node[key]}")
    if "pattern" in node:
        checks.append(f"pattern `{node['pattern']}`")
    if node.get("x-kubernetes-list-type") == "map":
        checks.append("unique " + ", ".join(f"`{k}`" for k in node.get("x-kubernetes-list-map-keys", ())))
    if not node.get("properties"):  # an object's own rules are shown above its table
        checks += _rules(node)
    return checks


def _rules(node: dict[str, Any]) -> list[str]:
    return [rule.get("message") or f"`{rule['rule']}`" for rule in node.get("x-kubernetes-validations") or ()]


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _cell(text: str) -> str:
    """Text inside one table cell: no line breaks, no column separators."""
    return " ".join(str(text).split()).replace("|", "\\|")
