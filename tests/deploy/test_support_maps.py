"""tests/support is in subpackages by what they stand up, and each `__init__` is the map of its modules:
a module added without its line in the map, or a line left for a module that went, fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SUPPORT = Path(__file__).resolve().parents[1] / "support"


def _listed(package: Path) -> set[str]:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return set(re.findall(r"^- `(\w+)/?`", doc, re.M))


def test_support_holds_only_subpackages():
    assert sorted(p.name for p in SUPPORT.glob("*.py")) == ["__init__.py"]


def test_the_top_map_names_every_subpackage():
    packages = {p.name for p in SUPPORT.iterdir() if (p / "__init__.py").is_file()}
    assert _listed(SUPPORT) == packages


def test_each_subpackage_map_names_every_module():
    for package in (p for p in SUPPORT.iterdir() if (p / "__init__.py").is_file()):
        modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
        assert _listed(package) == modules, package.name
