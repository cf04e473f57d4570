"""Short classes and functions: no class in agent/ or operator/ holds more than 15 attributes, and no
function is over 80 lines, unless docs/design.md §1.4 names it and says why.

Attributes are what a class stores: `self.x = ...` anywhere in it, and the fields it declares in its body. The API
models of `berth_api` (pydantic) are exempt as §1.4 says: their fields are the CRD's schema."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("agent", "operator")
MAX_ATTRIBUTES = 15
MAX_LINES = 80


def _modules():
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            yield path.relative_to(REPO), ast.parse(path.read_text(), str(path))


def attributes(cls: ast.ClassDef) -> set[str]:
    stored = {node.attr for node in ast.walk(cls) if isinstance(node, ast.Attribute)
              and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id == "self"}
    declared = {node.target.id for node in cls.body if isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)}
    return stored | declared


def _is_api_model(path: Path, cls: ast.ClassDef) -> bool:
    return path.parts[:2] == ("agent", "berth_api") and any(
        isinstance(base, ast.Name) and base.id.endswith("Model") or
        isinstance(base, ast.Attribute) and base.attr == "BaseModel" for base in cls.bases)


def _exempt_functions() -> set[str]:
    """`path:function` names in design.md §1.4's table of functions kept long."""
    text = (REPO / "docs" / "design.md").read_text()
    start = text.index("### 1.4 Sizes")
    section = text[start:text.index("\n## ", start)]
    return set(re.findall(r"`([\w/.]+\.py:\w+)`", section))


def test_no_class_holds_more_than_15_attributes():
    large = [f"{path}:{cls.lineno} {cls.name}: {len(attributes(cls))} ({', '.join(sorted(attributes(cls)))})"
             for path, tree in _modules() for cls in ast.walk(tree)
             if isinstance(cls, ast.ClassDef) and len(attributes(cls)) > MAX_ATTRIBUTES
             and not _is_api_model(path, cls)]
    assert large == [], "classes over 15 attributes:\n" + "\n".join(large)


def test_no_function_is_over_80_lines_unless_design_says_why():
    exempt = _exempt_functions()
    long = [f"{path}:{fn.name} ({fn.end_lineno - fn.lineno + 1} lines)" for path, tree in _modules()
            for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            and fn.end_lineno - fn.lineno + 1 > MAX_LINES and f"{path}:{fn.name}" not in exempt]
    assert long == [], "functions over 80 lines (split them, or say why in design.md §1.4):\n" + "\n".join(long)


def test_the_counts_see_what_they_count():
    """The measures themselves, on a class and a function made for it."""
    tree = ast.parse("class A:\n    x: int\n    def f(self):\n        self.a = self.b = 1\n        self.c += 1\n"
                     "        other.d = 2\n")
    assert attributes(tree.body[0]) == {"x", "a", "b", "c"}
    api_model = ast.parse("class S(BaseModel):\n    a: int\n").body[0]
    assert _is_api_model(Path("agent/berth_api/x.py"), api_model)
    assert not _is_api_model(Path("agent/berth_agent/x.py"), api_model)
