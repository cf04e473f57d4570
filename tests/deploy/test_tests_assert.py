"""Every test checks something of its own: a test that only calls the code passes against code that does nothing.

A test function (`test_*` in tests/**/test_*.py, nested functions included) holds an `assert`, a `pytest.raises`
or `pytest.fail`, or calls a helper of the tests named `assert_*`, `expect_*` or `check_*` (a leading `_` allowed)
that itself asserts. A product function of such a name (berth_agent's `check_config`) is no helper: a test that
only calls it checks nothing. And a helper of the tests with such a name asserts, so that the name cannot lie.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PREFIXES = ("assert_", "expect_", "check_")
# Tests without an assertion of their own that are allowed to stay so: none. Kept as a list so that an exception
# is explicit and reviewed; the test below fails when the list is not exactly them.
WITHOUT_THEIR_OWN_CHECK_YET: set[str] = set()

Function = ast.FunctionDef | ast.AsyncFunctionDef


@cache
def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(TESTS.rglob("*.py"))}


def _functions(tree: ast.AST) -> list[Function]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def _named_as_checking(name: str) -> bool:
    return name.lstrip("_").startswith(PREFIXES)


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _pytest_check(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "pytest"
            and func.attr in ("raises", "fail"))


def _imported_from_the_product(tree: ast.Module) -> set[str]:
    """Names imported from outside tests/ (the code under test, libraries): never a helper of the tests."""
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and not node.level and (node.module or "").split(".")[0] not in _test_packages()
            for alias in node.names}


@cache
def _test_packages() -> frozenset[str]:
    """What the tests import from tests/ (support, conftest, another test's module)."""
    return frozenset(path.stem for path in TESTS.iterdir() if path.is_dir() or path.suffix == ".py")


def _checks(function: Function, helpers: set[str], foreign: set[str], *, raise_counts: bool) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Assert) or (raise_counts and isinstance(node, ast.Raise)):
            return True
        if isinstance(node, ast.Call):
            if _pytest_check(node):
                return True
            name = _called(node)
            if name in helpers and not (isinstance(node.func, ast.Name) and name in foreign):
                return True
    return False


@cache
def _checking_helpers() -> frozenset[str]:
    """The helpers of the tests named assert_/expect_/check_ that assert (or raise, or call one that does)."""
    named = [(function, _imported_from_the_product(tree)) for tree in _trees().values()
             for function in _functions(tree) if _named_as_checking(function.name)]
    found: set[str] = set()
    while True:  # a helper may delegate to another: grow the set until it holds
        more = {function.name for function, foreign in named
                if function.name not in found and _checks(function, found, foreign, raise_counts=True)}
        if not more:
            return frozenset(found)
        found |= more


def _without_a_check() -> set[str]:
    helpers = set(_checking_helpers())
    return {f"{path.relative_to(TESTS).as_posix()}::{function.name}"
            for path, tree in _trees().items() if path.name.startswith("test_")
            for function in _functions(tree) if function.name.startswith("test")
            and not _checks(function, helpers, _imported_from_the_product(tree), raise_counts=False)}


def test_every_test_checks_something_of_its_own():
    assert _without_a_check() == WITHOUT_THEIR_OWN_CHECK_YET


def test_a_helper_named_as_checking_checks():
    named = {function.name for tree in _trees().values() for function in _functions(tree)
             if _named_as_checking(function.name)}
    assert named - _checking_helpers() == set()


def test_the_scan_sees_what_counts_and_what_does_not():
    """The scan on a file of its own: each kind of check counts, a bare call of a product function does not."""
    tree = ast.parse(
        "from berth_agent.apply.preflight import check_config\n"
        "def check_answer(x):\n    assert x\n"
        "def test_asserts():\n    assert 1\n"
        "def test_raises():\n    with pytest.raises(ValueError):\n        int('x')\n"
        "def test_delegates():\n    check_answer(1)\n"
        "def test_in_a_nested_scenario():\n    async def scenario():\n        assert 1\n"
        "def test_product_call_only():\n    check_config(None)\n"
        "def test_nothing():\n    int('1')\n")
    foreign = _imported_from_the_product(tree)
    assert foreign == {"check_config"}
    helpers = {"check_answer", "check_config"}
    found = {f.name for f in _functions(tree) if f.name.startswith("test")
             and not _checks(f, helpers, foreign, raise_counts=False)}
    assert found == {"test_product_call_only", "test_nothing"}
