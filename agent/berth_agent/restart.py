"""Restart the registry process in place: SIGTERM it, let supervise.sh start it again, wait until it answers.

The registry has no reload (field-notes §1). With `shareProcessNamespace: true` the agent sees the registry
container's processes (field-notes §3); it finds the one running `<bin> serve <our config path>` by its
/proc cmdline, never PID 1 (the pause process, which exits on SIGTERM), never itself, and only processes of
its own UID (kill(2) needs that anyway). SIGTERM makes the registry drain for draintimeout and exit 0;
the supervisor then starts a new one on the new config.
"""

from __future__ import annotations

import http.client
import os
import signal
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
POLL_SECONDS = 0.005  # the new registry answers ~20-30 ms after exec (field-notes §6)
CRASHES_BEFORE_GIVING_UP = 2
STOPPED = "the agent is stopping"


@dataclass(frozen=True)
class RegistryProcess:
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells a new process from a recycled pid

    def alive(self, proc: Path = PROC) -> bool:
        try:
            return _start_ticks(proc / str(self.pid)) == self.start_ticks and not _is_zombie(proc / str(self.pid))
        except OSError:
            return False


@dataclass
class RestartResult:
    ok: bool
    old: list[RegistryProcess]
    new: RegistryProcess | None
    seconds: float
    detail: str = ""  # why it failed; names no secret
    statuses: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Endpoint:
    """Where the registry listens, from the rendered http.addr (and whether it serves TLS)."""

    host: str
    port: int
    tls: bool = False

    @classmethod
    def from_addr(cls, addr: str, *, tls: bool = False) -> Endpoint:
        host, _, port = addr.rpartition(":")
        host = host.strip("[]")
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"  # a wildcard listener answers on loopback too
        return cls(host, int(port), tls)


def find_registry_processes(config_path: Path, *, proc: Path = PROC) -> list[RegistryProcess]:
    """Processes of our UID whose command line is `<bin> serve <config_path>`."""
    wanted = str(config_path)
    me = os.getpid()
    uid = os.getuid()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in (1, me):
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv and argv[-1] == b"":
                argv.pop()
            if len(argv) != 3 or argv[1] != b"serve" or argv[2].decode(errors="replace") != wanted:
                continue
            if _is_zombie(entry):
                continue
            found.append(RegistryProcess(pid, _start_ticks(entry)))
        except OSError:
            continue  # exited while we looked
    return found


def _stat_fields(proc_dir: Path) -> list[str]:
    raw = (proc_dir / "stat").read_text()
    # The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def _start_ticks(proc_dir: Path) -> int:
    return int(_stat_fields(proc_dir)[19])


def _is_zombie(proc_dir: Path) -> bool:
    return _stat_fields(proc_dir)[0] in ("Z", "X")


def answers(endpoint: Endpoint, *, timeout: float = 1.0) -> int | None:
    """HTTP status of GET / (200 when up, 503 when a health check fails), or None when nothing answers."""
    if endpoint.tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # liveness only: the certificate is the registry's business
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            endpoint.host, endpoint.port, timeout=timeout, context=context
        )
    else:
        conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    try:
        conn.request("GET", "/", headers={"Connection": "close"})
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def is_up(status: int | None) -> bool:
    return status in (200, 401)


def wait_until_serving(
    config_path: Path,
    endpoint: Endpoint,
    *,
    timeout: float,
    exclude: list[RegistryProcess] = (),
    proc: Path = PROC,
    stop: threading.Event | None = None,
) -> tuple[RegistryProcess | None, str]:
    """Wait for a registry process not in `exclude` serving config_path that answers HTTP; (process, why not)."""
    deadline = time.monotonic() + timeout
    old = set(exclude)
    last_status: int | None = None
    current: RegistryProcess | None = None
    seen: set[RegistryProcess] = set()
    while True:
        fresh = [p for p in find_registry_processes(config_path, proc=proc) if p not in old]
        seen.update(fresh)
        if fresh:
            current = fresh[0]
            last_status = answers(endpoint, timeout=min(1.0, max(0.05, deadline - time.monotonic())))
            # Only trust the answer if that process is still the one running (not one that died meanwhile).
            if is_up(last_status) and current.alive(proc):
                return current, ""
        # Registries that died without ever answering: the config is refused at start (the supervisor keeps
        # retrying it once a second). No need to sit out the whole bound.
        died = [p for p in seen if not p.alive(proc)]
        if len(died) >= CRASHES_BEFORE_GIVING_UP:
            return None, f"the registry exited at start {len(died)} times on {config_path} (a config it refuses?)"
        if time.monotonic() >= deadline:
            break
        if stop is not None and stop.wait(POLL_SECONDS):
            return None, STOPPED
        if stop is None:
            time.sleep(POLL_SECONDS)
    if current is None:
        return None, f"no registry process serving {config_path} appeared within {timeout:g}s"
    if last_status is None:
        return None, f"the registry did not answer on {endpoint.host}:{endpoint.port} within {timeout:g}s"
    return None, f"the registry answered HTTP {last_status} on GET / instead of 200 within {timeout:g}s"


def restart_registry(
    config_path: Path, endpoint: Endpoint, *, timeout: float, proc: Path = PROC,
    stop: threading.Event | None = None,
) -> RestartResult:
    """SIGTERM every registry serving config_path, then wait (up to timeout) for a new one that answers.

    With no registry running (the supervisor is pausing after a failed start, or has not started one yet),
    nothing is signalled and the next one the supervisor starts is awaited.
    """
    began = time.monotonic()
    old = find_registry_processes(config_path, proc=proc)
    for process in old:
        try:
            os.kill(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    new, detail = wait_until_serving(config_path, endpoint, timeout=timeout, exclude=old, proc=proc, stop=stop)
    return RestartResult(ok=new is not None, old=old, new=new, seconds=time.monotonic() - began, detail=detail)
