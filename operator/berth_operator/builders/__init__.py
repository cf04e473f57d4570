"""Pure builders: a Registry (and what the apply layer looked up, ClusterFacts) in, manifests out.

One module per kind of object, each with build(reg, facts) -> dict | None (None: not needed for this spec), the
names of what it builds, and the kind's behaviour (BEHAVIOURS: its builders, prune, checks; behaviour.py), which
kinds.py gathers in the order of the data table (core/kinds.py). What every object shares (the Registry's name,
labels, owner reference) is meta.py's. No I/O here; the apply layer creates and patches what build_all returns.
A kind's checks and grow hook (checks.py) read the cluster only through the Reader the engine hands them.
"""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import http_secret, storage
from .context import ClusterFacts
from .kinds import BUILT_KINDS
from .problems import problems

__all__ = ["ClusterFacts", "build_all", "problems", "storage"]


def build_all(reg: Registry, facts: ClusterFacts, *, http_secret_value: str | None) -> list[dict[str, Any]]:
    """Every object this Registry needs, in creation order (the owned kinds in table order, each kind's builders
    in theirs), none of a kind the cluster does not serve (facts.unserved). The HTTP secret is included only when
    spec.http.secret is absent AND a value is given (the apply layer keeps an existing one and passes None)."""
    objects: list[dict[str, Any]] = []
    for kind in BUILT_KINDS:
        if kind.key in facts.unserved:
            continue
        for build in kind.builders:
            if build is http_secret.build:  # the one builder that takes a value: a fresh secret, or none
                built = build(reg, facts, http_secret_value) if http_secret_value is not None else None
            else:
                built = build(reg, facts)
            if built is not None:
                objects.append(built)
    return objects
