"""berth-supervise, the registry container's command, running the real registry, for the agent's tests and benchmarks.

`Supervisor` starts berth-supervise (`python -m berth_supervise`, the installed package)
with BERTH_CONFIG / BERTH_REGISTRY_BIN (the 2.8 binary unless `binary` names another, e.g. the 3.x one of
support.registries.registry.registry_binaries()), and finds the registry children it starts by their /proc entries.

It behaves as a container does: when the supervisor (the container's main process) ends, however it ends,
whatever it started is killed at once, as the container runtime kills the rest of a container whose main process
died (docs/design.md §4.3); starting a new Supervisor on the same dirs is the
kubelet's restart. `stop()` ends it and anything it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from berth_agent.restart.procfs import RegistryProcess, find_registry_processes
from support.common.polling import wait_for

REGISTRY_BIN = "/usr/bin/docker-registry"
# The console script berth-supervise runs the same main(); the module needs no PATH.
SUPERVISE_ARGV = [sys.executable, "-m", "berth_supervise"]


def registry_env() -> dict[str, str]:
    env = dict(os.environ)
    # The 2.8 registry panics at start when AWS_CA_BUNDLE is set (docs/upstream.md#parts-aws-ca-bundle).
    env.pop("AWS_CA_BUNDLE", None)
    env["OTEL_TRACES_EXPORTER"] = "none"  # v3 would otherwise export traces (docs/upstream.md#dist-otel)
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


def _live_processes() -> list[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after the command name) of every live process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] not in ("Z", "X"):
            found.append((int(entry.name), fields))
    return found


def children_of(pid: int) -> list[int]:
    return [child for child, fields in _live_processes() if int(fields[1]) == pid]


def session_pids(sid: int) -> list[int]:
    """Live processes of session `sid` (a supervisor's: the support starts it in a session of its own)."""
    return [member for member, fields in _live_processes() if int(fields[3]) == sid]


class Supervisor:
    def __init__(self, config_dir: Path, *, log_path: Path | None = None, argv: list[str] | None = None,
                 binary: str = REGISTRY_BIN, env: dict[str, str] | None = None):
        self.config_dir = Path(config_dir)
        self.config_path = self.config_dir / "config.yml"
        self.log_path = log_path or self.config_dir.parent / "supervise.log"
        self.argv = argv or SUPERVISE_ARGV  # another supervisor (an older one's stand-in) where a test needs it
        # 2.8 by default; support.registries.registry.registry_binaries() gives 3.x too
        self.binary = binary or REGISTRY_BIN
        self.env = dict(env or {})  # more environment for the supervisor (BERTH_DEBUG_PORTS, BERTH_LISTEN_ADDR...)
        self.process: subprocess.Popen | None = None

    def start(self) -> Supervisor:
        env = registry_env()
        env["BERTH_CONFIG"] = str(self.config_path)
        env["BERTH_REGISTRY_BIN"] = self.binary
        env.update(self.env)
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            self.argv, env=env, stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        threading.Thread(target=self._end_container, args=(self.process,), daemon=True,
                         name=f"container-of-{self.process.pid}").start()
        return self

    @staticmethod
    def _end_container(process: subprocess.Popen) -> None:
        """The runtime's part: once the main process has ended, the rest of its container (its session) is killed.
        A supervisor that stops cleanly has ended every child first; after kill -9 its registries would serve on,
        orphaned, until their next log line met the closed pipe (SIGPIPE), which no pod shows."""
        process.wait()
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

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
        return wait_for(lambda: (self.registries() or [None])[0], "a registry child", timeout)

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


def supervisors(default_dir: Path) -> Iterator[Callable[..., Supervisor]]:
    """The `supervisor_factory` fixture: yields start(config_dir=default_dir, binary=None, env=None), which starts
    berth-supervise on a config dir it creates; every supervisor started is stopped (and whatever it started) after."""
    started: list[Supervisor] = []

    def start(config_dir: Path | None = None, binary: str | None = None, env: dict[str, str] | None = None):
        directory = config_dir or default_dir
        directory.mkdir(exist_ok=True)
        supervisor = Supervisor(directory, binary=binary or "", env=env).start()
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        supervisor.stop()


@contextmanager
def running_supervisor(config_dir: Path, **kwargs) -> Iterator[Supervisor]:
    supervisor = Supervisor(config_dir, **kwargs).start()
    try:
        yield supervisor
    finally:
        supervisor.stop()
