"""`berth-agent run` argument and start-up errors: one JSON line, an exit status, never a traceback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "berth_agent.cli", "run", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_a_malformed_registry_name_exits_2_with_one_json_line(tmp_path):
    result = _run("--registry", "just-a-name", "--config-dir", str(tmp_path), "--health-addr", "127.0.0.1:0")
    assert result.returncode == 2
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert lines[-1]["msg"] == "bad arguments" and "NAMESPACE/NAME" in lines[-1]["error"]
    assert "Traceback" not in result.stderr


def test_a_taken_health_port_exits_1_without_a_traceback(tmp_path):
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text("apiVersion: berth.dev/v1alpha1\nkind: Registry\nmetadata: {name: r}\n"
                             "spec: {config: {storage: {inmemory: {}}}, http: {addr: '127.0.0.1:5999'}}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run("--registry-file", str(registry_file), "--config-dir", str(tmp_path / "config"),
                      "--mounts", str(tmp_path / "mounts"), "--data-dir", str(tmp_path),
                      "--health-addr", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert json.loads(result.stderr.splitlines()[-1])["msg"] == "cannot start"
    assert "Traceback" not in result.stderr


def test_an_unusable_kubeconfig_exits_2_naming_it_without_a_traceback(tmp_path):
    missing = tmp_path / "no-such-kubeconfig"
    exec_plugin = tmp_path / "exec-kubeconfig"
    exec_plugin.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                           "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
                           "users: [{name: u, user: {exec: {command: aws}}}]\n"
                           "contexts: [{name: c, context: {cluster: k, user: u}}]\n")
    for kubeconfig, needle in ((missing, str(missing)), (exec_plugin, "exec")):
        result = _run("--registry", "ns/reg", "--kubeconfig", str(kubeconfig), "--config-dir", str(tmp_path),
                      "--mounts", str(tmp_path / "mounts"), "--health-addr", "127.0.0.1:0")
        assert result.returncode == 2, result.stderr
        line = json.loads(result.stderr.splitlines()[-1])
        assert line["msg"] == "cannot configure the API client" and needle in line["error"], line
        assert "Traceback" not in result.stderr


def test_help_names_the_endpoints_and_every_default():
    result = _run("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())  # argparse wraps lines
    for endpoint in ("/startupz", "/readyz", "/livez", "/metrics"):
        assert endpoint in text
    for option in ("--mounts", "--config-dir", "--data-dir", "--health-addr", "--debounce",
                   "--max-wait", "--resync", "--log-level"):
        described = text.split(f"{option} ", 2)[-1].split(" --", 1)[0]  # the option's entry in the list
        assert "default" in described, option


def test_top_level_help_names_the_endpoints_too():
    result = subprocess.run([sys.executable, "-m", "berth_agent.cli", "--help"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0
    assert all(endpoint in result.stdout for endpoint in ("/startupz", "/readyz", "/livez", "/metrics"))


def test_api_secret_arguments_are_checked(tmp_path):
    """--api-secret DIR=SECRET: a mount contract directory, each once, and only with --registry (local mode is
    unchanged: no API to read Secrets from)."""
    for args, needle in [
        (("--registry-file", str(tmp_path / "r.yaml"), "--api-secret", "cosi=creds"), "need --registry"),
        (("--registry-file", str(tmp_path / "r.yaml"), "--api-configmap", "token-bundle=trust"), "need --registry"),
        (("--registry", "ns/reg", "--api-configmap", "tls=trust"), "DIR=CONFIGMAP with DIR one of token-bundle"),
        (("--registry", "ns/reg", "--api-configmap", "token-jwks=a", "--api-secret", "token-jwks=b"), "not both"),
        (("--registry", "ns/reg", "--api-secret", "secrets=creds"), "DIR=SECRET"),
        (("--registry", "ns/reg", "--api-secret", "cosi"), "DIR=SECRET"),
        (("--registry", "ns/reg", "--api-secret", "tls=a", "--api-secret", "tls=b"), "each once"),
    ]:
        result = _run(*args, "--config-dir", str(tmp_path), "--health-addr", "127.0.0.1:0")
        assert result.returncode == 2, args
        line = json.loads(result.stderr.splitlines()[-1])
        assert line["msg"] == "bad arguments" and needle in line["error"], (args, line)
