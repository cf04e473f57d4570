"""Both entry points start as the image runs them: a UID with no /etc/passwd entry (65532, as the
Containerfile's USER and deploy/'s runAsUser), no USER or LOGNAME, HOME=/ (what the runtime sets for a
UID it cannot look up) and a read-only working directory.

CI runs as root, so each process drops to that UID with `setpriv` before exec. On the code before
docs/decisions/0026-one-leader-through-a-lease.md, kopf took its identity from getpass.getuser() and the operator died
with `KeyError: 'getpwuid(): uid not found: 65532'` before it reconciled anything.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.clusters.kube import (
    KubeApi,
)
from support.clusters.operator_harness import REGISTRIES_PATH
from support.common.polling import wait_for
from support.common.ports import free_port
from support.common.processes import stop_process

UID = GID = 65532
NS = "nopasswd"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="dropping to another UID needs root and setpriv (util-linux)")


def _no_passwd_entry() -> bool:
    try:
        pwd.getpwuid(UID)
    except KeyError:
        return True
    return False


def _reachable_by_others(path: Path) -> bool:
    """Whether a UID with no rights of its own can traverse every directory above path."""
    return all(os.stat(parent).st_mode & 0o001 for parent in Path(path).resolve().parents)


def _as_nobody(argv: list[str]) -> list[str]:
    """argv run as UID/GID 65532 with no supplementary groups.

    When the Python interpreter sits under a directory only root may enter (a pyenv under /root on some
    CI hosts), the process keeps CAP_DAC_READ_SEARCH so it can read its own interpreter: that capability
    reads and traverses, it never writes, and it has no bearing on the passwd lookup under test.
    """
    drop = ["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups"]
    if not _reachable_by_others(Path(sys.executable)):
        drop += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    return [*drop, "--", *argv]


@pytest.fixture
def sandbox() -> Iterator[Path]:
    """A directory UID 65532 can enter but not write (the working directory), with a writable `state/`.

    Under /tmp rather than pytest's tmp_path: the latter's parent is root's 0700 directory.
    """
    assert _no_passwd_entry(), f"this machine has a passwd entry for {UID}: the test would prove nothing"
    root = Path(tempfile.mkdtemp(prefix="berth-nopasswd-"))
    state = root / "state"
    state.mkdir()
    os.chown(state, UID, GID)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _env(api: KubeApi, sandbox: Path) -> dict[str, str]:
    kubeconfig = sandbox / "kubeconfig"
    shutil.copy(api.kubeconfig, kubeconfig)
    kubeconfig.chmod(0o444)
    sandbox.chmod(0o555)  # read-only for UID 65532 from here on
    drop = {"USER", "LOGNAME", "LNAME", "USERNAME", "POD_NAME", "POD_NAMESPACE", "KUBERNETES_SERVICE_HOST"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(HOME="/", KUBECONFIG=str(kubeconfig), BERTH_AGENT_IMAGE="ghcr.io/berth-dev/berth:test",
               PYTHONDONTWRITEBYTECODE="1")
    return env


def _start(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> tuple[subprocess.Popen, object]:
    out = log.open("wb")
    proc = subprocess.Popen(_as_nobody(argv), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, out


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _registry(api: KubeApi, name: str) -> None:
    if api.get("v1/namespaces", None, NS) is None:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
                "spec": {"config": {"storage": {"inmemory": {}}}}})


def test_berth_operator_starts_as_a_uid_without_passwd_entry(kube_api, sandbox, tmp_path):
    _registry(kube_api, "op")
    env = _env(kube_api, sandbox)
    live = free_port()
    proc, out = _start([_bin("berth-operator"), "--namespace", NS, "--liveness", f"http://127.0.0.1:{live}/healthz",
                        "--metrics-port", "0"], env, sandbox, tmp_path / "operator.log")
    try:
        wait_for(lambda: proc.poll() is not None
                 or (kube_api.get(REGISTRIES_PATH, NS, "op").get("status") or {}).get("conditions"),
                 "the operator to reconcile or exit", timeout=60)
        assert proc.poll() is None, "berth-operator exited:\n" + (tmp_path / "operator.log").read_text()[-3000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{live}/healthz", timeout=5) as response:
            assert response.status == 200
    finally:
        code = stop_process(proc, out, timeout=30)
    log = (tmp_path / "operator.log").read_text()
    assert code == 0, log[-3000:]
    assert "getpwuid" not in log and "Traceback" not in log


def test_berth_agent_run_starts_as_a_uid_without_passwd_entry(kube_api, sandbox, tmp_path):
    _registry(kube_api, "agent")
    env = _env(kube_api, sandbox)
    env["POD_NAME"] = "agent-0"
    state = sandbox / "state"
    health = free_port()
    proc, out = _start([_bin("berth-agent"), "run", "--registry", f"{NS}/agent", "--kubeconfig", env["KUBECONFIG"],
                        "--config-dir", str(state / "config"), "--mounts", str(state / "mounts"),
                        "--data-dir", str(state / "data"), "--health-addr", f"127.0.0.1:{health}",
                        "--outbox-addr", f"127.0.0.1:{free_port()}"],
                       env, sandbox, tmp_path / "agent.log")
    try:
        def applied() -> bool:
            agents = (kube_api.get(REGISTRIES_PATH, NS, "agent").get("status") or {}).get("agents") or {}
            return proc.poll() is not None or bool(agents.get("agent-0"))

        wait_for(applied, "the agent to report or exit", timeout=60)
        assert proc.poll() is None, "berth-agent exited:\n" + (tmp_path / "agent.log").read_text()[-3000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{health}/livez", timeout=5) as response:
            assert response.status == 200
        assert (state / "config" / "config.yml").stat().st_uid == UID
    finally:
        code = stop_process(proc, out, timeout=30)
    log = (tmp_path / "agent.log").read_text()
    assert code == 0, log[-3000:]
    assert "Traceback" not in log
