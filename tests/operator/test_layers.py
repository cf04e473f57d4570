"""The operator's layout holds, as the agent's does (tests/agent/test_layers.py): no import cycle, and no
import from a lower layer to a higher one or sideways into another package of the same rank. Every import counts,
also one inside a function or under TYPE_CHECKING (support.common.layers walks them all). docs/design.md §1.2
names the layers.

Across the repository too: berth_api and berth_supervise (the ground floor) import neither program nor each other,
and neither program imports the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import berth_agent
import berth_api
import berth_operator
import berth_supervise
from support.common import layers

ROOT = Path(berth_operator.__file__).parent

# Lowest first. A module may import from its own package or from a package of a lower rank.
RANKS = {
    "core": 0,
    "builders": 1,
    "kube": 2,
    "cluster": 3,
    "engine": 4,
    "reactor": 5,
    "cli": 6,
    "__main__": 7,
}
PROGRAMS = {"berth_api": 0, "berth_supervise": 0, "berth_agent": 1, "berth_operator": 1}


def test_every_module_has_a_layer_imports_only_down_without_cycles_and_packages_say_what_they_are():
    found = layers.problems(ROOT, "berth_operator", RANKS)
    assert not found, layers.described(found)


def test_across_the_repository_no_program_imports_the_other_and_the_api_imports_neither():
    packages = (berth_api, berth_supervise, berth_agent, berth_operator)
    roots = {pkg.__name__: Path(pkg.__file__).parent for pkg in packages}
    modules = {name: path for package, root in roots.items() for name, path in layers.modules(root, package).items()}
    wrong = []
    for name, path in modules.items():
        here = name.split(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for target in targets:
                there = target.split(".")[0]
                if there in PROGRAMS and there != here and PROGRAMS[there] >= PROGRAMS[here]:
                    wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_checks_see_imports_of_every_kind(tmp_path):
    """The walker is not blind: relative, absolute, in-function and TYPE_CHECKING imports are all found."""
    package = tmp_path / "berth_operator"
    (package / "engine").mkdir(parents=True)
    (package / "kube").mkdir()
    for init in (package / "__init__.py", package / "engine" / "__init__.py", package / "kube" / "__init__.py"):
        init.write_text("")
    (package / "kube" / "client.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..engine import apply\n")
    (package / "engine" / "apply.py").write_text(
        "def f():\n    from berth_operator.kube import client\n")
    graph = layers.graph(package, "berth_operator")
    assert graph["berth_operator.kube.client"] == {"berth_operator.engine.apply"}
    assert graph["berth_operator.engine.apply"] == {"berth_operator.kube.client"}
    assert layers.cycles(graph)
    assert layers.wrong_imports(graph, RANKS) == [
        "berth_operator.kube.client imports berth_operator.engine.apply (kube is rank 2, engine rank 4)"]
