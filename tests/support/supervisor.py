"""The real supervise.sh running the real docker-registry, for the agent's tests and benchmarks.

`Supervisor` starts `sh supervise.sh` (dash or busybox sh) with BERTH_CONFIG / BERTH_REGISTRY_BIN (the 2.8
binary unless `binary` names another, e.g. the 3.x one of support.registry.registry_binaries()), and
finds the registry children it starts by their /proc entries. `stop()` ends it and anything it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from berth_agent.supervisor.procfs import RegistryProcess, find_registry_processes
from berth_agent.supervisor.script import supervisor_script

REGISTRY_BIN = "/usr/bin/docker-registry"
SHELLS = {"dash": ["dash"], "busybox": ["busybox", "sh"]}
# berth-supervise, the Python supervisor (issue 29): the same protocol, run as a module of the installed agent.
PYTHON = "python"
PYTHON_ARGV = [sys.executable, "-m", "berth_agent.supervisor.supervise"]


def available_shells() -> list[str]:
    return [name for name, argv in SHELLS.items() if shutil.which(argv[0])] + [PYTHON]


def registry_env() -> dict[str, str]:
    env = dict(os.environ)
    # The 2.8 registry panics at start when AWS_CA_BUNDLE is set (field-notes §6).
    env.pop("AWS_CA_BUNDLE", None)
    env["OTEL_TRACES_EXPORTER"] = "none"  # v3 would otherwise send traces to localhost:4318 (field-notes §1)
    return env


def minimal_config(root: Path, port: int, *, drain: str = "5s", extra: str = "") -> bytes:
    """A filesystem registry on 127.0.0.1:port: enough to test the supervisor and restarts without the renderer."""
    return (
        "version: 0.1\n"
        "log:\n  level: error\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  draintimeout: {drain}\n"
        f"{extra}"
    ).encode()


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.02, what: str = "condition"):
    """Poll until predicate() is truthy (returns its value); AssertionError naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class Supervisor:
    def __init__(self, config_dir: Path, *, shell: str = "dash", log_path: Path | None = None,
                 script: Path | None = None, binary: str = REGISTRY_BIN, env: dict[str, str] | None = None):
        self.config_dir = Path(config_dir)
        self.config_path = self.config_dir / "config.yml"
        self.shell = shell
        self.log_path = log_path or self.config_dir.parent / f"supervise-{shell}.log"
        self.script = script
        self.binary = binary or REGISTRY_BIN  # 2.8 by default; support.registry.registry_binaries() gives 3.x too
        self.env = dict(env or {})  # more environment for the script (BERTH_DEBUG_PORTS, ...)
        self.process: subprocess.Popen | None = None

    def start(self) -> Supervisor:
        script = self.script
        if self.shell == PYTHON:
            argv = PYTHON_ARGV
        else:
            if script is None:
                script = self.config_dir.parent / "supervise.sh"
                script.write_bytes(supervisor_script())
            argv = [*SHELLS[self.shell], str(script)]
        env = registry_env()
        env["BERTH_CONFIG"] = str(self.config_path)
        env["BERTH_REGISTRY_BIN"] = self.binary
        env.update(self.env)
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def registries(self) -> list[RegistryProcess]:
        """Registry processes serving our config that are this supervisor's children."""
        children = set(children_of(self.pid))
        return [p for p in find_registry_processes(self.config_path) if p.pid in children]

    def registry(self, timeout: float = 20.0) -> RegistryProcess:
        return wait_for(lambda: (self.registries() or [None])[0], timeout, what="a registry child")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of its session (a registry that outlived it) is ours to end.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.process.poll() is None:
            self.process.wait(5)
        self._log.close()
        return self.process.returncode


@contextmanager
def running_supervisor(config_dir: Path, **kwargs) -> Iterator[Supervisor]:
    supervisor = Supervisor(config_dir, **kwargs).start()
    try:
        yield supervisor
    finally:
        supervisor.stop()
