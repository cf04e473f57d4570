"""The registry processes as /proc shows them (docs/design.md §4.3): which run `<bin> serve <config>`, whether
one still holds its listening socket, which supervisor started it and what that supervisor understands.

With `shareProcessNamespace: true` the agent sees the registry container's processes
(docs/upstream.md#k8s-share-process-namespace); it finds the one running `<bin> serve <our config path>` by its
/proc cmdline, never PID 1 (the pause process, which exits on SIGTERM), never itself, and only processes of its own
UID (kill(2) needs that anyway).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from berth_supervise.protocol import GC_MARKER, HANDOVER_MARKER, SUPERVISOR_WORD

from .endpoint import Endpoint

PROC = Path("/proc")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


@dataclass(frozen=True)
class RegistryProcess:
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells a new process from a recycled pid

    def alive(self, proc: Path = PROC) -> bool:
        try:
            return _start_ticks(proc / str(self.pid)) == self.start_ticks and not _is_zombie(proc / str(self.pid))
        except OSError:
            return False


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


def parent_pid(process: RegistryProcess, proc: Path = PROC) -> int | None:
    try:
        return int(_stat_fields(proc / str(process.pid))[1])
    except (OSError, ValueError, IndexError):
        return None


def takes_handover(process: RegistryProcess, proc: Path = PROC) -> bool:
    """Whether the supervisor that started this registry understands HANDOVER_SIGNAL (it marks its children) and still
    is its parent (an orphan, its supervisor killed, has init or a subreaper as parent: never signal that)."""
    return supervised_with(process, HANDOVER_MARKER, proc)


def runs_gc(process: RegistryProcess, proc: Path = PROC) -> bool:
    """Whether the supervisor that started this registry runs garbage-collect on GC_SIGNAL (gc/command.py)."""
    return supervised_with(process, GC_MARKER, proc)


def supervised_with(process: RegistryProcess, marker: bytes, proc: Path = PROC) -> bool:
    """Whether the registry's environment carries `marker` and its parent still is the supervisor."""
    try:
        environ = (proc / str(process.pid) / "environ").read_bytes().split(b"\0")
        parent = parent_pid(process, proc)
        cmdline = (proc / str(parent) / "cmdline").read_bytes() if parent else b""
    except OSError:
        return False
    return marker in environ and SUPERVISOR_WORD in cmdline


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



def start_ticks(pid: int, *, proc: Path = PROC) -> int:
    """/proc/<pid>/stat field 22 of a process (OSError when it is gone)."""
    return _start_ticks(proc / str(pid))


def send_signal(pid: int, sig: int) -> None:
    """kill(2), quiet when the process is gone or no longer ours (a recycled pid)."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


__all__ = ["PROC", "RegistryProcess", "find_registry_processes", "holds_socket", "listener_inodes", "listening",
           "parent_pid", "runs_gc", "send_signal", "start_ticks", "started_after",
           "supervised_with", "takes_handover"]
