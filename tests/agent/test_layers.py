"""The agent's layout holds: no import cycle, and no import from a lower layer to a higher one.

Every import counts, also one inside a function or under TYPE_CHECKING (support.common.layers walks them all).
docs/design.md ("Map of the agent") names the layers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import berth_agent
from support.common import layers

ROOT = Path(berth_agent.__file__).parent

# Lowest first. A module may import from its own package or from a package of a lower rank, never sideways
# into another package of the same rank, never up.
RANKS = {
    "core": 0,
    "kube": 1, "supervisor": 1, "inputs": 1, "outbox": 1,
    "sources": 2, "render": 2,
    "apply": 3,
    "gc": 4,
    "pipeline": 5,
    "commands": 6,
    "cli": 7,
}


def test_every_module_has_a_layer_imports_only_down_without_cycles_and_packages_say_what_they_are():
    layers.check(ROOT, "berth_agent", RANKS)


def test_the_checks_see_imports_of_every_kind(tmp_path):
    """The walker is not blind: relative, absolute, in-function and TYPE_CHECKING imports are all found."""
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nfrom ..core import metrics\nimport berth_agent.core.clock\n"
                      "if TYPE_CHECKING:\n    from ..core.health import Health\n"
                      "def f():\n    from ..core.errors import InputError\n")
    known = {"berth_agent.core.metrics", "berth_agent.core.clock", "berth_agent.core.health",
             "berth_agent.core.errors", "berth_agent.core"}
    assert layers.imports("berth_agent.apply.mod", source, known) == known - {"berth_agent.core"}


def test_a_folder_without_a_rank_fails_the_check():
    with pytest.raises(AssertionError, match="folders without a rank[^\n]*\n  cli$"):
        layers.check(ROOT, "berth_agent", {folder: rank for folder, rank in RANKS.items() if folder != "cli"})


def test_an_upward_import_is_reported():
    edges = {"berth_agent.core.clock": {"berth_agent.apply.applier"}, "berth_agent.apply.applier": set()}
    assert layers.wrong_imports(edges, RANKS) == [
        "berth_agent.core.clock imports berth_agent.apply.applier (core is rank 0, apply rank 3)"]
