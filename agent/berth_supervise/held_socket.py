"""The 3.x handover on the held socket, as a state machine (docs/design.md §4.3).

IDLE: one registry serves. A SIGHUP naming it (`hup`) starts a successor beside it, on a socket of its own in the
same SO_REUSEPORT group with new connections still steered to the old one: STARTING. Each tick `probe` asks the
successor's own debug port; once it answers it is the current registry and new connections go to it: RETIRING,
where `retire` SIGTERMs the old registry (or hands it to the waiting room, waiting.py) once its accept queue is
empty and no handshake begun before the switch is under way, at most RETIRE_SECONDS after the switch; then IDLE.
So something accepts on the address at every moment and the old registry never gets a connection it would drop.

A successor that exits before it answers is started again on another debug port if it lost its own (at most
SUCCESSOR_RETRIES times), else the current registry serves on (IDLE). A SIGHUP while STARTING stops the
unanswered successor (it drains what it may have accepted) and starts one on the config as it is now; a SIGHUP
while RETIRING waits (`pending`) until the old registry is gone: one steered-away registry at a time. Where the
kernel cannot steer (one shared socket), the old registry is SIGTERMed as soon as the successor answers.

Everything outside (processes, sockets, files) is behind `Host`, so the transitions are tested on their own
(tests/supervise/test_held_socket_states.py).
"""

from __future__ import annotations

import enum
import socket

from .registry import Registry

SUCCESSOR_RETRIES = 5  # successors that lost their debug port to another process, tried again at once
# Steered away, the old registry is SIGTERMed once its accept queue is empty, no handshake to the port is under way
# (one begun before the switch may have met its socket and completes into it an RTT later) and SETTLE_SECONDS
# passed (it takes what is queued); at most RETIRE_SECONDS after the switch.
SETTLE_SECONDS = 0.02
HANDSHAKE_LOOK_SECONDS = 0.02
RETIRE_SECONDS = 2.0


class Phase(enum.Enum):
    IDLE = "idle"  # one registry serves, nothing under way
    STARTING = "starting"  # a successor runs beside the current registry and has not answered yet
    RETIRING = "retiring"  # the successor answered and gets new connections; the old one empties its queue
    STOPPED = "stopped"  # the supervisor stops: no handover any more


class Host:
    """What the handover asks of the rest of the supervisor (main.Supervisor; a stand-in in the tests). A plain
    class, not a typing.Protocol: typing costs every registry pod a megabyte."""

    def log(self, message: str) -> None:
        raise NotImplementedError

    def current(self) -> Registry | None:
        raise NotImplementedError

    def named_in_handover(self) -> tuple[bool, bool | None]:
        """(the handover file names the current registry, its old registry waits for no kept-alive client: None
        when the file was not read)."""
        raise NotImplementedError

    def start_successor(self, *, new_reload: bool) -> Registry | None:
        """A successor on a socket of its own (None: it could not be started; the host tries again later)."""
        raise NotImplementedError

    def answers(self, registry: Registry) -> bool:
        raise NotImplementedError

    def promote(self, successor: Registry) -> socket.socket | None:
        """`successor` is the current registry; new connections go to its own socket from now on. The old
        registry's socket when they were steered there (None: one shared socket, nothing steered)."""
        raise NotImplementedError

    def write_metrics(self, registry: Registry) -> None:
        raise NotImplementedError

    def drain(self, registry: Registry, *, now: bool) -> None:
        """`registry` is an older one finishing its requests; SIGTERMed `now`, or later by the handover."""
        raise NotImplementedError

    def terminate(self, registry: Registry) -> None:
        raise NotImplementedError

    def alive(self, registry: Registry) -> bool:
        raise NotImplementedError

    def queued(self, sock: socket.socket, begun_before: float | None) -> int:
        """Connections waiting in `sock`'s accept queue; with `begun_before`, those still in their handshake that
        began over that many seconds ago. Raises OSError."""
        raise NotImplementedError

    def wait_for_queues(self, registry: Registry, sock: socket.socket, now: float) -> None:
        raise NotImplementedError

    def drop_socket(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def refuse_port(self, port: int) -> None:
        raise NotImplementedError

    def restart(self, status: int, quick: bool) -> None:
        """No registry serves any more: start one (after the crash backoff)."""
        raise NotImplementedError


class HeldSocketHandover:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.phase = Phase.IDLE
        self.successor: Registry | None = None  # STARTING: started beside the current registry, not answering
        self.retiring: tuple[Registry, socket.socket, float] | None = None  # RETIRING: (old, its socket, since)
        self.pending: float | None = None  # a SIGHUP waiting for the retiring registry to go (since)
        self.successor_retries = 0
        self.quick = False  # the handover said: the old registry waits for no kept-alive client (GC's switch)
        self.handshakes_seen_at = 0.0  # the last look for handshakes under way (a scan of the whole TCP table)

    def busy(self) -> bool:
        """Whether the loop should look again within milliseconds (a successor to probe, an old one to retire)."""
        return self.phase in (Phase.STARTING, Phase.RETIRING) or self.pending is not None

    # ---- events ------------------------------------------------------------------------------------------------

    def hup(self, now: float) -> None:
        """SIGHUP: start a successor beside the current registry the handover file names."""
        if self.phase is Phase.STOPPED:
            return
        named, quick = self.host.named_in_handover()
        if quick is not None:
            self.quick = quick
        if not named:
            return
        if self.phase is Phase.RETIRING:
            self.pending = self.pending or now  # one steered-away registry at a time: soon
            return
        self.pending = None
        if self.successor is not None:
            # A newer config is asked for (the agent's rollback, or an edit on an edit): the unanswered successor
            # is stopped (it drains whatever it may have accepted) and one on the config as it is now starts.
            self.host.log(f"registry (pid {self.successor.pid}) did not answer yet: stopping it for a newer one")
            self.host.drain(self.successor, now=True)  # its socket is closed once it has exited
            self.successor = None
        self.successor_retries = 0
        self._start(new_reload=True)

    def probe(self, now: float) -> None:
        """STARTING: once the successor answers on its debug port it becomes the current registry."""
        successor = self.successor
        if successor is None or successor.debug_port is None or not self.host.answers(successor):
            return
        old = self.host.current()
        self.successor, self.phase = None, Phase.IDLE
        old_sock = self.host.promote(successor)
        if old is None or old_sock is None:
            self.host.write_metrics(successor)
        if old is None:
            self.host.log(f"registry (pid {successor.pid}) answers on its debug port")
            if old_sock is not None:
                self.host.drop_socket(old_sock)  # its registry has exited
            return
        old.quick = self.quick
        if old_sock is not None:
            self.host.drain(old, now=False)
            self.host.log(f"registry (pid {successor.pid}) answers on its debug port: new connections go to it; "
                          f"stopping registry (pid {old.pid}) once its accept queue is empty")
            self.retiring, self.phase = (old, old_sock, now), Phase.RETIRING
            return
        self.host.log(f"registry (pid {successor.pid}) answers on its debug port: stopping registry (pid {old.pid}), "
                      "which drains")
        self.host.drain(old, now=True)

    def retire(self, now: float) -> None:
        """RETIRING: SIGTERM the steered-away registry once nothing waits in its accept queue (it took all it was
        given), or hand it to the waiting room; then IDLE, and a SIGHUP that waited is taken."""
        if self.retiring is None:
            return
        old, sock, since = self.retiring
        waited = now - since
        alive = self.host.alive(old)
        if alive and waited < SETTLE_SECONDS:
            return
        try:
            queued = self.host.queued(sock, None)
            if not queued and alive and waited < RETIRE_SECONDS:
                # Read the whole TCP table (slow with many TIME_WAIT entries): at most every 20 ms, only now.
                if now - self.handshakes_seen_at < HANDSHAKE_LOOK_SECONDS:
                    return
                self.handshakes_seen_at = now
                queued = self.host.queued(sock, waited)
        except OSError:
            queued = 0
        if alive and waited < RETIRE_SECONDS and queued:
            return
        self.retiring, self.phase = None, Phase.IDLE
        current = self.host.current()
        if current is not None:
            # Named only now: the agent's restart is done once registry-metrics names the successor, and its next
            # one then finds the old registry stopping, as without steering (its debug port soon free again).
            self.host.write_metrics(current)
        note = f" ({queued} connections queued or in their handshake after {waited:.1f}s)" if queued else ""
        if alive and old.debug_port is not None:
            # Its queued notifications die with it (docs/upstream.md#dist-notification-queue): it goes once they are
            # delivered (notify.py).
            waits_for = ("its notification queues are empty (a bounded handover: within its drain timeout)"
                         if old.quick else "its clients have closed theirs and its notification queues are empty")
            self.host.log(f"registry (pid {old.pid}) no longer gets connections{note}; stopping it once {waits_for}")
            self.host.wait_for_queues(old, sock, now)
        elif alive:
            self.host.log(f"stopping registry (pid {old.pid}), which drains{note}")
            self.host.terminate(old)
        else:
            self.host.drop_socket(sock)

    def take_pending(self, now: float) -> None:
        """A SIGHUP that waited for the last steered-away registry, once it is gone."""
        if self.pending is not None and self.phase is Phase.IDLE:
            self.hup(now)

    def successor_exited(self, registry: Registry, status: int, quick: bool) -> bool:
        """Whether `registry` was the successor (it exited before it answered): started again on another debug
        port if it lost its own, else the current registry serves on."""
        if registry is not self.successor:
            return False
        self.successor, self.phase = None, Phase.IDLE
        if quick and registry.lost_debug_port and self.successor_retries < SUCCESSOR_RETRIES:
            self.successor_retries += 1
            self.host.refuse_port(registry.debug_port or 0)
            self.host.log(f"registry (pid {registry.pid}) could not listen on debug port {registry.debug_port}: "
                          "starting its successor on another")
            self._start(new_reload=False)
            return True
        current = self.host.current()
        self.host.log(f"registry (pid {registry.pid}) exited with status {status} before it answered; "
                      f"registry (pid {current.pid if current else None}) serves on")
        if current is None:
            self.host.restart(status, quick)
        return True

    def stop(self) -> None:
        """The supervisor stops (it SIGTERMs every registry, the successor among them): no handover any more."""
        self.phase, self.successor, self.retiring, self.pending = Phase.STOPPED, None, None, None

    def _start(self, *, new_reload: bool) -> None:
        self.successor = self.host.start_successor(new_reload=new_reload)
        self.phase = Phase.STARTING if self.successor is not None else Phase.IDLE


__all__ = ["HANDSHAKE_LOOK_SECONDS", "RETIRE_SECONDS", "SETTLE_SECONDS", "SUCCESSOR_RETRIES", "HeldSocketHandover",
           "Host", "Phase"]
