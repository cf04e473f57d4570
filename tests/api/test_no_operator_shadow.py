"""`import operator` means the standard library, whichever way Python is started from the repository.

The repository has a directory named operator/ (the operator's source root). It must never become an
importable top-level module: the standard library's operator is imported by collections, dataclasses,
pydantic and nearly everything else.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from api.admission import REPO

STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()
SOURCE_ROOTS = ["", "agent", "operator", "tests"]


@pytest.mark.parametrize(
    "extra_path",
    [pytest.param("", id="repo-root"), pytest.param(os.pathsep.join(SOURCE_ROOTS), id="every-source-root")],
)
def test_import_operator_is_the_standard_library(extra_path: str) -> None:
    environment = {**os.environ, "PYTHONPATH": extra_path}
    # -c puts the current directory (the repo root) first on sys.path, as `python -m ...` from there does.
    # Python's startup has usually imported operator already, so the path search is asked directly too.
    script = (
        "import importlib.machinery, operator; "
        "print(importlib.machinery.PathFinder.find_spec('operator').origin); "
        "print(operator.__file__); print(operator.attrgetter('real')(1))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    found_on_path, module_file, value = result.stdout.split()
    assert Path(found_on_path).resolve().parent == STDLIB
    assert Path(module_file).resolve().parent == STDLIB
    assert value == "1"


def test_no_source_root_holds_a_module_named_operator() -> None:
    for root in SOURCE_ROOTS:
        directory = REPO / root
        assert not (directory / "operator.py").exists(), directory
        assert not (directory / "operator" / "__init__.py").exists(), directory
