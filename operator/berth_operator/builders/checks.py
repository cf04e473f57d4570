"""What a kind's behaviour (behaviour.py) says about its objects in the cluster: what the spec references and
is missing, what exists but is not ready yet, and how a live object grows in place. The checks live
beside each kind's builder and only read, through a Reader the engine hands them (engine/facts.py), so the builders
stay free of side effects: the engine writes what they return (engine/expansion.py patches a Growth).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from berth_api import Registry


class Problem(NamedTuple):
    """A condition reason (engine/status.py lists them) and a message that starts with the field: what a check
    found, or what problems.problems() finds in a spec that cannot be carried out as written."""

    reason: str
    message: str


class Reader(Protocol):
    """A read-only view of the cluster."""

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None: ...

    def class_missing(self, api_version: str, kind: str, name: str) -> bool:
        """A cluster-scoped class the spec names: True only when it is known to be absent (a class the operator
        may not read is given the benefit)."""
        ...

    def get_class(self, api_version: str, kind: str, name: str) -> tuple[Mapping[str, Any] | None, bool]:
        """(the cluster-scoped class or None, whether the operator could read it)."""
        ...


@dataclass(frozen=True)
class Found:
    """What a look-up found before anything is applied: the references that are missing (problems), and what the
    builders need to know of the referenced objects (facts: ClusterFacts fields by name)."""

    problems: list[Problem] = field(default_factory=list)
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Growth:
    """What a grow hook decided about one live object: patch (JSON-patch operations; none: leave it as it is, and
    report problems), grown (reported once the patch is written), refused (reported, with the API server's answer
    appended, when it refuses the patch)."""

    patch: tuple[Mapping[str, Any], ...] = ()
    problems: tuple[Problem, ...] = ()
    grown: Problem | None = None
    refused: Problem | None = None


@dataclass(frozen=True)
class Grow:
    """The one field of a live object the operator changes in place (a create-only kind's): target, the name of the
    object in the Registry's namespace (None: none to grow); plan, given a Reader, the Registry and the live object,
    its Growth."""

    target: Callable[[Registry], str | None]
    plan: Callable[[Reader, Registry, Mapping[str, Any]], Growth]


Missing = Callable[[Reader, Registry], Found]
Waiting = Callable[[Reader, Registry], "list[Problem]"]


@dataclass(frozen=True)
class Checks:
    """missing: before building, what the spec references of this kind (or of the class it makes one from) and the
    cluster lacks; waiting: after applying, the objects of this kind that exist and are not ready yet; grow: after
    applying, the object the spec asks to grow (engine/expansion.py reads it and writes the patch)."""

    missing: Missing | None = None
    waiting: Waiting | None = None
    grow: Grow | None = None


def status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}
