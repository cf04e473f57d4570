"""What a kind's entry in the table (kinds.py) says about its objects in the cluster: what the spec references and
is missing, and what exists but is not ready yet (issue 40). The checks live beside each kind's builder and only
read, through a Reader the engine hands them (engine/facts.py), so the builders stay free of side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from berth_api import Registry

from .problems import Problem


class Reader(Protocol):
    """A read-only view of the cluster."""

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None: ...

    def class_missing(self, api_version: str, kind: str, name: str) -> bool:
        """A cluster-scoped class the spec names: True only when it is known to be absent (a class the operator
        may not read is given the benefit)."""
        ...


@dataclass(frozen=True)
class Found:
    """What a look-up found before anything is applied: the references that are missing (problems), and what the
    builders need to know of the referenced objects (facts: ClusterFacts fields by name)."""

    problems: list[Problem] = field(default_factory=list)
    facts: Mapping[str, Any] = field(default_factory=dict)


Missing = Callable[[Reader, Registry], Found]
Waiting = Callable[[Reader, Registry], "list[Problem]"]


@dataclass(frozen=True)
class Checks:
    """missing: before building, what the spec references of this kind (or of the class it makes one from) and the
    cluster lacks; waiting: after applying, the objects of this kind that exist and are not ready yet."""

    missing: Missing | None = None
    waiting: Waiting | None = None


def status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}
