"""bench/operator_reconcile.py counts what a user counts: it passes a small converge on a real control
plane, and fails, naming the Registry and the reason, when the API server refuses an apply (the operator then
still writes status.observedGeneration, which the bench once took for convergence)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.clusters.control_plane import skip_reason

BENCH = Path(__file__).resolve().parents[2] / "bench" / "operator_reconcile.py"
FLOOR = BENCH.parent / "control_plane_floor.py"
pytestmark = pytest.mark.e2e  # a control plane of its own and the operator as a process, each run


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    return subprocess.run([sys.executable, str(BENCH), "--count", "4", "--idle", "2", "--timeout", "180", *args],
                          capture_output=True, text=True, timeout=280, cwd=BENCH.parents[1])


def test_the_bench_converges_four_registries_with_the_controllers_running(tmp_path):
    result = run_bench("--probe-memory", str(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    # The memory probe sampled the operator (one process), its caches and kept bodies among the figures.
    [samples] = list(tmp_path.glob("*.jsonl"))
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    assert lines and not [line for line in lines if "error" in line], lines[:3]
    assert lines[-1]["VmHWM"] > 0 and lines[-1]["bodies"][0] == 4 and lines[-1]["caches"]["Deployment"][0] == 4
    assert ("converged (every Registry at its generation, none Degraded but for Unschedulable, every owned object "
            "present): ") in result.stdout
    assert "refused: none" in result.stdout
    # The controller manager made the pods of the 1 + 1 + 3 + 2 replicas (the scheduler keeps them Pending).
    assert "; 7 pods Pending at the end" in result.stdout
    assert "idle writes (not Events, not the leader Lease): 0 " in result.stdout


def test_the_floor_writes_what_the_builders_make_and_waits_for_the_controllers():
    """bench/control_plane_floor.py: the same objects without an operator, the same wait for the controllers."""
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    result = subprocess.run([sys.executable, str(FLOOR), "--count", "4", "--timeout", "180"],
                            capture_output=True, text=True, timeout=280, cwd=BENCH.parents[1])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    # Per spec (inmemory, filesystem from a class, COSI from classes, the existing claim): 9 + 10 + 12 + 10 objects
    # (the COSI one and the claim one with a PDB), each with its status patch and Event.
    assert "every object written: " in result.stdout and " (49 requests, 12.2 per Registry)" in result.stdout
    assert "controllers quiet (every pod made, every Deployment status caught up): " in result.stdout


def test_a_refused_apply_fails_the_bench():
    result = run_bench("--refuse-apply", "services")
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "FAILED: Registry reg-000" in result.stdout
    assert " Degraded ApplyFailed: apply Service reg-000" in result.stdout
    assert "converged" not in result.stdout


def test_an_operator_error_line_is_found_in_kopfs_json_format():
    """The lines the bench fails on, as berth-operator's formatter (kopf's JSON) writes them."""
    import importlib.util
    import logging

    from kopf._core.actions.loggers import ObjectJsonFormatter

    spec = importlib.util.spec_from_file_location("operator_reconcile", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    formatter = ObjectJsonFormatter()

    def line(level: int, message: str) -> str:
        return formatter.format(logging.LogRecord("berth.operator", level, __file__, 1, message, (), None))

    log = "\n".join([line(logging.INFO, "reconciled Registry bench/reg-0000 (create): no writes; not degraded"),
                     line(logging.WARNING, "cache of Pod in bench: HTTP 500; listing again in 2 s"),
                     line(logging.ERROR, "periodic reconcile of Registry bench/reg-0001 failed"),
                     line(logging.CRITICAL, "stopping")])
    errors = bench.error_lines(log)
    assert len(errors) == 2, errors
    assert "reg-0001 failed" in errors[0] and "stopping" in errors[1]
    assert bench.error_lines(line(logging.INFO, "all good")) == []
