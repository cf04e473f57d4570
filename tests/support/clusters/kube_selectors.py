"""Label and field selectors as the API server parses them (kmock 0.8 ignores both:
docs/upstream.md#parts-kmock).

`labelSelector` grammar (k8s.io/apimachinery labels.Parse): comma-separated requirements, each `key`,
`!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`. `fieldSelector`: comma-separated
`path=v`, `path==v`, `path!=v` over dotted paths of the object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Matcher = Callable[[Mapping[str, Any]], bool]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s+\(([^()]*)\)$")
_EQUALITY = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")


class SelectorError(ValueError):
    """The selector text does not parse; the API server answers 400 BadRequest."""


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses (set values contain commas)."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def label_matcher(text: str | None) -> Matcher:
    """A predicate over an object's `metadata.labels` for a labelSelector; empty text matches all."""
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for requirement in _split_top_level(text or ""):
        if match := _SET.match(requirement):
            key, operator, values_text = match.groups()
            values = {value.strip() for value in values_text.split(",") if value.strip()}
            if operator == "in":
                checks.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                checks.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif match := _EQUALITY.match(requirement):
            key, operator, value = match.groups()
            if operator == "!=":
                checks.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif match := _EXISTS.match(requirement):
            negated, key = match.groups()
            if negated:
                checks.append(lambda labels, k=key: k not in labels)
            else:
                checks.append(lambda labels, k=key: k in labels)
        else:
            raise SelectorError(f"unable to parse requirement: {requirement!r}")

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return matches


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def field_matcher(text: str | None, *, allowed: Callable[[str], bool]) -> Matcher:
    """A predicate for a fieldSelector; `allowed(path)` says which field labels this resource supports."""
    checks: list[Matcher] = []
    for requirement in _split_top_level(text or ""):
        match = re.match(r"^([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)$", requirement)
        if not match:
            raise SelectorError(f"invalid field selector: {requirement!r}")
        path, operator, value = match.groups()
        if not allowed(path):
            raise SelectorError(f'field label not supported: "{path}"')
        if operator == "!=":
            checks.append(lambda obj, p=path, v=value: _field_value(obj, p) != v)
        else:
            checks.append(lambda obj, p=path, v=value: _field_value(obj, p) == v)
    return lambda obj: all(check(obj) for check in checks)

