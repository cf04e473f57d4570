"""`berth-operator` as a process: liveness endpoint, Prometheus metrics, JSON logs, a clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from support.clusters.operator_harness import REGISTRIES_PATH, wait_for
from support.common.ports import free_port, wait_for_port

NS = "cli"


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


def test_berth_operator_process(kube_api, tmp_path):
    live_port, metrics_port = free_port(), free_port()
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                     "metadata": {"name": "proc", "namespace": NS},
                     "spec": {"config": {"storage": {"inmemory": {}}}}})
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "POD_NAME")}
    env.update(KUBECONFIG=str(kube_api.kubeconfig), BERTH_AGENT_IMAGE="ghcr.io/berth-dev/berth:test")
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "berth_operator", "--namespace", NS,
             "--liveness", f"http://127.0.0.1:{live_port}/healthz",
             "--metrics-port", str(metrics_port), "--metrics-addr", "127.0.0.1"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    try:
        wait_for(lambda: (kube_api.get(REGISTRIES_PATH, NS, "proc").get("status") or {}).get("conditions"),
                 "the process to reconcile")
        wait_for_port(live_port)
        status, _ = get(f"http://127.0.0.1:{live_port}/healthz")
        assert status == 200
        wait_for_port(metrics_port)
        _, metrics = get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert 'berth_operator_reconciles_total{result="ok"}' in metrics
        assert "berth_operator_reconcile_duration_seconds_bucket" in metrics
        assert 'berth_operator_apply_operations_total{kind="Deployment",verb="created"} 1.0' in metrics
        assert 'berth_operator_registries{condition="Ready",status="False"} 1.0' in metrics
        assert kube_api.get("apps/v1/deployments", NS, "proc") is not None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("berth-operator did not stop on SIGTERM")
    assert code == 0
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert any("reconciled Registry cli/proc" in r.get("message", "") for r in records)


def test_berth_operator_refuses_to_start_without_a_scope(capsys):
    from berth_operator.cli import parse_args

    env_before = os.environ.pop("WATCH_NAMESPACE", None)
    try:
        with pytest.raises(SystemExit):
            parse_args([])
        assert "--all-namespaces" in capsys.readouterr().err
        assert parse_args(["-A"]).all_namespaces
        assert parse_args(["-n", "a", "-n", "b"]).namespace == ["a", "b"]
    finally:
        if env_before is not None:
            os.environ["WATCH_NAMESPACE"] = env_before


def test_berth_operator_without_an_agent_image_says_why(kube_api, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("BERTH_AGENT_IMAGE", "POD_NAME", "POD_NAMESPACE")}
    env["KUBECONFIG"] = str(kube_api.kubeconfig)
    done = subprocess.run([sys.executable, "-m", "berth_operator", "-A", "--metrics-port", "0", "--liveness", ""],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "BERTH_AGENT_IMAGE" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr + done.stdout


def test_help_shows_every_default_and_the_endpoints():
    result = subprocess.run([sys.executable, "-m", "berth_operator", "--help"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())  # argparse wraps lines
    for default in ("(default: http://0.0.0.0:8080/healthz)", "(default: 9090)", "(default: 0.0.0.0)",
                    "(default: 60)", "(default: info)", "(default: json)", "default: $WATCH_NAMESPACE"):
        assert default in text
    assert "/healthz" in text.split("endpoints:", 1)[1] and "/metrics" in text.split("endpoints:", 1)[1]
