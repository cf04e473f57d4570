"""Strategic merge patch for built-in kinds, driven by the OpenAPI schemas kubernetes-validate ships.

The official client sends every dict-bodied `patch_*` on a built-in kind as a strategic merge patch. Its
lists are not replaced but merged: by `x-kubernetes-patch-merge-key` (containers, volumes, env, ports by
name, ...) or as a set of primitives (finalizers) where `x-kubernetes-patch-strategy` says `merge`. So a
container or volume left out of a patch stays on a real cluster. Directives handled: `$patch: delete`
(on a list element or a map), `$patch: replace` (on a map or as a list element), and
`$deleteFromPrimitiveList/<field>`; `$setElementOrder/<field>` and `$retainKeys` are accepted and ignored
(order: kept originals first, then new elements). Anything the schemas do not describe merges like a JSON
merge patch.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
from collections.abc import Mapping
from typing import Any

from kubernetes_validate.utils import latest_version

Schema = Mapping[str, Any]


@functools.cache
def _definitions() -> dict[str, Schema]:
    files = importlib.resources.files("kubernetes_validate")
    path = files / "kubernetes-json-schema" / f"v{latest_version()}-local" / "_definitions.json"
    return json.loads(path.read_text())["$defs"]


@functools.cache
def _kind_index() -> dict[tuple[str, str, str], str]:
    index = {}
    for name, schema in _definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            index[gvk["group"], gvk["version"], gvk["kind"]] = name
    return index


def schema_for(group: str, version: str, kind: str) -> Schema | None:
    name = _kind_index().get((group, version, kind))
    return _definitions()[name] if name else None


def _resolve(schema: Schema | None) -> Schema:
    """Follow `$ref` (directly or through a one-element allOf) to the schema that has the properties."""
    while schema:
        if "$ref" in schema:
            merged = {**_definitions()[schema["$ref"].rsplit("/", 1)[-1]],
                      **{k: v for k, v in schema.items() if k != "$ref"}}
            schema = merged
        elif len(schema.get("allOf") or []) == 1:
            schema = {**schema["allOf"][0], **{k: v for k, v in schema.items() if k != "allOf"}}
        else:
            return schema
    return {}


def _property(schema: Schema, key: str) -> Schema:
    schema = _resolve(schema)
    properties = schema.get("properties") or {}
    if key in properties:
        return properties[key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else {}


def strategic_merge(original: Any, patch: Any, schema: Schema | None) -> Any:
    """Apply a strategic merge patch to `original` (a built-in object or part of one) under `schema`."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(original) if isinstance(original, Mapping) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [item for item in result.get(field) or [] if item not in value]
            continue
        if value is None or (isinstance(value, Mapping) and value.get("$patch") == "delete"):
            result.pop(key, None)
            continue
        field_schema = _resolve(_property(schema or {}, key))
        if isinstance(value, list) and "merge" in (field_schema.get("x-kubernetes-patch-strategy") or ""):
            merge_key = field_schema.get("x-kubernetes-patch-merge-key")
            items = field_schema.get("items") or {}
            if merge_key:
                result[key] = _merge_by_key(result.get(key) or [], value, merge_key, items)
            else:
                kept = list(result.get(key) or [])
                result[key] = kept + [item for item in value if item not in kept]
        else:
            result[key] = strategic_merge(result.get(key), value, field_schema) if isinstance(value, Mapping) \
                else copy.deepcopy(value)
    return result


def _merge_by_key(original: list, patch: list, merge_key: str, items: Schema) -> list:
    if any(isinstance(item, Mapping) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(item) for item in patch if not (isinstance(item, Mapping) and "$patch" in item)]
    merged = [copy.deepcopy(item) for item in original]
    for item in patch:
        if not isinstance(item, Mapping):
            continue
        position = next((i for i, old in enumerate(merged)
                         if isinstance(old, Mapping) and old.get(merge_key) == item.get(merge_key)), None)
        if item.get("$patch") == "delete":
            if position is not None:
                del merged[position]
        elif position is not None:
            merged[position] = strategic_merge(merged[position], item, items)
        else:
            merged.append(strategic_merge({}, item, items))
    return merged
