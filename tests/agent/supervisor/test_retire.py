"""supervise.main's retirement of steered-away registries on real sockets and stand-in processes (issue 38): a fifth
waiting registry stops the oldest only once no socket is leaving the reuseport group. While one is leaving, the
program may name the wrong socket (the kernel moves the last one into the leaving one's slot) and the kernel's hash
may queue a new connection on any socket of the group: a registry SIGTERMed then closes its listener on it, and the
kernel resets it (test_steer.py shows the kernel's side)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from berth_agent.supervisor.supervise.main import MAX_WAITING, RETIRE_SECONDS, Registry, Supervisor
from berth_agent.supervisor.supervise.settings import Settings
from berth_agent.supervisor.supervise.spawn import free_loopback_port, listening_socket
from berth_agent.supervisor.supervise.steer import inode

HOLD = "import signal, time; signal.signal(signal.SIGTERM, lambda *_: exit(0)); time.sleep(60)"


@pytest.fixture
def supervisor(tmp_path):
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1,
                                                       signal.SIGUSR2, signal.SIGHUP, signal.SIGCHLD)}
    wakeup = signal.set_wakeup_fd(-1)
    settings = Settings(config=tmp_path / "config.yml", registry_bin="registry", handover=tmp_path / "handover",
                        state=tmp_path, debug_ports=(), debug_host="127.0.0.1", listen="127.0.0.1:0")
    made = Supervisor(settings)
    held = []
    try:
        yield made, held
    finally:
        for process in held:
            process.kill()
            process.wait()
        signal.set_wakeup_fd(wakeup)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _registry(supervisor: Supervisor, held: list, sock) -> Registry:
    """A stand-in registry: a process holding `sock` (as a registry holds its listener), with a debug port nothing
    answers on (its wait goes on: an unreadable port is given seconds)."""
    process = subprocess.Popen([sys.executable, "-c", HOLD], pass_fds=(sock.fileno(),))
    held.append(process)
    registry = Registry(process.pid, time.monotonic(), free_loopback_port("127.0.0.1"), None)
    registry.sock, registry.sock_inode = sock, inode(sock)
    supervisor.registries[process.pid] = registry
    supervisor.joined(sock)
    return registry


def _signalled(process: subprocess.Popen, within: float) -> bool:
    try:
        process.wait(within)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_a_fifth_waiting_registry_stops_the_oldest_only_once_no_socket_is_leaving_the_group(supervisor):
    sup, held = supervisor
    first = listening_socket("127.0.0.1", 0, reuse_port=True)
    port = first.getsockname()[1]
    sup.listener, sup.steering = first, True
    sockets = [first] + [listening_socket("127.0.0.1", port, reuse_port=True) for _ in range(MAX_WAITING + 2)]
    registries = [_registry(sup, held, sock) for sock in sockets]
    leaving, *waiting, old, current = registries
    # MAX_WAITING registries wait for their queues; `leaving`'s socket is leaving the group (SIGTERMed, its holder
    # not yet closed it); `old` has just been steered away from; `current` gets every new connection.
    now = time.monotonic()
    sup.waiting = []
    for registry in waiting:
        sup.retiring = (registry, registry.sock, now - RETIRE_SECONDS)  # no handshake look
        sup.retire()
    assert [w.pid for w, _r in sup.waiting] == [r.pid for r in waiting]
    sup.current, sup.listener = current, current.sock
    sup.drop_socket(leaving.sock, sup.behind, leaving.pid)
    assert sup.behind == {leaving.sock_inode: leaving.pid}
    sup.point_at_current()
    sup.retiring = (old, old.sock, time.monotonic() - RETIRE_SECONDS)
    sup.retire()  # old joins the waiting: one too many
    assert len(sup.waiting) == MAX_WAITING + 1
    for _ in range(5):
        sup.turn(0.02)
    oldest = held[1]
    assert not _signalled(oldest, 0.3), "the oldest waiting registry was stopped while a socket left the group"
    held[0].terminate()  # the leaving socket's holder closes it: it leaves the group
    assert _signalled(held[0], 5)
    deadline = time.monotonic() + 5
    while oldest.poll() is None and time.monotonic() < deadline:
        sup.turn(0.02)
    assert oldest.poll() is not None
    assert len(sup.waiting) == MAX_WAITING and all(p.poll() is None for p in held[2:])
    assert sup.group.index(inode(current.sock)) == sup.pointed
