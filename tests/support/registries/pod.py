"""A registry pod on this machine for end-to-end tests and benchmarks: `berth-agent run` as a subprocess (what
users run), the real berth-supervise and the real registry, sharing a config dir as the pod's containers
share the `config` volume, with a mount root of AtomicWriter Secret dirs (support.registries.secretdir).

    pod = RegistryPod(tmp_path)
    pod.write_registry_file(spec)                 # or pass registry="ns/name", kube_host=api.url
    pod.start_agent(); pod.start_supervisor()
    pod.wait_serving()
    ...
    pod.stop()                                    # always (the fixture does it)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from berth_agent.restart.endpoint import Endpoint
from berth_agent.restart.probe import answers
from support.common.polling import wait_for
from support.common.ports import free_port, holds_socket, listener_inodes
from support.registries.supervisor import REGISTRY_BIN, Supervisor, registry_env, session_pids


def registry_object(spec: dict[str, Any], *, name: str = "reg", namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def on_distribution(spec: dict[str, Any], major: str) -> dict[str, Any]:
    """The spec for Distribution `major` ("2" or "3"): the image and the explicit distribution the agent renders for."""
    return {**spec, "image": f"docker.io/library/registry:{major}", "distribution": major}


def filesystem_spec(port: int, *, major: str = "2", **overrides: Any) -> dict[str, Any]:
    """A small Registry spec on 127.0.0.1:port, filesystem storage, for Distribution `major` (the local 2.8 binary
    by default)."""
    spec: dict[str, Any] = {
        "image": f"docker.io/library/registry:{major}",
        "distribution": major,
        "config": {"log": {"level": "info"}, "storage": {"filesystem": {"persistentVolumeClaim": "data"}}},
        "http": {"addr": f"127.0.0.1:{port}", "drainTimeout": "5s"},
    }
    spec.update(overrides)
    return spec


# What the agent writes beside config.yml for the registry (docs/design.md §3).
SIDE_FILES = ("htpasswd", "tls/tls.crt", "tls/tls.key", "token/rootcertbundle.pem", "token/jwks.json",
              "gcs/key.json")


def config_identity(config_dir: Path) -> str:
    """RegistryPod.disk_identity for a config dir."""
    digest = hashlib.sha256((config_dir / "config.yml").read_bytes())
    for name in sorted(n for n in SIDE_FILES if (config_dir / n).exists()):
        digest.update(b"\0" + name.encode() + b"\0" + hashlib.sha256((config_dir / name).read_bytes()).digest())
    return digest.hexdigest()


class RegistryPod:
    def __init__(self, root: Path, *, port: int | None = None, config_dir: Path | None = None,
                 binary: str = REGISTRY_BIN, host: str = "127.0.0.1", data_dir: Path | None = None):
        self.root = Path(root)
        # In a pod the config volume is an emptyDir in memory (docs/design.md §3): pass a tmpfs dir to match.
        self.config_dir = Path(config_dir) if config_dir else self.root / "config"
        self.mounts = self.root / "mounts"
        self.data_dir = Path(data_dir) if data_dir else self.root / "data"  # replicas may share one (RWX)
        for directory in (self.config_dir, self.mounts, self.data_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.health_port = free_port()
        self.outbox_port = free_port()  # the agent's notification relay (the pod's loopback port 8083)
        self.registry_file = self.root / "registry" / "registry.yaml"
        self.registry_file.parent.mkdir(parents=True, exist_ok=True)
        self.agent_log = self.root / "agent.log"
        self.binary = binary or REGISTRY_BIN  # what berth-supervise runs; specs must render for its major
        self.listen_host = host  # another loopback address (127.0.0.2, ...) puts two pods on one port
        self.tls = False  # set when the Registry serves HTTPS
        self.agent: subprocess.Popen | None = None
        self.supervisor: Supervisor | None = None
        self._agent_log_file = None

    # ---- parts -----------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.listen_host}:{self.port}"

    @property
    def host(self) -> str:
        return f"{self.listen_host}:{self.port}"

    def write_registry_file(self, spec_or_object: dict[str, Any]) -> None:
        obj = spec_or_object if "spec" in spec_or_object else registry_object(spec_or_object)
        self.registry_file.parent.mkdir(parents=True, exist_ok=True)
        temp = self.registry_file.with_suffix(".tmp")
        temp.write_text(yaml.safe_dump(obj, sort_keys=False))
        os.replace(temp, self.registry_file)  # as an editor saves: whole file at once

    def start_agent(self, *, registry: str | None = None, kube_host: str | None = None, kubeconfig: Path | None = None,
                    pod_name: str = "pod-0", extra: list[str] = ()) -> subprocess.Popen:
        """`berth-agent run`: from the Registry file, or with `registry` (NS/NAME) from the API server at
        `kube_host` (no credentials: kmock) or through `kubeconfig` (a real token: support.clusters.apiserver)."""
        args = [sys.executable, "-m", "berth_agent.cli", "run", "--mounts", str(self.mounts),
                "--config-dir", str(self.config_dir), "--data-dir", str(self.data_dir),
                "--health-addr", f"127.0.0.1:{self.health_port}", "--pod-name", pod_name,
                "--outbox-addr", f"127.0.0.1:{self.outbox_port}", "--stop-delivery-seconds", "3",
                *extra]
        if registry is not None:
            args += ["--registry", registry, *(["--kubeconfig", str(kubeconfig)] if kubeconfig
                                               else ["--kube-host", kube_host or ""])]
        else:
            args += ["--registry-file", str(self.registry_file)]
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
        self._agent_log_file = open(self.agent_log, "ab")
        self.agent = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._agent_log_file,
                                      stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return self.agent

    def start_supervisor(self, *, env: dict[str, str] | None = None) -> Supervisor:
        """The registry container: berth-supervise as the pod template runs it, BERTH_LISTEN_ADDR set to the pod's
        address (it holds the socket for a 3.x binary; a 2.8 one binds its own)."""
        env = {"BERTH_LISTEN_ADDR": f"{self.listen_host}:{self.port}", **(env or {})}
        self.supervisor = Supervisor(self.config_dir, log_path=self.root / "registry.log", binary=self.binary,
                                     env=env).start()
        return self.supervisor

    # ---- observations ----------------------------------------------------------------------------------------

    def serving(self) -> bool:
        """A registry answers on the pod's address, and (with a supervisor) the listener there is this pod's: a
        stranger that holds the port (support.common.ports) answers too, and would take this pod's requests."""
        if self.supervisor is not None and not self.holds_listener():
            return False
        return answers(Endpoint(self.listen_host, self.port, self.tls)) in (200, 401)

    def holds_listener(self) -> bool:
        """Whether the socket listening on the pod's address is held in the supervisor's session (its own held
        socket on 3.x, a registry's on 2.8): what a pod's network namespace makes sure of in a cluster."""
        if self.supervisor is None or self.supervisor.process is None:
            return False
        inodes = listener_inodes(self.listen_host, self.port)
        return bool(inodes) and any(holds_socket(p, inodes) for p in session_pids(self.supervisor.pid))

    def wait_serving(self, timeout: float = 30.0) -> None:
        wait_for(self.serving, lambda: f"the registry to answer on {self.host}\n{self.diagnosis()}", timeout)

    def diagnosis(self) -> str:
        """What a wait that timed out needs, read at its timeout: whether the agent and the supervisor still run,
        who answers and who holds the listener on the pod's address, and the tails of both logs."""
        agent = "not started" if self.agent is None else (
            "running" if self.agent.poll() is None else f"exited {self.agent.returncode}")
        supervisor = "not started" if self.supervisor is None or self.supervisor.process is None else (
            "running" if self.supervisor.process.poll() is None else f"exited {self.supervisor.process.returncode}")
        inodes = listener_inodes(self.listen_host, self.port)
        holders = sorted(int(pid) for pid in os.listdir("/proc") if pid.isdigit() and holds_socket(int(pid), inodes))
        answer = answers(Endpoint(self.listen_host, self.port, self.tls))
        registry_log = self.supervisor.log() if self.supervisor is not None else ""
        session = sorted(session_pids(self.supervisor.pid)) if supervisor == "running" else []
        return (f"agent {agent}, supervisor {supervisor}; {self.host} answers {answer}, its listener held by pids "
                f"{holders} (the supervisor's session: {session})\n"
                f"--- agent log (tail)\n{self.agent_log_text()[-4000:]}\n"
                f"--- registry log (tail)\n{registry_log[-4000:]}")

    def registry_pid(self) -> int | None:
        """The newest registry process (an older one may still be draining after an overlapped restart)."""
        found = self.supervisor.registries() if self.supervisor else []
        return max(found, key=lambda p: p.start_ticks).pid if found else None

    def registry_starts(self) -> int:
        return self.supervisor.log().count("started registry") if self.supervisor else 0

    def agent_log_text(self) -> str:
        return self.agent_log.read_text(errors="replace") if self.agent_log.exists() else ""

    def agent_lines(self) -> list[dict[str, Any]]:
        lines = []
        for raw in self.agent_log_text().splitlines():
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:
                lines.append({"msg": "(not JSON)", "raw": raw})
        return lines

    def actions(self, msg: str) -> list[dict[str, Any]]:
        return [line for line in self.agent_lines() if line.get("msg") == msg]

    def health(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=5) as response:
            return response.read().decode()

    def metric(self, name: str, labels: str = "") -> float:
        """The value of berth_agent_<name>{labels} (0 when absent)."""
        pattern = re.compile(rf"^berth_agent_{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$",
                             re.M)
        match = pattern.search(self.metrics_text())
        return float(match.group(1)) if match else 0.0

    def config_info(self) -> list[str]:
        """The hash labels of berth_agent_config_info's series (one while a config is verified serving)."""
        return re.findall(r'^berth_agent_config_info\{hash="([0-9a-f]*)"\} 1\.0$', self.metrics_text(), re.M)

    def disk_identity(self) -> str:
        """The identity of what the config dir holds, as docs/decisions/0018-one-identity-per-applied-state.md defines
        it (computed here on its own, not with the agent's code): sha256 of config.yml, then per file beside it, sorted
        by name, NUL name NUL sha256 digest."""
        return config_identity(self.config_dir)

    # ---- teardown --------------------------------------------------------------------------------------------

    def stop_agent(self) -> int | None:
        if self.agent is None:
            return None
        if self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(15)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait(5)
        if self._agent_log_file is not None:
            self._agent_log_file.close()
            self._agent_log_file = None
        return self.agent.returncode

    def stop(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop()
        self.stop_agent()


__all__ = ["RegistryPod", "filesystem_spec", "on_distribution", "registry_env", "registry_object"]
