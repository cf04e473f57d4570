"""Pure builders: a Registry (and what the apply layer looked up, ClusterFacts) in, manifests out.

One module per kind of object, each with build(reg, facts) -> dict | None (None: not needed for this spec).
No I/O here; the apply layer creates and patches what build_all returns.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from berth_api import Registry

from ..core.kinds import OWNED_KINDS
from . import names, storage
from .context import ClusterFacts
from .problems import problems

__all__ = ["ClusterFacts", "build_all", "problems", "names", "storage"]

Builder = Callable[..., "dict[str, Any] | None"]
HTTP_SECRET = "http_secret.build"  # the one builder that takes a value: a fresh secret, or none (keep the old)


def _builder(name: str) -> Builder:
    """builders/<module>.<function>, as the table of kinds names it."""
    module, _, function = name.partition(".")
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)


# Creation order: the owned kinds in table order (core.kinds.TABLE), each kind's builders in its order.
_BUILDERS: tuple[tuple[str, Builder], ...] = tuple(
    (name, _builder(name)) for kind in OWNED_KINDS for name in kind.builders)


def build_all(reg: Registry, facts: ClusterFacts, *, http_secret_value: str | None) -> list[dict[str, Any]]:
    """Every object this Registry needs, in creation order. The HTTP secret is included only when
    spec.http.secret is absent AND a value is given (the apply layer keeps an existing one and passes None)."""
    objects: list[dict[str, Any]] = []
    for name, build in _BUILDERS:
        if name == HTTP_SECRET:
            built = build(reg, facts, http_secret_value) if http_secret_value is not None else None
        else:
            built = build(reg, facts)
        if built is not None:
            objects.append(built)
    return objects
