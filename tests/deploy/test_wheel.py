"""The package as it is installed, not the source tree: a wheel built from the checkout, installed into a target
dir of its own, imports, runs its entry points, and its berth-supervise (the registry container's command) runs from
the installed copy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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


def test_the_installed_supervisor_runs_from_the_installed_copy(installed, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(installed), "BERTH_CONFIG": str(tmp_path / "config.yml"),
           "BERTH_REGISTRY_BIN": "/usr/bin/docker-registry"}
    code = "import berth_supervise.main as m; print(m.__file__)"
    where = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           cwd=installed.parent, env=env)
    assert Path(where.stdout.strip()).is_relative_to(installed), where
    supervisor = subprocess.Popen([str(installed / "bin" / "berth-supervise")], stderr=subprocess.PIPE,
                                  cwd=installed.parent, env=env)
    try:
        line = supervisor.stderr.readline()
        assert b"waiting for" in line and str(tmp_path / "config.yml").encode() in line, line
        time.sleep(0.2)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(10) == 143
    finally:
        supervisor.kill()
        supervisor.wait(10)


@pytest.mark.parametrize("command", ["berth-agent", "berth-operator", "berth-crd"])
def test_the_installed_entry_points_start(installed, command):
    result = _run(installed, str(installed / "bin" / command), "--help")
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()
