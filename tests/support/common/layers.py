"""A program's import graph, for the layer tests of the agent (tests/agent/test_layers.py) and the operator
(tests/operator/test_layers.py): every import counts, also one inside a function or under TYPE_CHECKING (a cycle
hidden that way is still one a reader has to untangle). Each test names its own ranks (docs/design.md §1.1 and §1.2).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Mapping
from pathlib import Path


def module_name(root: Path, package: str, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path, package: str) -> dict[str, Path]:
    return {module_name(root, package, p): p for p in sorted(root.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
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
            # "from pkg import module" imports the module; "from module import name" the module itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def graph(root: Path, package: str) -> dict[str, set[str]]:
    found = modules(root, package)
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def layer(name: str) -> str | None:
    """The top-level folder (or module) of the program a module is in; None for the package itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def wrong_imports(edges: Mapping[str, set[str]], ranks: Mapping[str, int]) -> list[str]:
    """Imports that go up, or sideways into another folder of the same rank."""
    wrong = []
    for name, targets in edges.items():
        here = layer(name)
        for target in targets:
            there = layer(target)
            if here not in ranks or there not in ranks or there == here:
                continue  # the package itself, its own folder, or a folder with no rank (check() names it)
            if ranks[there] >= ranks[here]:
                wrong.append(f"{name} imports {target} ({here} is rank {ranks[here]}, {there} rank {ranks[there]})")
    return sorted(wrong)


def cycles(edges: Mapping[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                found.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def package_problems(root: Path, edges: Mapping[str, set[str]]) -> list[str]:
    """Folders without a docstring in their __init__, or with an __all__ entry that does not resolve."""
    problems = []
    for name in sorted(edges):
        if layer(name) is None or not (root / name.split(".", 1)[1].replace(".", "/") / "__init__.py").exists():
            continue
        package = importlib.import_module(name)
        if not (package.__doc__ or "").strip():
            problems.append(f"{name} has no docstring")
        problems += [f"{name}.{export}" for export in getattr(package, "__all__", ())
                     if getattr(package, export) is None]
    return problems


def problems(root: Path, package: str, ranks: Mapping[str, int]) -> dict[str, list]:
    """Every problem, by kind (none: the layout holds): a folder with no rank, an import up or sideways, a cycle,
    a folder that does not say what it is for (or exports what it lacks)."""
    edges = graph(root, package)
    found = {
        "folders without a rank (or ranks without a folder)": sorted(({layer(n) for n in edges} - {None}) ^ set(ranks)),
        "imports up or sideways": wrong_imports(edges, ranks),
        "import cycles": cycles(edges),
        "packages": package_problems(root, edges),
    }
    return {what: items for what, items in found.items() if items}


def described(found: Mapping[str, list]) -> str:
    """problems() as a failure says them: each kind, then its items."""
    return "\n".join(f"{what}:\n  " + "\n  ".join(map(str, items)) for what, items in found.items())


def check(root: Path, package: str, ranks: Mapping[str, int]) -> None:
    """Fail naming every problem()."""
    found = problems(root, package, ranks)
    assert not found, described(found)
