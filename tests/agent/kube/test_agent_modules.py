"""An API-mode agent, wired and running, has not loaded the official kubernetes client nor urllib3 (they cost a pod 5.3
MiB, docs/decisions/0040-agent-api-client-on-the-standard-library.md; kube/client.py does the agent's calls).
`berth-agent run --registry` in a process of its own, as a pod runs it, against the test API server, beside
berth-supervise and the real registry; once its config is applied and reported, the process says which of those packages
it holds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.common.polling import wait_for
from support.registries.pod import RegistryPod, filesystem_spec, registry_object
from support.registries.secretdir import write_secret_dir

pytestmark = pytest.mark.e2e  # a real agent, supervisor and registry

# Runs the agent's CLI in this process; a thread waits for the test's word, then prints what is loaded.
SCRIPT = r"""
import json, os, sys, threading

def report():
    sys.stdin.readline()
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("kubernetes", "urllib3", "requests", "dateutil"))
    agent = sorted(m for m in sys.modules if m.startswith("berth_agent.kube."))
    print(json.dumps({"heavy": heavy, "agent": agent}), flush=True)
    os._exit(0)

threading.Thread(target=report, daemon=True).start()
from berth_agent.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_running_api_mode_agent_has_no_kubernetes_client_loaded(kube_api, tmp_path):
    pod = RegistryPod(tmp_path / "pod")
    write_secret_dir(pod.mounts / "http-secret", {"secret": "modules"})
    kube_api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "http", "namespace": "default"},
                     "data": {"secret": "bW9kdWxlcw=="}})
    kube_api.create(registry_object(filesystem_spec(pod.port)))
    args = ["run", "--registry", "default/reg", "--kube-host", kube_api.url, "--api-secret", "http-secret=http",
            "--mounts", str(pod.mounts), "--config-dir", str(pod.config_dir), "--data-dir", str(pod.data_dir),
            "--health-addr", f"127.0.0.1:{pod.health_port}", "--pod-name", "pod-0",
            "--outbox-addr", f"127.0.0.1:{pod.outbox_port}"]
    with open(tmp_path / "agent.log", "ab") as log:
        agent = subprocess.Popen([sys.executable, "-c", SCRIPT, *args], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    try:
        pod.start_supervisor()
        pod.wait_serving()

        def reported() -> bool:
            agents = ((kube_api.get("berth.dev/v1alpha1/registries", "default", "reg") or {}).get("status") or {})
            return bool((agents.get("agents") or {}).get("pod-0", {}).get("configHash"))

        wait_for(reported, timeout=60, what="the agent's status record")
        wait_for(lambda: kube_api.open_watches == 2, timeout=30, what="the Registry's and the Secret's watches")
        out, _ = agent.communicate("check\n", timeout=30)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        pod.stop()
    loaded = json.loads(out.strip().splitlines()[-1])
    assert loaded["heavy"] == [], loaded["heavy"]
    assert {"berth_agent.kube.client", "berth_agent.kube.config"} <= set(loaded["agent"])  # the calls went here
