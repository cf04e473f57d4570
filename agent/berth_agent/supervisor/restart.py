"""Restart the registry process in place, overlapped: SIGTERM it, hand over to a new one, wait until it answers.

The registry has no reload (field-notes §1). With `shareProcessNamespace: true` the agent sees the registry
container's processes (field-notes §3); it finds the one running `<bin> serve <our config path>` by its
/proc cmdline, never PID 1 (the pause process, which exits on SIGTERM), never itself, and only processes of
its own UID (kill(2) needs that anyway). SIGTERM makes the registry close its listener at once and drain its
in-flight requests for draintimeout (field-notes §7). The agent names the old pid in the handover file
first; as soon as the old process no longer holds its listening socket (the inode from /proc/net/tcp{,6},
watched among /proc/<pid>/fd: no traffic, no guess) it sends the supervisor (the registry's parent) SIGUSR1,
and the supervisor starts the new registry while the old one drains.
A supervisor without the handover marker in its registry's environment (an older supervise.sh) is never sent
SIGUSR1 (it would die of it): it starts the new registry when the old one exits, as before.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
POLL_SECONDS = 0.005  # the new registry answers ~20-30 ms after exec (field-notes §6)
LISTENER_POLL_SECONDS = 0.001  # the old process's fd list, or a GET / refused at once: cheap to repeat
LISTENER_CLOSE_TIMEOUT = 5.0  # the registry closes its listener within milliseconds of SIGTERM
SCAN_SECONDS = 0.1  # a /proc scan costs milliseconds: not on every GET / try after a handover
NUDGE_SECONDS = 0.05  # SIGUSR1 again if no successor appeared (a signal can land while the script is busy)
# supervise.sh retries a start that lost the bind race up to 5 times within milliseconds; two more deaths
# after that are a config the registry refuses.
CRASHES_BEFORE_GIVING_UP = 2
CRASHES_AFTER_HANDOVER = 7
STOPPED = "the agent is stopping"
HANDOVER_NAME = "handover"  # beside config.yml; supervise.sh reads it on SIGUSR1
HANDOVER_MARKER = b"BERTH_SUPERVISE_HANDOVER=1"
GC_MARKER = b"BERTH_SUPERVISE_GC=1"  # the supervisor runs garbage-collect on SIGUSR2 (an older one dies of it)
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp
# The listening socket inodes of the registry serving now, found after the last restart (agent-wide, one
# registry per agent): the next restart watches the old process's fds for them without a /proc/net/tcp read.
_LISTENERS: dict[RegistryProcess, set[str]] = {}


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
    handed_over: bool = False  # the new registry started while the old one drained (overlapped restart)
    listener_close_seconds: float | None = None  # SIGTERM to the old listener gone
    no_listener_seconds: float | None = None  # old listener gone to the new one listening
    started_at: float = 0.0  # wall clock when the restart began (logs of several pods line up on it)


@dataclass(frozen=True)
class Endpoint:
    """Where the registry listens, from the rendered http.addr (and whether it serves TLS).

    `host` is where to connect (a wildcard listener answers on loopback); `bind` is the address as configured
    ("" for a wildcard), which is what /proc/net/tcp shows for the listening socket.
    """

    host: str
    port: int
    tls: bool = False
    bind: str | None = None  # None: the same as host

    @classmethod
    def from_addr(cls, addr: str, *, tls: bool = False) -> Endpoint:
        host, _, port = addr.rpartition(":")
        host = host.strip("[]")
        bind = host
        if host in ("", "0.0.0.0", "::"):
            host, bind = "127.0.0.1", ""  # a wildcard listener answers on loopback too
        return cls(host, int(port), tls, bind)


def _hex_address(text: str) -> str | None:
    """An IPv4 or IPv6 address as /proc/net/tcp{,6} prints it (host byte order per 32-bit word)."""
    try:
        packed = socket.inet_pton(socket.AF_INET6 if ":" in text else socket.AF_INET, text)
    except OSError:
        return None
    return "".join(packed[i : i + 4][::-1].hex().upper() for i in range(0, len(packed), 4))


def listening(endpoint: Endpoint, *, proc: Path = PROC) -> bool:
    """Whether a socket listens on the endpoint's port (and address, or a wildcard) in our network namespace."""
    return bool(listener_inodes(endpoint, proc=proc))


def listener_inodes(endpoint: Endpoint, *, proc: Path = PROC) -> set[str]:
    """Inodes of the sockets listening on the endpoint's port (and address, or a wildcard).

    Reading /proc/net/tcp costs time in proportion to every socket of the network namespace (a few in a pod,
    thousands on a busy test machine): read once per restart, then the old process's fds are watched.
    """
    bind = endpoint.host if endpoint.bind is None else endpoint.bind
    wanted = {"00000000", "0" * 32}
    if bind:
        wanted.add(_hex_address(bind) or "")
        mapped = _hex_address("::ffff:" + bind) if ":" not in bind else None
        if mapped:
            wanted.add(mapped)
    port = f"{endpoint.port:04X}"
    found = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            address, _, local_port = fields[1].rpartition(":")
            if local_port == port and (not bind or address in wanted):
                found.add(fields[9])
    return found


def holds_socket(process: RegistryProcess, inodes: set[str], *, proc: Path = PROC) -> bool:
    """Whether the process still has one of these sockets open (its listener: closed on SIGTERM)."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    fd_dir = proc / str(process.pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(fd_dir / name) in wanted:
                return True
        except OSError:
            continue
    return False


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
    exclude: list[RegistryProcess] | set[RegistryProcess] = (),
    proc: Path = PROC,
    stop: threading.Event | None = None,
    nudge: Callable[[], None] | None = None,
    crashes: int = CRASHES_BEFORE_GIVING_UP,
    timing: dict[str, float] | None = None,
    fast: bool = False,
) -> tuple[RegistryProcess | None, str]:
    """Wait for a registry process not in `exclude` serving config_path that answers HTTP; (process, why not).

    `nudge` is called every NUDGE_SECONDS while no new process has appeared (to repeat a handover signal);
    `timing["listening"]` gets the monotonic time the new registry first answered. `fast` (after a handover:
    the old registry no longer listens, so whatever answers is new) tries GET / every millisecond and scans
    /proc only to confirm the answer and, every SCAN_SECONDS, to count registries that died at start.
    """
    deadline = time.monotonic() + timeout
    old = set(exclude)
    last_status: int | None = None
    current: RegistryProcess | None = None
    seen: set[RegistryProcess] = set()
    nudged = scanned = time.monotonic()
    while fast:
        last_status = answers(endpoint, timeout=min(1.0, max(0.05, deadline - time.monotonic())))
        now = time.monotonic()
        if is_up(last_status) or now - scanned >= SCAN_SECONDS:
            scanned = now
            fresh = [p for p in find_registry_processes(config_path, proc=proc) if p not in old]
            seen.update(fresh)
            if is_up(last_status) and fresh:
                current = max(fresh, key=lambda p: p.start_ticks)
                if timing is not None:
                    timing.setdefault("listening", now)
                return current, ""
            died = [p for p in seen if not p.alive(proc)]
            if len(died) >= crashes:
                return None, f"the registry exited at start {len(died)} times on {config_path} (a config it refuses?)"
        if nudge is not None and now - nudged >= NUDGE_SECONDS and last_status is None:
            nudge()
            nudged = now
        if now >= deadline:
            fast = False  # one last full look below, then the usual failure text
            break
        if stop is not None and stop.wait(LISTENER_POLL_SECONDS):
            return None, STOPPED
        if stop is None:
            time.sleep(LISTENER_POLL_SECONDS)
    while True:
        fresh = [p for p in find_registry_processes(config_path, proc=proc) if p not in old]
        seen.update(fresh)
        if fresh:
            current = fresh[0]
            last_status = answers(endpoint, timeout=min(1.0, max(0.05, deadline - time.monotonic())))
            # Only trust the answer if that process is still the one running (not one that died meanwhile).
            if is_up(last_status) and current.alive(proc):
                if timing is not None:
                    timing.setdefault("listening", time.monotonic())
                return current, ""
        elif nudge is not None and time.monotonic() - nudged >= NUDGE_SECONDS:
            nudge()
            nudged = time.monotonic()
        # Registries that died without ever answering: the config is refused at start (the supervisor keeps
        # retrying it once a second). No need to sit out the whole bound.
        died = [p for p in seen if not p.alive(proc)]
        if len(died) >= crashes:
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


def parent_pid(process: RegistryProcess, proc: Path = PROC) -> int | None:
    try:
        return int(_stat_fields(proc / str(process.pid))[1])
    except (OSError, ValueError, IndexError):
        return None


def takes_handover(process: RegistryProcess, proc: Path = PROC) -> bool:
    """Whether the supervisor that started this registry understands SIGUSR1 (it marks its children) and still
    is its parent (an orphan, its supervisor killed, has init or a subreaper as parent: never signal that)."""
    return supervised_with(process, HANDOVER_MARKER, proc)


def runs_gc(process: RegistryProcess, proc: Path = PROC) -> bool:
    """Whether the supervisor that started this registry runs garbage-collect on SIGUSR2 (gc_command.py)."""
    return supervised_with(process, GC_MARKER, proc)


def supervised_with(process: RegistryProcess, marker: bytes, proc: Path = PROC) -> bool:
    """Whether the registry's environment carries `marker` and its parent still is supervise.sh."""
    try:
        environ = (proc / str(process.pid) / "environ").read_bytes().split(b"\0")
        parent = parent_pid(process, proc)
        cmdline = (proc / str(parent) / "cmdline").read_bytes() if parent else b""
    except OSError:
        return False
    return marker in environ and b"supervise" in cmdline


def started_after(process: RegistryProcess, path: Path) -> bool:
    """Whether the process started after `path` was last written, so it read that file as it is now.

    /proc/<pid>/stat's start time counts clock ticks since boot (CLOCK_BOOTTIME); the file's mtime is wall
    time: moved onto the boot clock, with one tick of slack for the start time's rounding down.
    """
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return False
    boot_offset = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    return process.start_ticks * tick + tick >= mtime - boot_offset


def read_handover(config_path: Path, proc: Path = PROC) -> set[RegistryProcess]:
    """Registries handed over earlier that still drain (after an agent restart: never signal them again)."""
    try:
        lines = (config_path.parent / HANDOVER_NAME).read_text().splitlines()
    except OSError:
        return set()
    found = set()
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            process = RegistryProcess(int(parts[0]), int(parts[1]))
            if process.alive(proc):
                found.add(process)
    return found


def write_handover(config_path: Path, processes: set[RegistryProcess]) -> None:
    """The handover file names the registries that may be replaced while they drain ("pid start_ticks" lines).

    Written before the SIGTERM, so nothing but a signal stands between the old listener closing and the new
    registry starting. Not fsynced: it only matters while both processes run (a restart of the pod clears it).
    """
    lines = "".join(f"{p.pid} {p.start_ticks}\n" for p in sorted(processes, key=lambda p: p.pid))
    target = config_path.parent / HANDOVER_NAME
    temp = target.with_name(f".{HANDOVER_NAME}.{os.getpid()}.tmp")
    temp.write_text(lines)
    os.chmod(temp, 0o644)
    os.replace(temp, target)


def signal_handover(processes: list[RegistryProcess], *, proc: Path = PROC) -> Callable[[], None]:
    """SIGUSR1 to the supervisor of each process; returns the function that repeats it (supervise.sh ignores
    a repeat once the successor runs, and a signal can land while the script is between two waits)."""
    supervisors = {parent_pid(p, proc) for p in processes if takes_handover(p, proc)} - {None}

    def nudge() -> None:
        for pid in supervisors:
            _signal(pid, signal.SIGUSR1)

    nudge()
    return nudge


def hand_over(config_path: Path, processes: list[RegistryProcess], draining: set[RegistryProcess], *,
              proc: Path = PROC) -> Callable[[], None]:
    """Tell the supervisors of `processes` (SIGTERMed, no longer listening) to start their successors now."""
    draining.update(processes)
    write_handover(config_path, draining)
    return signal_handover(processes, proc=proc)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def restart_registry(
    config_path: Path, endpoint: Endpoint, *, timeout: float, proc: Path = PROC,
    stop: threading.Event | None = None, draining: set[RegistryProcess] | None = None,
    running: list[RegistryProcess] | None = None,
) -> RestartResult:
    """SIGTERM every registry serving config_path, hand over, then wait (up to timeout) for a new one that answers.

    `draining` (kept by the caller across restarts) holds registries handed over earlier that are still
    finishing their requests: they are never signalled again (a second SIGTERM may kill a draining v3) and
    never taken for the new one. With no registry running (the supervisor is pausing after a failed start, or
    has not started one yet), nothing is signalled and the next one the supervisor starts is awaited.
    """
    began, wall = time.monotonic(), time.time()
    draining = draining if draining is not None else set()
    for process in [p for p in draining if not p.alive(proc)]:
        draining.discard(process)
    # `running`: the caller's scan of a moment ago (a /proc scan costs milliseconds on a busy node).
    found = running if running is not None else find_registry_processes(config_path, proc=proc)
    old = [p for p in found if p not in draining and p.alive(proc)]
    supervisors = {parent_pid(p, proc) for p in old if takes_handover(p, proc)}
    supervisors.discard(None)
    overlapped = bool(old) and len(supervisors) == len({parent_pid(p, proc) for p in old})
    inodes: set[str] = set()
    if overlapped:
        write_handover(config_path, draining | set(old))
        cached = [_LISTENERS.get(p) for p in old]
        if all(cached) and all(holds_socket(p, i, proc=proc) for p, i in zip(old, cached)):
            inodes = set().union(*cached)
        else:
            inodes = listener_inodes(endpoint, proc=proc)
    _LISTENERS.clear()
    for process in old:
        _signal(process.pid, signal.SIGTERM)
    result = RestartResult(ok=False, old=old, new=None, seconds=0.0, started_at=wall)
    closed_at: float | None = None
    nudge = None
    if overlapped:
        # The listener closes within milliseconds of SIGTERM; until it has, a new registry could not bind.
        deadline = time.monotonic() + LISTENER_CLOSE_TIMEOUT
        while any(p.alive(proc) and holds_socket(p, inodes, proc=proc) for p in old):
            if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
                break
            time.sleep(LISTENER_POLL_SECONDS)
        closed_at = time.monotonic()
        result.listener_close_seconds = round(closed_at - began, 4)
        alive = [p for p in old if p.alive(proc)]
        if alive:
            draining.update(alive)
            nudge = signal_handover(alive, proc=proc)
            result.handed_over = True
        # else: it exited already (no draintimeout, nothing in flight): the supervisor restarts on the exit.
    timing: dict[str, float] = {}
    new, detail = wait_until_serving(
        config_path, endpoint, timeout=timeout, exclude=set(old) | draining, proc=proc, stop=stop, nudge=nudge,
        crashes=CRASHES_AFTER_HANDOVER if result.handed_over else CRASHES_BEFORE_GIVING_UP, timing=timing,
        fast=result.handed_over)
    if closed_at is not None and "listening" in timing:
        result.no_listener_seconds = round(max(0.0, timing["listening"] - closed_at), 4)
    result.ok, result.new, result.detail = new is not None, new, detail
    result.seconds = time.monotonic() - began
    if new is not None and takes_handover(new, proc):
        # Found now, while nothing is being restarted, so the next restart need not read /proc/net/tcp.
        _LISTENERS[new] = listener_inodes(endpoint, proc=proc)
    return result
