"""The package as it is installed, not the source tree: a wheel built from the checkout, installed into a target
dir of its own, imports, runs both entry points and finds supervise.sh where the agent looks for it (package data
of berth_agent.supervisor)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(root / "dist"),
                    str(REPO)], check=True, capture_output=True, timeout=300)
    (wheel,) = (root / "dist").glob("berth-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(root / "site"),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    return root / "site"


def _run(installed: Path, *args: str) -> subprocess.CompletedProcess:
    # The installed copy first on the path, run from outside the checkout: nothing can come from the source tree.
    env = {**os.environ, "PYTHONPATH": str(installed)}
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=installed.parent, env=env)


def test_the_installed_wheel_finds_supervise_sh_as_the_agent_does(installed):
    code = ("import berth_agent, sys\n"
            "from berth_agent.supervisor.script import supervisor_script\n"
            "print(berth_agent.__file__)\n"
            "sys.stdout.flush()\n"
            "sys.stdout.buffer.write(supervisor_script())\n")
    result = _run(installed, sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    where, _, script = result.stdout.partition("\n")
    assert Path(where).is_relative_to(installed), where
    assert script.encode() == (REPO / "agent/berth_agent/supervisor/supervise.sh").read_bytes()


@pytest.mark.parametrize("command", ["berth-agent", "berth-operator", "berth-crd"])
def test_the_installed_entry_points_start(installed, command):
    result = _run(installed, str(installed / "bin" / command), "--help")
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()
