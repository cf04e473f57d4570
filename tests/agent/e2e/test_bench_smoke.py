"""Keep the agent benchmarks from rotting: run one with a tiny N and check what it prints (not how fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
pytestmark = pytest.mark.e2e  # each runs a benchmark: real agents, supervisors and registries


def test_inflight_benchmark_runs_and_counts_no_failure():
    result = subprocess.run([sys.executable, str(BENCH / "agent_inflight.py"), "--reloads", "2", "--pullers", "1"],
                            capture_output=True, text=True, timeout=240, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "reloads: 2 " in result.stdout
    assert "failed requests: 0 " in result.stdout


def test_api_secret_benchmark_runs_and_applies_every_rotation_from_the_api():
    result = subprocess.run([sys.executable, str(BENCH / "agent_api_secret_latency.py"), "--rotations", "2"],
                            capture_output=True, text=True, timeout=240, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "restarts 2, applied via the API path 2 of 2" in result.stdout


def test_swap_benchmark_runs_and_times_every_swap_with_no_failed_pull():
    result = subprocess.run([sys.executable, str(BENCH / "agent_swap_latency.py"), "--swaps", "2", "--pullers", "1"],
                            capture_output=True, text=True, timeout=240, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(n=2)" in result.stdout.split("swap-to-serving", 1)[1].splitlines()[0]
    assert "pull load: 1 clients, " in result.stdout and " 0 failed," in result.stdout


def test_gc_window_benchmark_times_the_command_and_checks_what_it_deleted():
    result = subprocess.run([sys.executable, str(BENCH / "gc_window.py"), "--mode", "command", "--images", "4",
                             "--layers", "1", "--rounds", "1", "--no-v3"],
                            capture_output=True, text=True, timeout=240, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "registry 2.8: store of 12 blobs in 4 images (6 blobs unreferenced" in result.stdout
    assert "registry 2.8: garbage-collect: median " in result.stdout and "deleted 6 blobs" in result.stdout


def test_gc_window_benchmark_runs_the_agent_flow_and_pulls_never_fail():
    result = subprocess.run([sys.executable, str(BENCH / "gc_window.py"), "--mode", "flow", "--replicas", "1",
                             "--images", "4", "--layers", "1", "--rounds", "1"],
                            capture_output=True, text=True, timeout=240, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "flow, 1 replica: read-only window, as a client sees it" in result.stdout
    assert "flow, 1 replica: GC duration" in result.stdout
    assert "failed 0 (target 0)" in result.stdout


def test_token_rotation_benchmark_runs_and_restarts_once_per_change():
    result = subprocess.run([sys.executable, str(BENCH / "agent_token_rotation.py"), "--changes", "2"],
                            capture_output=True, text=True, timeout=240, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "restarts 2 of 2 changes" in result.stdout and " 0 failed," in result.stdout


def test_proxy_benchmark_runs_and_restarts_once_per_credential_change():
    result = subprocess.run([sys.executable, str(BENCH / "proxy_pull.py"), "--rounds", "1", "--layers", "1",
                             "--layer-mib", "1", "--changes", "2"],
                            capture_output=True, text=True, timeout=240, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "cold pull through the cache (every blob a miss): " in result.stdout
    assert "restarts 2 of 2 changes" in result.stdout


def test_supervisor_cost_benchmark_measures_the_supervisor_and_refuses_nothing():
    result = subprocess.run([sys.executable, str(BENCH / "supervisor_cost.py"), "--starts", "2", "--idle", "1",
                             "--reloads", "2", "--clients", "1"],
                            capture_output=True, text=True, timeout=240, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Distribution 2.8" in result.stdout and "berth-supervise: RSS " in result.stdout
    if "Distribution 3" in result.stdout:  # with BERTH_REGISTRY3_BIN: the held socket's reloads
        assert "held socket, 2 reloads under 1 new-connection clients: " in result.stdout
        assert ", 0 refused, " in result.stdout and ", 0 failed;" in result.stdout


def test_outbox_benchmark_stores_and_delivers_every_event(tmp_path):
    result = subprocess.run([sys.executable, str(BENCH / "outbox_relay.py"), "--events", "200", "--concurrency", "4",
                             "--held", "300", "--dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=240, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "200 events, 1 poster(s) at once: stored " in result.stdout
    assert "delivered 400 of 400 events, 400 distinct" in result.stdout
    assert "holding 300 events" in result.stdout


def test_memory_benchmark_prints_the_agents_rss_and_breakdown_with_features_off_and_on():
    result = subprocess.run([sys.executable, str(BENCH / "agent_memory.py"), "--seconds", "1", "--no-trace",
                             "--top", "3", "--operator-count", "0"],
                            capture_output=True, text=True, timeout=300, cwd=BENCH.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    for line in ("agent, features off: RSS ", "agent, features on: RSS ", "imports: ", "threads (",
                 "agent, features on against off: ", "agent RSS summary: off ", "operator: skipped"):
        assert line in result.stdout, (line, result.stdout)
