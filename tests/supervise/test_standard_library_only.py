"""berth-supervise runs in every registry pod: the standard library only, and nothing heavy of it. It imports
nothing of the agent nor of berth_api (pydantic), and the agent reaches it only through its protocol module
(tests/agent/test_layers.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import berth_supervise

ROOT = Path(berth_supervise.__file__).parent
# What a module of the standard library may still cost: typing 0.4 MiB, dataclasses pulls in inspect (1.5 MiB),
# importlib.metadata email, zipfile and csv (3 MiB); json is loaded only while an old registry's queues are read.
HEAVY = ("typing", "dataclasses", "inspect", "importlib.metadata", "email", "zipfile", "json")


def _imports(path: Path) -> list[str]:
    """The top-level package of every absolute import in `path`, at any depth (relative ones stay inside)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append((node.module or "").split(".")[0])
    return found


def test_every_import_is_of_the_standard_library():
    outside = {f"{path.name}: {name}" for path in sorted(ROOT.glob("*.py")) for name in _imports(path)
               if name not in sys.stdlib_module_names and name != "__future__"}
    assert outside == set()
    assert {"berth_agent", "berth_api", "pydantic"}.isdisjoint(sys.stdlib_module_names)  # so the above sees them


def test_starting_it_loads_nothing_heavy_and_nothing_of_the_agent():
    code = ("import sys; before = set(sys.modules); import berth_supervise.main; "
            "print(*sorted(set(sys.modules) - before))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            timeout=60).stdout.split()
    assert "berth_supervise.protocol" in loaded and "berth_supervise.main" in loaded
    assert [name for name in loaded if name.split(".")[0] in ("berth_agent", "berth_api", "pydantic")] == []
    assert [name for name in loaded if name in HEAVY or name.startswith(tuple(f"{h}." for h in HEAVY))] == []
