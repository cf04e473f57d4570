"""Free TCP ports for the services tests start: on 127.0.0.1, and on the other loopback addresses that
tests put replicas on (support.registries.replicas: 127.0.0.2, ...), and who listens on one.

The kernel's pick for a bind to 127.0.0.1:0 only avoids ports in use on 127.0.0.1: a port another xdist worker's
pod listens on at 127.0.0.2 is handed out all the same. A pod of this worker then cannot bind it, and a request
meant for that pod reaches the stranger instead (the clean-clone CI at 02b99c9: a token test's first push got
another test's pull-through cache and its `unsupported`). So a port is free here only when it is free on every
loopback address tests use.

Ports are picked below the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 here), never in it: a
port there is taken, between the pick and the service's own bind, by anything that binds port 0 or connects out
(the clean-clone CI at 4b2b656: the kmock emulator was handed the port just picked for moto; at 079e965 a 2.8
registry never served on its picked port while the node tier started its processes). Below that range only the
tests' own services bind, each to a port picked here; each xdist worker cycles through a slice of its own, so two
workers never pick the same port, and a port a worker released is picked again only after the rest of its slice.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator

LOOPBACK_HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
TRIES = 200
SPAN = 10000  # ports below the ephemeral range, shared out between the xdist workers
NODE_PORTS_LOW = 30000  # and below Kubernetes' NodePort range (30000-32767), which the node tier's Services take


def free_port() -> int:
    """A port nothing is bound to on any of LOOPBACK_HOSTS now, from this worker's slice (the caller binds it soon
    after)."""
    return first_free(_PICKS, LOOPBACK_HOSTS)


def first_free(candidates: Iterable[int], hosts: Iterable[str]) -> int:
    """The first candidate port that binds on every one of `hosts` (each probe closed again at once)."""
    hosts, picks = tuple(hosts), iter(candidates)
    for _ in range(TRIES):
        port = next(picks)
        if all(_binds(host, port) for host in hosts):
            return port
    raise RuntimeError(f"no port free on all of {hosts} in {TRIES} tries")


def worker_slice(worker: str | None, workers: int, ephemeral_low: int) -> range:
    """The ports worker `worker` ("gw0", ...; None outside xdist) of `workers` picks from: its share of the SPAN
    ports below `ephemeral_low` (the first port the kernel hands out by itself) and the NodePort range."""
    high = min(ephemeral_low, NODE_PORTS_LOW)
    low = max(1024, high - SPAN)
    index = int(worker.removeprefix("gw")) % workers if worker and worker.startswith("gw") else 0
    size = (high - low) // max(workers, 1)
    return range(low + index * size, low + (index + 1) * size)


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
            return int(file.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _cycle(ports: range) -> Iterator[int]:
    # From a point of this process's own (a new session does not start where the last one did), round and round.
    start = random.randrange(len(ports))
    while True:
        yield from ports[start:]
        yield from ports[:start]
        start = 0


_PICKS = _cycle(worker_slice(os.environ.get("PYTEST_XDIST_WORKER"),
                             int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1), _ephemeral_low()))


def _binds(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def listener_inodes(host: str, port: int) -> set[int]:
    """Socket inodes LISTENing on host:port, a wildcard address included (/proc/net/tcp and tcp6)."""
    wanted = {_hex_addr(host), "00000000"}
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                addr, _, hex_port = fields[1].partition(":")
                if len(addr) == 32 and addr[:24] in ("0000000000000000FFFF0000", "0" * 24):
                    addr = addr[24:]  # an IPv4-mapped address, or the IPv6 wildcard
                if fields[3] == "0A" and int(hex_port, 16) == port and addr in wanted:
                    found.add(int(fields[9]))
    return found


def holds_socket(pid: int, inodes: set[int]) -> bool:
    """Whether process `pid` has one of these socket inodes open."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:[") and int(link[8:-1]) in inodes:
                return True
    return False


def _hex_addr(host: str) -> str:
    return socket.inet_aton(host)[::-1].hex().upper()


def wait_listening(process: subprocess.Popen, port: int, what: str, *, timeout: float,
                   host: str = "127.0.0.1") -> None:
    """Block until `process` itself holds the socket listening on host:port. A connect alone is answered by any
    listener there: a stranger that took the port between its pick and this server's bind would pass for it while
    the server failed to bind (how start_moto once met the kmock emulator). RuntimeError, with the server's words
    left to the caller's log, when it exits first; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not holds_socket(process.pid, listener_inodes(host, port)):
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before it listened on {host}:{port}")
        if time.monotonic() > deadline:
            holders = "someone else listens there" if listener_inodes(host, port) else "nothing listens there"
            raise TimeoutError(f"{what} does not listen on {host}:{port} after {timeout}s ({holders})")
        time.sleep(0.02)


def wait_for_port(port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
    """Block until something accepts connections on host:port (any listener: for a server this process starts,
    wait_listening); TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s") from None
            time.sleep(0.02)
