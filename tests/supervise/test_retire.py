"""berth_supervise.group's reuseport group on real sockets and stand-in registry processes: the program names the
current registry's socket at every moment, so no new connection ever reaches a registry that is stopping or gone.

A socket leaves the group only when its last holder closes it, and the kernel then moves the group's last socket
into its slot (test_steer.py). The supervisor holds a copy of every registry's socket until that registry has
exited, so only its own close makes a socket leave, and it closes one only when that moves no socket the program
names. Before, a registry's own close made its socket leave at a moment the supervisor saw only later; when a
successor joined in between, the supervisor's order was wrong and the program named the old registry's slot:
new connections went to a registry about to stop, and one in its handshake at the SIGTERM was reset (the CI
failures of test_held.py and test_supervise_python.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from berth_supervise.held_socket import RETIRE_SECONDS, Phase
from berth_supervise.main import Supervisor
from berth_supervise.registry import Registry
from berth_supervise.settings import Settings
from berth_supervise.spawn import free_loopback_port, listening_socket
from berth_supervise.steer import accept_queue
from berth_supervise.waiting import MAX_WAITING
from support.common.polling import wait_for
from support.common.processes import exited_unreaped

HOLD = "import signal, time; signal.signal(signal.SIGTERM, lambda *_: exit(0)); time.sleep(60)"
STUCK = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"  # drains for ever


@pytest.fixture
def supervisor(tmp_path):
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1,
                                                       signal.SIGUSR2, signal.SIGHUP, signal.SIGCHLD)}
    wakeup = signal.set_wakeup_fd(-1)
    settings = Settings(config=tmp_path / "config.yml", registry_bin="registry", handover=tmp_path / "handover",
                        state=tmp_path, debug_ports=(), debug_host="127.0.0.1",
                        listen=f"127.0.0.1:{free_loopback_port('127.0.0.1')}")
    made = Supervisor(settings)
    held: list[subprocess.Popen] = []
    clients: list[socket.socket] = []
    try:
        yield made, held, clients
    finally:
        for client in clients:
            client.close()
        for process in held:
            process.kill()
            process.wait()
        signal.set_wakeup_fd(wakeup)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _group(sup: Supervisor) -> int:
    """A held socket, as hold_socket makes it: the group's first, the program on it."""
    first = listening_socket("127.0.0.1", int(sup.s.listen.rpartition(":")[2]), reuse_port=True)
    sup.group.listener, sup.group.order = first, []
    sup.group.joined(first)
    sup.group.steering = sup.group.steer(0)
    assert sup.group.steering
    return first.getsockname()[1]


def _registry(sup: Supervisor, held: list, sock: socket.socket, code: str = HOLD) -> Registry:
    """A stand-in registry: a process holding `sock` as a registry holds its listener (it accepts nothing, so every
    connection the kernel gives its socket stays in that socket's accept queue), with a debug port nothing answers
    on (a waiting registry then waits for its bound)."""
    process = subprocess.Popen([sys.executable, "-c", code], pass_fds=(sock.fileno(),))
    held.append(process)
    registry = Registry(process.pid, time.monotonic(), free_loopback_port("127.0.0.1"), None)
    registry.sock = sock
    sup.registries.by_pid[process.pid] = registry
    return registry


def _successor(sup: Supervisor, held: list) -> Registry:
    sock = sup.group.successor_socket()
    assert sock is not None and sock is not sup.group.listener
    return _registry(sup, held, sock)


def _answers(sup: Supervisor, registry: Registry) -> None:
    """What the handover's probe does once the successor answers on its debug port (Supervisor.promote)."""
    sup.registries.current = registry
    sup.group.serve_on(registry.sock)


def _gone(pid: int) -> None:
    """Wait until `pid` has exited (a zombie: its sockets closed), leaving the reaping to the supervisor."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if exited_unreaped(pid):
            return
        time.sleep(0.005)
    raise AssertionError(f"pid {pid} did not exit")


def _exit(sup: Supervisor, held: list, registry: Registry) -> None:
    """The registry stops (it closes its copy of the socket as it goes) and the supervisor reaps it."""
    next(p for p in held if p.pid == registry.pid).terminate()
    _gone(registry.pid)
    deadline = time.monotonic() + 5
    while registry.pid in sup.registries.by_pid and time.monotonic() < deadline:
        sup.reap()
        time.sleep(0.005)
    assert registry.pid not in sup.registries.by_pid


def _retiring(sup: Supervisor, registry: Registry) -> None:
    """The handover in RETIRING for `registry`, past its bound (no handshake look): retire takes it at once."""
    handover = sup.handover
    handover.retiring, handover.phase = (registry, registry.sock, time.monotonic() - RETIRE_SECONDS), Phase.RETIRING
    handover.retire(time.monotonic())


def _regroup(sup: Supervisor) -> None:
    """What the loop does each turn on the held socket after the handover's own steps."""
    sup.group.regroup()
    sup.handover.take_pending(time.monotonic())


def _ignores_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as status:
        ignored = next(line for line in status if line.startswith("SigIgn:")).split()[1]
    return bool(int(ignored, 16) & 1 << (signal.SIGTERM - 1))


def _connect(port: int, count: int, clients: list) -> None:
    clients += [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]


def _queued(*registries: Registry) -> list[int]:
    return [accept_queue(r.sock) for r in registries]


def test_a_registry_that_exits_while_a_successor_joins_never_misplaces_the_successor(supervisor):
    """The CI failure: [old, current]; the old registry exits and a SIGHUP's successor joins before the exit is
    reaped. The successor, once it answers, must get every new connection, the current one none."""
    sup, held, clients = supervisor
    port = _group(sup)
    current = _registry(sup, held, sup.group.listener)
    old, current = current, _successor(sup, held)
    _answers(sup, current)
    _retiring(sup, old)
    ((waiting, _old),) = sup.waiting.waiting
    # SIGTERM: it closes its listener and exits
    sup.waiting.release(waiting, old, "its queues are empty", time.monotonic())
    _gone(old.pid)  # the supervisor has not reaped it yet
    successor = _successor(sup, held)  # the next SIGHUP's successor joins now
    sup.reap()  # the exit is seen only now
    _regroup(sup)
    _connect(port, 16, clients)
    assert _queued(current, successor) == [16, 0], "a starting successor was given connections"
    _answers(sup, successor)
    _connect(port, 32, clients)
    assert _queued(current, successor) == [16, 32], "the steered-away registry was still given connections"


def test_a_socket_whose_leaving_would_move_the_current_one_waits_for_the_next_successor(supervisor):
    """[a, b, current] with a and b's registries gone: closing either would move the current socket into its slot
    with the program past the end (the kernel's hash over a, b and current). Both wait, steered past, until a
    successor joins behind the current one; every connection meanwhile reaches the current registry."""
    sup, held, clients = supervisor
    port = _group(sup)
    a = _registry(sup, held, sup.group.listener)
    b = _successor(sup, held)
    _answers(sup, b)
    current = _successor(sup, held)
    _answers(sup, current)
    _exit(sup, held, a)
    _exit(sup, held, b)
    _regroup(sup)
    assert len(sup.group.unused) == 2 and all(s.fileno() >= 0 for s in sup.group.unused) and len(sup.group.order) == 3
    _connect(port, 16, clients)
    assert accept_queue(current.sock) == 16
    successor = _successor(sup, held)
    _regroup(sup)  # one of them can go now: the successor takes its slot, the current socket stays where it is
    _connect(port, 16, clients)
    assert _queued(current, successor) == [32, 0] and len(sup.group.unused) == 1 and len(sup.group.order) == 3
    _answers(sup, successor)
    _regroup(sup)
    _connect(port, 16, clients)
    assert _queued(current, successor) == [32, 16] and not sup.group.unused and len(sup.group.order) == 2
    _exit(sup, held, current)
    _regroup(sup)  # [current, successor] -> [successor]: the hash in between has one socket to choose from
    assert sup.group.order == [sup.group.order[0]] and sup.group.pointed == 0
    _connect(port, 16, clients)
    assert accept_queue(successor.sock) == 32


def test_a_fifth_waiting_registry_stops_the_oldest_at_once_and_its_socket_gets_no_connection(supervisor):
    sup, held, clients = supervisor
    port = _group(sup)
    registries = [_registry(sup, held, sup.group.listener)]
    for _ in range(MAX_WAITING + 1):
        registries.append(_successor(sup, held))
        _answers(sup, registries[-1])
    *waiting, current = registries
    for registry in waiting:
        registry.drain = 30.0  # its queues are waited for (a debug port nothing answers on: up to half a second)
    sup.waiting.waiting = []
    for registry in waiting:
        _retiring(sup, registry)
    assert len(sup.waiting.waiting) == MAX_WAITING + 1
    sup.waiting.check(time.monotonic())
    _gone(held[0].pid)  # SIGTERMed: more than MAX_WAITING wait
    assert len(sup.waiting.waiting) == MAX_WAITING and all(p.poll() is None for p in held[1:])
    _connect(port, 16, clients)
    assert _queued(*registries) == [0] * MAX_WAITING + [0, 16]
    sup.reap()
    _regroup(sup)
    _connect(port, 16, clients)
    order = sup.group.order
    assert accept_queue(current.sock) == 32 and order.index(order[sup.group.pointed]) == sup.group.pointed


def test_an_old_registry_still_running_at_its_drain_timeout_after_the_switch_is_killed(supervisor):
    """After a reload that retires a credential, no request is served on the old one later than
    drainTimeout after the switch, whatever the old registry is doing (here it ignores its SIGTERM). An unbounded
    handover (no credential retired) sets no such bound."""
    sup, held, _clients = supervisor
    _group(sup)
    old = _registry(sup, held, sup.group.listener, code=STUCK)
    old.drain, old.quick = 0.4, True  # a bounded handover: a credential retired
    wait_for(lambda: _ignores_sigterm(old.pid), what="the stand-in to ignore SIGTERM")
    _answers(sup, _successor(sup, held))
    sup.drain(old, now=True)  # the switch: SIGTERMed
    assert old.retire_by is not None and sup.next_timeout() <= 0.4
    sup.enforce_retirement(time.monotonic())
    time.sleep(0.2)
    assert held[0].poll() is None  # draining, within its bound
    time.sleep(0.25)
    sup.enforce_retirement(time.monotonic())
    assert held[0].wait(5) == -signal.SIGKILL
    lingering = _registry(sup, held, sup.group.successor_socket(), code=STUCK)
    lingering.drain = 0.4
    sup.drain(lingering, now=False)
    assert lingering.retire_by is None
