"""bench/operator_reconcile.py counts what a user counts (issue 26): it passes a small converge on a real control
plane, and fails, naming the Registry and the reason, when the API server refuses an apply (the operator then
still writes status.observedGeneration, which the bench once took for convergence)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.control_plane import skip_reason

BENCH = Path(__file__).resolve().parents[2] / "bench" / "operator_reconcile.py"
pytestmark = pytest.mark.e2e  # a control plane of its own and the operator as a process, each run


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    return subprocess.run([sys.executable, str(BENCH), "--count", "4", "--idle", "2", "--timeout", "180", *args],
                          capture_output=True, text=True, timeout=280, cwd=BENCH.parents[1])


def test_the_bench_converges_four_registries_with_the_controllers_running():
    result = run_bench()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "converged (every Registry at its generation, none Degraded, every owned object present): " in result.stdout
    assert "refused: none" in result.stdout
    # The controller manager made the pods of the 1 + 1 + 3 + 2 replicas (the scheduler keeps them Pending).
    assert "; 7 pods Pending at the end" in result.stdout
    assert "idle writes (not Events, not the leader Lease): 0 " in result.stdout


def test_a_refused_apply_fails_the_bench():
    result = run_bench("--refuse-apply", "services")
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "FAILED: Registry reg-000" in result.stdout
    assert " Degraded ApplyFailed: apply Service reg-000" in result.stdout
    assert "converged" not in result.stdout
