"""The Registry CustomResourceDefinition, generated from the pydantic models.

`berth-crd > crds/berth.dev_registries.yaml` regenerates the committed file; `berth-crd --check FILE`
exits 1 when FILE differs from what the models generate. `--reference` prints (or checks) the Markdown field
reference instead (berth_api.reference) and `--troubleshooting` the condition reasons' page (berth_api.reasons).

Pydantic's JSON schema is turned into a Kubernetes *structural* schema: every $ref inlined, `anyOf [X, null]`
collapsed to X (optional means "not required", never nullable), titles and `additionalProperties: false`
dropped (the API server prunes unknown fields instead), `default: {}` on object fields the models build with a
default factory (so the API server applies the nested defaults the models apply), and the CEL rules the
models declare (`x-kubernetes-validations`) kept. Generation fails when a property has no description, so
`kubectl explain` documents every field.
"""

from __future__ import annotations

from typing import Any

import yaml

from .registry import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION, Registry

CRD_NAME = f"{PLURAL}.{GROUP}"
REGENERATE_COMMAND = "berth-crd > crds/berth.dev_registries.yaml"
HEADER = f"# Generated from agent/berth_api by `{REGENERATE_COMMAND}`. Do not edit.\n"

# Keys a node of the generated schema may carry, in the order they are written. Anything else pydantic
# emits is an error, so a new model feature cannot slip a non-structural keyword into the CRD.
SCHEMA_KEYS = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "items",
    "properties",
    "additionalProperties",
    "maxProperties",
    "required",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
)
# Dropped: titles are pydantic's, and `additionalProperties: false` is not allowed beside `properties`.
DROPPED_KEYS = ("title",)

PRINTER_COLUMNS = [
    {
        "name": "Storage",
        "type": "string",
        "description": "Storage backend (filesystem, objectStorage or inmemory).",
        "jsonPath": ".status.storage",
    },
    {"name": "Replicas", "type": "integer", "description": "Registry pods wanted.", "jsonPath": ".spec.replicas"},
    {
        "name": "Ready",
        "type": "string",
        "description": "Status of the Ready condition: every pod serves the current config.",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {
        # Why the registry is on its way, or Available: shows GarbageCollecting while a GC run keeps it read-only
        # (docs/design.md §4.5), WaitingForPods during a rollout.
        "name": "Progress",
        "type": "string",
        "description": "Reason of the Progressing condition (Available when idle; "
                       "GarbageCollecting while read-only for GC).",
        "jsonPath": '.status.conditions[?(@.type=="Progressing")].reason',
    },
    {
        "name": "Available",
        "type": "integer",
        "description": "Registry pods that are ready.",
        "jsonPath": ".status.readyReplicas",
        "priority": 1,
    },
    {"name": "URL", "type": "string", "description": "In-cluster URL of the registry.", "jsonPath": ".status.url"},
    {"name": "External", "type": "string", "description": "Address of the registry from outside the cluster.",
     "jsonPath": ".status.externalAddress", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


class CrdError(Exception):
    """The models cannot be expressed as a structural schema; the message lists every offending path."""


def registry_schema() -> dict[str, Any]:
    """The openAPIV3Schema of the Registry kind."""
    raw = Registry.model_json_schema(by_alias=True, mode="validation")
    # apiVersion, kind and metadata are the API server's: plain types, no const, default or metadata schema.
    for name in ("apiVersion", "kind"):
        raw["properties"][name] = {"type": "string", "description": raw["properties"][name]["description"]}
    raw["properties"]["metadata"] = {"type": "object"}
    return structural_schema(raw)


def structural_schema(json_schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema (by_alias, with $defs) as a Kubernetes structural schema; CrdError if it can't be."""
    json_schema = dict(json_schema)
    converter = _StructuralConverter(json_schema.pop("$defs", {}))
    schema = converter.convert(json_schema, "")
    if converter.errors:
        raise CrdError("; ".join(converter.errors))
    return schema


def build_crd() -> dict[str, Any]:
    """The CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": registry_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def render_crd() -> str:
    """The CRD as YAML text, byte-stable for the same models."""
    body = yaml.dump(
        build_crd(), Dumper=_PlainDumper, sort_keys=False, allow_unicode=True, width=4096, default_flow_style=False
    )
    return HEADER + body


class _PlainDumper(yaml.SafeDumper):
    """Writes shared subtrees (the `required` list of every SecretKeyRef) in full, never as anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class _StructuralConverter:
    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.errors: list[str] = []

    def convert(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        node = self._resolve(node, path)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in DROPPED_KEYS:
                continue
            if key == "default" and value is None:
                continue
            if key == "additionalProperties":
                if value is False:
                    continue
                if isinstance(value, dict):
                    value = self.convert(value, f"{path}.*")
            elif key == "items":
                value = self.convert(value, f"{path}[]")
            elif key == "properties":
                value = self._properties(value, node.get("required", []), path)
            elif key == "x-kubernetes-validations":
                value = [{k: rule[k] for k in ("rule", "message") if k in rule} | rule for rule in value]
            elif key not in SCHEMA_KEYS:
                self.errors.append(f"{path or '(root)'}: keyword {key!r} has no place in a structural schema")
                continue
            out[key] = value
        if "type" not in out:
            self.errors.append(f"{path or '(root)'}: no type")
        return _ordered(out)

    def _properties(self, properties: dict[str, Any], required: list[str], path: str) -> dict[str, Any]:
        converted = {}
        for name, prop in properties.items():
            prop_path = f"{path}.{name}".lstrip(".")
            schema = self.convert(prop, prop_path)
            if not schema.get("description") and prop_path != "metadata":
                self.errors.append(f"{prop_path}: no description (add one to the model field)")
            # A model-typed field with a default factory: let the API server build it too, so the nested
            # defaults (drainTimeout 30s, log level info, ...) are stored as the models apply them.
            if "$ref" in prop and name not in required and "default" not in prop:
                schema = _ordered({**schema, "default": {}})
            converted[name] = schema
        return converted

    def _resolve(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """Inline a $ref and collapse `anyOf [X, null]` to X; the node's own keys win over X's."""
        node = dict(node)
        if "anyOf" in node:
            choices = [c for c in node.pop("anyOf") if c != {"type": "null"}]
            if len(choices) != 1:
                self.errors.append(f"{path}: a union of several types is not structural")
                return node
            node = {**self._resolve(choices[0], path), **node}
        if "$ref" in node:
            target = self.defs[node.pop("$ref").removeprefix("#/$defs/")]
            node = {**self._resolve(target, path), **node}
        return node


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    return {key: node[key] for key in SCHEMA_KEYS if key in node}
