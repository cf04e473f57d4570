"""The 3.x handover on the held socket (berth_supervise.held_socket) as a state machine, each transition on its own:
a stand-in Host records what the handover asks of the supervisor (start, promote, SIGTERM, wait, drop), and the
clock is passed in, so no registry, socket or signal is needed."""

from __future__ import annotations

import pytest

from berth_supervise.held_socket import (
    HANDSHAKE_LOOK_SECONDS,
    RETIRE_SECONDS,
    SETTLE_SECONDS,
    SUCCESSOR_RETRIES,
    HeldSocketHandover,
    Host,
    Phase,
)
from berth_supervise.main import Supervisor
from berth_supervise.registry import Registry

T = 1000.0  # the clock the tests pass in
SETTLED = SETTLE_SECONDS + 0.001  # just past the settling (a float sum lands a hair short of it)


class Sock:
    """Stands for a listening socket: the host's `queued` reads its accept queue and handshakes from it."""

    def __init__(self, name: str) -> None:
        self.name, self.accept, self.handshaking = name, 0, 0

    def __repr__(self) -> str:
        return self.name


class FakeHost(Host):
    def __init__(self) -> None:
        self.current_registry: Registry | None = Registry(100, 0.0, 5001, None)
        self.current_registry.sock = Sock("old")
        self.named, self.quick = True, False
        self.answering: set[int] = set()
        self.steering = True  # promote returns the old socket (connections steered to the successor's own)
        self.spawnable = True
        self.next_pid = 200
        self.live: set[int] = {100}
        self.calls: list[tuple] = []
        self.raises = False

    def log(self, message: str) -> None:
        self.calls.append(("log", message))

    def current(self) -> Registry | None:
        return self.current_registry

    def named_in_handover(self) -> tuple[bool, bool | None]:
        return self.named, self.quick

    def start_successor(self, *, new_reload: bool) -> Registry | None:
        self.calls.append(("start", new_reload))
        if not self.spawnable:
            return None
        self.next_pid += 1
        registry = Registry(self.next_pid, 0.0, 6000 + self.next_pid, None)
        registry.sock = Sock(f"sock{self.next_pid}")
        self.live.add(registry.pid)
        return registry

    def answers(self, registry: Registry) -> bool:
        return registry.pid in self.answering

    def promote(self, successor: Registry):
        old = self.current_registry
        self.current_registry = successor
        self.calls.append(("promote", successor.pid))
        return (old.sock if old is not None else Sock("gone")) if self.steering else None

    def write_metrics(self, registry: Registry) -> None:
        self.calls.append(("metrics", registry.pid))

    def drain(self, registry: Registry, *, now: bool) -> None:
        self.calls.append(("drain", registry.pid, now))

    def terminate(self, registry: Registry) -> None:
        self.calls.append(("terminate", registry.pid))

    def alive(self, registry: Registry) -> bool:
        return registry.pid in self.live

    def queued(self, sock, begun_before: float | None) -> int:
        if self.raises:
            raise OSError("gone")
        self.calls.append(("queued", sock.name, begun_before))
        return sock.accept if begun_before is None else sock.handshaking

    def wait_for_queues(self, registry: Registry, sock, now: float) -> None:
        self.calls.append(("wait", registry.pid, sock.name))

    def drop_socket(self, sock) -> None:
        self.calls.append(("drop", sock.name))

    def refuse_port(self, port: int) -> None:
        self.calls.append(("refuse", port))

    def restart(self, status: int, quick: bool) -> None:
        self.calls.append(("restart", status, quick))

    def did(self, *kinds: str) -> list[tuple]:
        return [call for call in self.calls if call[0] in kinds]


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


def _starting(host: FakeHost) -> tuple[HeldSocketHandover, Registry]:
    handover = HeldSocketHandover(host)
    handover.hup(T)
    assert handover.phase is Phase.STARTING and handover.successor is not None
    return handover, handover.successor


def _retiring(host: FakeHost) -> tuple[HeldSocketHandover, Registry, Registry]:
    old = host.current_registry
    handover, successor = _starting(host)
    host.answering.add(successor.pid)
    handover.probe(T)
    assert handover.phase is Phase.RETIRING
    return handover, old, successor


# ---- IDLE -------------------------------------------------------------------------------------------------------


def test_a_sighup_naming_the_current_registry_starts_a_successor(host):
    handover = HeldSocketHandover(host)
    assert handover.phase is Phase.IDLE and not handover.busy()
    handover.hup(T)
    assert handover.phase is Phase.STARTING and handover.busy()
    assert handover.successor is not None and handover.successor.pid == 201
    assert host.did("start") == [("start", True)]  # a new reload: every debug port tried again


def test_a_sighup_that_names_another_registry_changes_nothing(host):
    host.named = False
    handover = HeldSocketHandover(host)
    handover.hup(T)
    assert handover.phase is Phase.IDLE and handover.successor is None and not host.did("start")


def test_a_successor_that_cannot_be_started_leaves_it_idle(host):
    host.spawnable = False
    handover = HeldSocketHandover(host)
    handover.hup(T)
    assert handover.phase is Phase.IDLE and handover.successor is None and not handover.busy()


# ---- STARTING ---------------------------------------------------------------------------------------------------


def test_a_successor_that_does_not_answer_yet_changes_nothing(host):
    handover, successor = _starting(host)
    handover.probe(T)
    assert handover.phase is Phase.STARTING and handover.successor is successor
    assert host.current_registry.pid == 100 and not host.did("promote", "drain", "terminate", "metrics")


def test_a_successor_that_answers_gets_new_connections_and_the_old_one_retires(host):
    old = host.current_registry
    handover, successor = _starting(host)
    host.answering.add(successor.pid)
    handover.probe(T)
    assert handover.phase is Phase.RETIRING and handover.successor is None
    assert host.current_registry is successor
    assert handover.retiring == (old, old.sock, T)
    # Drained but not SIGTERMed (it takes what its accept queue holds first); the metrics name the successor
    # only once the old one is retired.
    assert host.did("drain", "terminate", "metrics") == [("drain", 100, False)]


def test_on_one_shared_socket_the_old_registry_is_sigtermed_when_the_successor_answers(host):
    host.steering = False
    handover, successor = _starting(host)
    host.answering.add(successor.pid)
    handover.probe(T)
    assert handover.phase is Phase.IDLE and handover.retiring is None and not handover.busy()
    assert host.did("drain", "terminate", "metrics") == [("metrics", successor.pid), ("drain", 100, True)]


def test_a_successor_that_answers_after_the_old_registry_exited_is_simply_current(host):
    handover, successor = _starting(host)
    host.current_registry = None
    host.answering.add(successor.pid)
    handover.probe(T)
    assert handover.phase is Phase.IDLE and host.current_registry is successor
    assert host.did("drain", "terminate", "metrics", "drop") == [("metrics", successor.pid), ("drop", "gone")]


def test_the_handover_s_quick_word_reaches_the_old_registry(host):
    host.quick = True
    handover, old, _successor = _retiring(host)
    assert old.quick


def test_a_successor_that_exits_before_it_answers_leaves_the_current_one_serving(host):
    handover, successor = _starting(host)
    assert handover.successor_exited(successor, 1, True)
    assert handover.phase is Phase.IDLE and handover.successor is None and not handover.busy()
    assert not host.did("restart") and host.did("start") == [("start", True)]


def test_a_successor_that_exits_when_no_registry_serves_asks_for_a_restart(host):
    handover, successor = _starting(host)
    host.current_registry = None
    handover.successor_exited(successor, 2, False)
    assert host.did("restart") == [("restart", 2, False)] and handover.phase is Phase.IDLE


def test_a_successor_that_lost_its_debug_port_is_started_again_on_another(host):
    handover, successor = _starting(host)
    for _attempt in range(SUCCESSOR_RETRIES):
        successor.lost_debug_port = True
        assert handover.successor_exited(successor, 1, True)
        assert host.did("refuse")[-1] == ("refuse", successor.debug_port)
        assert handover.phase is Phase.STARTING and handover.successor is not successor
        successor = handover.successor
    assert host.did("start") == [("start", True)] + [("start", False)] * SUCCESSOR_RETRIES
    successor.lost_debug_port = True
    handover.successor_exited(successor, 1, True)  # the retries are spent: the current one serves on
    assert handover.phase is Phase.IDLE and len(host.did("start")) == SUCCESSOR_RETRIES + 1


def test_another_registry_s_exit_is_not_the_successor_s(host):
    handover, successor = _starting(host)
    assert not handover.successor_exited(Registry(999, 0.0, None, None), 1, True)
    assert handover.phase is Phase.STARTING and handover.successor is successor


def test_a_new_sighup_while_starting_stops_the_unanswered_successor_for_a_newer_one(host):
    handover, first = _starting(host)
    handover.hup(T + 1)
    assert handover.phase is Phase.STARTING and handover.successor is not first
    assert host.did("drain") == [("drain", first.pid, True)]  # SIGTERMed: it drains what it may have accepted
    assert host.did("start") == [("start", True), ("start", True)]
    assert host.current_registry.pid == 100


# ---- RETIRING ---------------------------------------------------------------------------------------------------


def test_the_old_registry_is_left_alone_while_it_settles(host):
    handover, old, _successor = _retiring(host)
    handover.retire(T + SETTLE_SECONDS / 2)
    assert handover.phase is Phase.RETIRING and not host.did("queued")


def test_the_old_registry_waits_while_its_accept_queue_holds_connections(host):
    handover, old, _successor = _retiring(host)
    old.sock.accept = 3
    handover.retire(T + SETTLED)
    assert handover.phase is Phase.RETIRING and not host.did("wait", "terminate")


def test_the_old_registry_waits_while_a_handshake_begun_before_the_switch_is_under_way(host):
    handover, old, _successor = _retiring(host)
    old.sock.handshaking = 1
    handover.retire(T + SETTLED)
    assert handover.phase is Phase.RETIRING
    assert host.did("queued") == [("queued", "old", None), ("queued", "old", pytest.approx(SETTLED))]
    handover.retire(T + SETTLED + HANDSHAKE_LOOK_SECONDS / 2)  # the TCP table is read at most every 20 ms
    assert host.did("queued")[-1] == ("queued", "old", None)
    old.sock.handshaking = 0
    handover.retire(T + SETTLED + HANDSHAKE_LOOK_SECONDS + 0.001)
    assert handover.phase is Phase.IDLE


def test_an_empty_queue_retires_the_old_registry_to_the_waiting_room(host):
    handover, old, successor = _retiring(host)
    handover.retire(T + SETTLED)
    assert handover.phase is Phase.IDLE and handover.retiring is None and not handover.busy()
    assert host.did("metrics", "wait", "terminate", "drop") == [("metrics", successor.pid), ("wait", 100, "old")]


def test_an_old_registry_without_a_debug_port_is_sigtermed(host):
    host.current_registry.debug_port = None
    handover, old, _successor = _retiring(host)
    handover.retire(T + SETTLED)
    assert handover.phase is Phase.IDLE and host.did("wait", "terminate") == [("terminate", 100)]


def test_at_the_retire_bound_it_goes_whatever_is_queued(host):
    handover, old, _successor = _retiring(host)
    old.sock.accept = 5
    handover.retire(T + RETIRE_SECONDS - 0.01)
    assert handover.phase is Phase.RETIRING
    handover.retire(T + RETIRE_SECONDS)
    assert handover.phase is Phase.IDLE and host.did("wait") == [("wait", 100, "old")]
    assert "5 connections queued" in [m for _, m in host.did("log")][-1]


def test_an_old_registry_that_exited_meanwhile_leaves_its_socket_to_be_closed(host):
    handover, old, _successor = _retiring(host)
    host.live.discard(old.pid)
    handover.retire(T)  # no settling for a registry that is gone
    assert handover.phase is Phase.IDLE and host.did("wait", "terminate", "drop") == [("drop", "old")]


def test_a_socket_that_cannot_be_asked_counts_as_empty(host):
    handover, _old, _successor = _retiring(host)
    host.raises = True
    handover.retire(T + SETTLED)
    assert handover.phase is Phase.IDLE and host.did("wait") == [("wait", 100, "old")]


def test_a_sighup_while_retiring_waits_until_the_old_registry_is_gone(host):
    handover, old, successor = _retiring(host)
    old.sock.accept = 1
    handover.hup(T + 0.01)
    handover.hup(T + 0.02)  # a repeated one keeps the first one's time
    assert handover.phase is Phase.RETIRING and handover.pending == T + 0.01 and handover.busy()
    assert host.did("start") == [("start", True)]
    handover.take_pending(T + 0.03)  # still retiring: nothing
    assert host.did("start") == [("start", True)]
    old.sock.accept = 0
    handover.retire(T + SETTLED + 0.03)
    handover.take_pending(T + SETTLED + 0.03)
    assert handover.phase is Phase.STARTING and handover.pending is None
    assert host.did("start") == [("start", True), ("start", True)] and host.current_registry is successor


# ---- stopping ---------------------------------------------------------------------------------------------------


def test_a_stop_while_starting_ends_the_handover(host):
    handover, _successor = _starting(host)
    handover.stop()
    assert handover.phase is Phase.STOPPED and handover.successor is None and not handover.busy()
    handover.hup(T + 1)
    handover.probe(T + 1)
    assert host.did("start") == [("start", True)] and not host.did("promote")


def test_a_stop_while_retiring_ends_the_handover(host):
    handover, old, _successor = _retiring(host)
    old.sock.accept = 1
    handover.hup(T + 0.01)
    handover.stop()
    assert handover.phase is Phase.STOPPED and handover.retiring is None and handover.pending is None
    handover.retire(T + RETIRE_SECONDS)
    handover.take_pending(T + RETIRE_SECONDS)
    assert not handover.busy() and not host.did("wait", "terminate") and len(host.did("start")) == 1


# ---- the real host ----------------------------------------------------------------------------------------------


def test_the_supervisor_is_the_handover_s_whole_host():
    missing = [name for name, value in vars(Host).items() if callable(value) and vars(Supervisor).get(name) is None]
    assert not missing, f"Supervisor leaves Host.{missing} unimplemented"
