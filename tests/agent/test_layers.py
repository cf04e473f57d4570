"""The agent's layout holds: no import cycle, and no import from a lower layer to a higher one.

Every import counts, also one inside a function or under TYPE_CHECKING (support.common.layers walks them all).
docs/design.md §1.1 names the layers.

Under the ground floor, beside berth_api: berth_supervise, the registry container's own program. The agent reaches
it only through berth_supervise.protocol, the one module that names, writes and reads what the two share, and
spells none of those names, markers or signals itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import berth_agent
from berth_supervise import protocol
from support.common import layers

ROOT = Path(berth_agent.__file__).parent

# Lowest first. A module may import from its own package or from a package of a lower rank, never sideways
# into another package of the same rank, never up.
RANKS = {
    "core": 0,
    "kube": 1, "restart": 1, "mounted": 1, "outbox": 1,
    "sources": 2, "render": 2,
    "apply": 3,
    "gc": 4,
    "pipeline": 5,
    "commands": 6,
    "cli": 7,
}


def test_every_module_has_a_layer_imports_only_down_without_cycles_and_packages_say_what_they_are():
    found = layers.problems(ROOT, "berth_agent", RANKS)
    assert not found, layers.described(found)


def _absolute_imports(path: Path) -> list[str]:
    """Every module an absolute import in `path` names ("from a.b import c": a.b and a.b.c), at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return found


def _reaches_past_the_protocol(path: Path) -> list[str]:
    return [name for name in _absolute_imports(path)
            if name.split(".")[0] == "berth_supervise" and name not in ("berth_supervise", "berth_supervise.protocol")
            and not name.startswith("berth_supervise.protocol.")]


def test_the_agent_reaches_berth_supervise_only_through_its_protocol():
    wrong = {str(path.relative_to(ROOT)): names for path in sorted(ROOT.rglob("*.py"))
             if (names := _reaches_past_the_protocol(path))}
    assert wrong == {}
    # Not blind: the agent does import the protocol, and an import of another module is seen at any depth.
    assert any("berth_supervise.protocol" in _absolute_imports(path) for path in ROOT.rglob("*.py"))


def test_the_protocol_check_sees_every_way_past_it(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from berth_supervise import protocol\nfrom berth_supervise.protocol import CONFIG_NAME\n"
                      "import berth_supervise.spawn\ndef f():\n    from berth_supervise import settings\n"
                      "from berth_supervise.main import Supervisor\n")
    assert sorted(_reaches_past_the_protocol(source)) == [
        "berth_supervise.main", "berth_supervise.main.Supervisor", "berth_supervise.settings", "berth_supervise.spawn"]


def _shared_literals() -> dict[object, str]:
    """Every file name, marker and command-line word of the protocol, by value. CONFIG_NAME aside: config.yml is
    the pod contract's too (berth_api.pod), the registry's config file the agent renders."""
    values: dict[object, str] = {}
    for key, value in vars(protocol).items():
        if (key.endswith(("_NAME", "_MARKER", "_WORD")) and key != "CONFIG_NAME") and isinstance(value, str | bytes):
            values[value] = key
    return values


def _spelled(path: Path, shared: dict[object, str]) -> list[str]:
    """The protocol's values that `path` spells as a literal (docstrings aside), or a marker within one."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    markers = [value for value, key in shared.items() if key.endswith("_MARKER")]
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docstrings or not isinstance(node.value, str | bytes):
            continue
        if node.value in shared:
            found.append(shared[node.value])
        found += [shared[m] for m in markers if (m if isinstance(node.value, bytes) else m.decode()) in node.value
                  and node.value != m]
    return found


def test_the_agent_spells_no_file_marker_or_signal_of_the_protocol():
    """The agent's side names each shared file, marker and signal by the protocol's constant, never by its value."""
    shared = _shared_literals()
    assert len(shared) >= 16
    spelled = {str(path.relative_to(ROOT)): found for path in sorted(ROOT.rglob("*.py"))
               if (found := _spelled(path, shared))}
    assert spelled == {}
    signals = {str(path.relative_to(ROOT)): _signals_named(path) for path in sorted(ROOT.rglob("*.py"))
               if _signals_named(path)}
    assert signals == {}, "the agent names the supervisor's signals by the protocol's constants"


def _signals_named(path: Path) -> list[str]:
    """The protocol's signals `path` names as signal.SIG...: what the agent sends berth-supervise."""
    return [node.attr for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Attribute) and node.attr in ("SIGUSR1", "SIGUSR2", "SIGHUP")]


def test_the_literal_check_sees_a_spelled_name_a_marker_and_a_signal(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text('"""Reads registry-exit, sends SIGHUP (a docstring may say so)."""\nEXIT = "registry-exit"\n'
                      'MARK = b"BERTH_SUPERVISE_GC=1"\nwhy = "lacks BERTH_SUPERVISE_SOCKET=1"\n'
                      "import signal\nsignal.SIGTERM, signal.SIGHUP\n")
    assert sorted(_spelled(source, _shared_literals())) == ["EXIT_NAME", "GC_MARKER", "SOCKET_MARKER"]
    assert _signals_named(source) == ["SIGHUP"]


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
