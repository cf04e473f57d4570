"""The behaviour table: what Berth does with each kind (behaviour.Behaviour), gathered from the builder modules,
each of which declares its kinds' behaviours in BEHAVIOURS beside their builders, in the order of the data table
(core/kinds.py: creation order). A new kind is its builder module (builders, name, checks and BEHAVIOURS), its row
in core/kinds.py and its ClusterRole rule; nothing here names it.

The data table and the behaviours must agree, or importing this fails: every behaviour is of a kind in the data
table, no kind has two, and a kind has builders exactly when its row says how it is written (applied).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from ..core.kinds import TABLE, Kind
from .behaviour import Behaviour


def _modules() -> list[ModuleType]:
    """Every module of this package (each imported once: the builders import each other anyway)."""
    return [importlib.import_module(f"{__package__}.{module.name}")
            for module in pkgutil.iter_modules([str(Path(__file__).parent)])]


def _declared(modules: Iterable[ModuleType]) -> dict[tuple[str, str], Behaviour]:
    """The modules' BEHAVIOURS, by kind; a kind declared twice is refused."""
    found: dict[tuple[str, str], Behaviour] = {}
    where: dict[tuple[str, str], str] = {}
    for module in modules:
        for behaviour in getattr(module, "BEHAVIOURS", ()):
            if behaviour.key in found:
                raise TypeError(f"{behaviour.kind} ({behaviour.api_version}) has two behaviours: in "
                                f"{where[behaviour.key]} and in {module.__name__}")
            found[behaviour.key], where[behaviour.key] = behaviour, module.__name__
    return found


def _in_table_order(declared: dict[tuple[str, str], Behaviour],
                    table: tuple[Kind, ...] = TABLE) -> dict[tuple[str, str], Behaviour]:
    """The behaviours in the data table's order, once both are known to agree."""
    unknown = sorted(set(declared) - {kind.key for kind in table})
    if unknown:
        raise TypeError(f"behaviours of kinds core/kinds.py has no row for: {unknown}")
    for kind in table:
        made = bool(declared.get(kind.key, Behaviour(*kind.key)).builders)
        if made != kind.owned:
            raise TypeError(f"{kind.kind} ({kind.api_version}): core/kinds.py says applied={kind.applied!r}, but "
                            f"its behaviour has {'builders' if made else 'no builders'}")
    return {kind.key: declared[kind.key] for kind in table if kind.key in declared}


BEHAVIOURS: dict[tuple[str, str], Behaviour] = _in_table_order(_declared(_modules()))
# build_all's order: the owned kinds in table order, each kind's builders in theirs.
BUILT_KINDS: tuple[Behaviour, ...] = tuple(b for b in BEHAVIOURS.values() if b.builders)
PRUNABLE_KINDS: tuple[Behaviour, ...] = tuple(b for b in BEHAVIOURS.values() if b.prune is not None)
NEEDED_BY: tuple[Behaviour, ...] = tuple(b for b in BEHAVIOURS.values() if b.needed_by is not None)
# The kinds with a missing check, in table order (engine/facts.look_up runs those every cluster serves before the
# missing APIs, the served optional ones after).
MISSING_CHECKED: tuple[Behaviour, ...] = tuple(b for b in BEHAVIOURS.values() if b.checks and b.checks.missing)
# The kinds with a waiting check, in table order: the order the Progressing message joins their waits in.
WAITING_CHECKED: tuple[Behaviour, ...] = tuple(b for b in BEHAVIOURS.values() if b.checks and b.checks.waiting)
# The kinds that grow in place, in table order (engine/expansion.expand).
GROWN: tuple[Behaviour, ...] = tuple(b for b in BEHAVIOURS.values() if b.checks and b.checks.grow)


def behaviour(api_version: str, kind: str) -> Behaviour | None:
    """The kind's behaviour; None: Berth does nothing with it but what its data row says."""
    return BEHAVIOURS.get((api_version, kind))
