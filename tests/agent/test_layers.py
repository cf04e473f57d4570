"""The agent's layout holds: no import cycle, and no import from a lower layer to a higher one.

Every import counts, also one inside a function or under TYPE_CHECKING: a cycle hidden that way is still one
a reader has to untangle. docs/design.md ("Map of the agent") names the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import berth_agent

ROOT = Path(berth_agent.__file__).parent

# Lowest first. A module may import from its own package or from a package of a lower rank, never sideways
# into another package of the same rank, never up.
RANKS = {
    "core": 0,
    "kube": 1, "supervisor": 1, "inputs": 1,
    "sources": 2, "render": 2,
    "apply": 3,
    "gc": 4,
    "pipeline": 5,
    "commands": 6,
    "cli": 7,
}


def _module_name(path: Path) -> str:
    parts = ["berth_agent", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The berth_agent modules `name` imports (a package's __init__ when a name comes from the package)."""
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
            # "from pkg import module" imports the module; "from module import name" the module itself
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


def test_no_import_cycle():
    graph = _graph()
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


def test_the_checks_see_imports_of_every_kind(tmp_path):
    """The walker is not blind: relative, absolute, in-function and TYPE_CHECKING imports are all found."""
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nfrom ..core import metrics\nimport berth_agent.core.clock\n"
                      "if TYPE_CHECKING:\n    from ..core.health import Health\n"
                      "def f():\n    from ..core.errors import InputError\n")
    known = {"berth_agent.core.metrics", "berth_agent.core.clock", "berth_agent.core.health",
             "berth_agent.core.errors", "berth_agent.core"}
    assert _imports("berth_agent.apply.mod", source, known) == known - {"berth_agent.core"}
