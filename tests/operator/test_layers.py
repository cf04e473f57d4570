"""The operator's layout holds (issue 27), as the agent's does (tests/agent/test_layers.py): no import cycle, and no
import from a lower layer to a higher one or sideways into another package of the same rank. Every import counts,
also one inside a function or under TYPE_CHECKING. docs/design.md ("Map of the operator") names the layers.

Across the repository too: berth_api imports neither program, and neither program imports the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import berth_agent
import berth_api
import berth_operator

ROOT = Path(berth_operator.__file__).parent

# Lowest first. A module may import from its own package or from a package of a lower rank.
RANKS = {
    "core": 0,
    "kube": 1, "builders": 1,
    "cluster": 2,
    "engine": 3,
    "reactor": 4,
    "cli": 5,
    "__main__": 6,
}
PROGRAMS = {"berth_api": 0, "berth_agent": 1, "berth_operator": 1}


def _module_name(root: Path, package: str, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path = ROOT, package: str = "berth_operator") -> dict[str, Path]:
    return {_module_name(root, package, p): p for p in sorted(root.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports (a package's __init__ when a name comes from the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_sits_in_a_known_layer():
    assert {_layer(name) for name in _graph()} - {None} == set(RANKS)


def test_no_import_goes_up_or_sideways_into_another_package():
    wrong = []
    for name, targets in _graph().items():
        here = _layer(name)
        for target in targets:
            there = _layer(target)
            if here is None or there is None or there == here:
                continue
            if RANKS[there] >= RANKS[here]:
                wrong.append(f"{name} imports {target} ({here} is rank {RANKS[here]}, {there} rank {RANKS[there]})")
    assert not wrong, "\n".join(sorted(wrong))


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "\n".join(cycles)


def test_every_package_says_what_it_is_for_and_its_exports_resolve():
    import importlib

    for name in sorted(_graph()):
        if _layer(name) is None or not (ROOT / name.split(".", 1)[1].replace(".", "/") / "__init__.py").exists():
            continue
        package = importlib.import_module(name)
        assert (package.__doc__ or "").strip(), f"{name} has no docstring"
        for export in getattr(package, "__all__", ()):
            assert getattr(package, export) is not None, f"{name}.{export}"


def test_across_the_repository_no_program_imports_the_other_and_the_api_imports_neither():
    roots = {pkg.__name__: Path(pkg.__file__).parent for pkg in (berth_api, berth_agent, berth_operator)}
    modules = {name: path for package, root in roots.items() for name, path in _modules(root, package).items()}
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
    modules = _modules(package, "berth_operator")
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    assert graph["berth_operator.kube.client"] == {"berth_operator.engine.apply"}
    assert graph["berth_operator.engine.apply"] == {"berth_operator.kube.client"}
    assert _cycles(graph)
