"""What Berth does with the objects of one kind, declared beside the kind's builder: each builder module lists its
kinds' behaviours in BEHAVIOURS, and kinds.py gathers them. The kind's data (its URL path, how it is written, its
optional API, its verbs) is its row in core/kinds.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from berth_api import Registry

from ..core.kinds import Kind, lookup
from .checks import Checks

Builder = Callable[..., "dict[str, Any] | None"]
Names = Callable[[Registry], "str | tuple[str, ...]"]
Fields = Callable[[Registry], "tuple[str, ...]"]
Refusal = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Behaviour:
    """One kind's behaviour. builders: what makes it, in creation order (empty: Berth reads it only); prune: the
    names function of the object (or the objects) a Registry no longer needs, which the apply layer deletes;
    needed_by: the spec fields of a Registry that need this kind of an optional API (none: it needs no object of
    it); must_replace(live, wanted): the API server refuses that change in place, so the apply layer deletes the
    object and creates it again; checks: its missing and waiting checks (checks.py), which engine/facts.py runs,
    and its grow hook (the one field a create-only object changes in place), which engine/expansion.py runs."""

    api_version: str
    kind: str
    builders: tuple[Builder, ...] = ()
    prune: Names | None = None
    needed_by: Fields | None = None
    must_replace: Refusal | None = None
    checks: Checks | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.api_version, self.kind

    @property
    def data(self) -> Kind:
        """The kind's row in core/kinds.py."""
        return lookup(self.api_version, self.kind)
