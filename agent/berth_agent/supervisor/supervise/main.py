"""The supervisor's loop: one thread, one selector over the registries' output pipes and a signal pipe.

Signals (the C handler writes each one's number to the signal pipe, so the loop sees them in order and idles in
select otherwise, using no CPU): TERM/INT stop every process (SIGTERM: the registry drains; SIGINT would kill 2.8
at once); USR1 (2.8's overlapped restart: the agent SIGTERMed the registry the handover file names, and its
listener is closed) starts the successor at once; HUP (3.x on the held socket) starts the successor beside the
registry the handover file names (on a socket of its own in the same SO_REUSEPORT group, new connections still
steered to the old one), waits until the successor answers on its own debug port, steers new connections to it,
and SIGTERMs the old one once its accept queue is empty (steer.py), so something accepts on the address at every
moment and the old one never gets a connection it would drop; USR2 takes a garbage-collect request; CHLD reaps.

A registry that exits is started again: at once after a clean exit, within 10 ms after a handover (a lost bind
race, 2.8), else after a second (a config it refuses would otherwise restart in a hot loop). Each registry gets a
debug port no other live registry holds (field-notes §8: a failed debug bind is fatal), named with its pid in
registry-metrics for the agent's stable metrics endpoint.
"""

from __future__ import annotations

import errno
import os
import re
import selectors
import signal
import socket
import sys
import time
from pathlib import Path

from .gc import GarbageCollectChild
from .lines import LineSplitter
from .names import (
    DROPPED_NAME,
    EXIT_NAME,
    METRICS_NAME,
    OUTPUT_NAME,
    PREVIOUS_OUTPUT_NAME,
    QUICK_WORD,
    SUPERVISOR_PID_NAME,
)
from .notify import Waiting, drain_seconds
from .settings import USAGE, Settings, berth_version, split_addr
from .spawn import (
    SpawnError,
    exit_status,
    free_loopback_port,
    listening_socket,
    port_is_free,
    registry_env,
    spawn,
    version_output,
)
from .steer import accept_queue, client_connections, handshakes, inode, point_group_at

CONFIG_POLL_SECONDS = 0.01  # while waiting for the first config.yml (in a pod it is there before the container)
QUICK_FAILURE_SECONDS = 2.0  # a registry that dies sooner was refused at start
PAUSE_SECONDS = 1.0  # between two quick failures
RACE_RETRY_SECONDS = 0.01  # after a handover: the old listener may not have let the port go yet (2.8)
RACE_RETRIES = 5
PROBE_SECONDS = 0.005  # how often a successor's debug port is tried (it answers ~30 ms after exec)
SUCCESSOR_RETRIES = 5  # successors that lost their debug port to another process, tried again at once
# Steered away, the old registry is SIGTERMed once its accept queue is empty, no handshake to the port is under way
# (one begun before the switch may have met its socket and completes into it an RTT later) and SETTLE_SECONDS
# passed (it takes what is queued); at most RETIRE_SECONDS after the switch.
SETTLE_SECONDS = 0.02
HANDSHAKE_LOOK_SECONDS = 0.02
RETIRE_SECONDS = 2.0
# Steered-away registries that wait for their notification queues (notify.py): looked at every WAIT_POLL_SECONDS;
# at most MAX_WAITING at a time (each is a whole registry process): a newer one retires the oldest at once.
WAIT_POLL_SECONDS = 0.1
MAX_WAITING = 4
DEBUG_BIND_ERROR = b"error listening on debug interface"
# `registry --version`: 3.x ".../distribution/distribution/v3 v3.1.1", 2.8 ".../docker/distribution 2.8.2"
ACTIVATION = re.compile(rb"distribution/v3\b|\sv3\.\d")
MARKERS = {"BERTH_SUPERVISE_HANDOVER": "1", "BERTH_SUPERVISE_GC": "1"}
WATCHED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGCHLD)


class Registry:
    """One registry process (compared by identity; a plain class, as in settings.py)."""

    def __init__(self, pid: int, started: float, debug_port: int | None, pipe: int | None) -> None:
        self.pid = pid
        self.started = started
        self.debug_port = debug_port
        self.pipe = pipe  # the read end of its output pipe, until end of file
        self.splitter = LineSplitter()
        self.lost_debug_port = False  # it said it could not bind its debug port
        self.sock: socket.socket | None = None  # its listening socket (3.x), held by the supervisor too
        self.quick = False  # replaced on GC's read-only switch: waits for no kept-alive client
        self.drain = 0.0  # http.draintimeout of the config it started on


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.output_path = settings.state / OUTPUT_NAME
        self.current: Registry | None = None  # serving (or starting) on the newest config
        self.successor: Registry | None = None  # 3.x: started beside `current`, not yet answering
        self.draining: list[Registry] = []  # older registries finishing their in-flight requests
        self.registries: dict[int, Registry] = {}
        self.stopping: str | None = None
        self.stopped: list[int] = []  # pids signalled at the stop, current first: their statuses make ours
        self.had_current = False  # a registry ran when the stop came (else the last failure is the status)
        self.statuses: dict[int, int] = {}
        self.restart_at: float | None = None
        self.handed_over = False  # the current registry was started by a 2.8 handover
        self.retries = 0
        self.successor_retries = 0
        self.last = 0
        self.refused_ports: set[int] = set()  # debug ports a registry could not bind since the last handover
        self.listener: socket.socket | None = None  # the current registry's socket (3.x): a restart gets it again
        self.steering = False  # one socket per registry, new connections steered (steer.py); else one shared
        self.retiring: tuple[Registry, socket.socket, float] | None = None  # steered away, not yet SIGTERMed
        # Sockets no registry uses any more. A socket leaves the group only when its last holder closes it, and
        # the supervisor holds each one until its registry has exited: only the supervisor's own close makes one
        # leave, so `group` is always the kernel's (a leave a registry made while a successor joined, seen only
        # after, once put the successor's index where the old registry's socket was). Closed in close_sockets.
        self.unused: list[socket.socket] = []
        self.handshakes_seen_at = 0.0  # the last look for handshakes under way (a scan of the whole TCP table)
        self.pointed = 0  # the group's program: the index new connections go to
        # The reuseport group as the kernel keeps it (socket inodes in join order; one that leaves gets the last
        # one moved into its slot), so the program can name the current registry's socket whoever else is in it.
        self.group: list[int] = []
        self.waiting: list[tuple[Waiting, Registry]] = []  # steered away, SIGTERMed once their queues are empty
        self.waiting_due = 0.0
        self.dropped: dict[str, int] = {}  # events dropped at the bound, per endpoint, since this supervisor started
        self.replace_due: float | None = None  # a SIGHUP waiting for the last steered-away registry's queue (since)
        self.quick = False  # the handover said: the old registry waits for no kept-alive client (GC's switch)
        self.base_env = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
        self.gc = GarbageCollectChild(settings.state, settings.registry_bin, settings.config, self.base_env, put,
                                      self.log)
        self.selector = selectors.DefaultSelector()
        self.wake_read, wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        for sig in WATCHED:
            signal.signal(sig, _noted)
        self.selector.register(self.wake_read, selectors.EVENT_READ)
        self.output_fd: int | None = None
        self.gc_due: float | None = None  # when the garbage-collect's watchdog looks again

    # ---- the loop ----------------------------------------------------------------------------------------------

    def run(self) -> int:
        activation = self.s.listen is not None and self.speaks_activation()  # asked before the config is there
        if not self.s.config.exists():
            self.log(f"waiting for {self.s.config}")
            while not self.s.config.exists():  # the agent writes the config before any registry may start
                self.turn(CONFIG_POLL_SECONDS)
                if self.stopping:
                    return 143
        try:
            self.s.state.mkdir(parents=True, exist_ok=True)
            (self.s.state / SUPERVISOR_PID_NAME).write_text(f"{os.getpid()}\n")
        except OSError as exc:
            self.log(f"cannot write to the state dir {self.s.state}: {exc}")
        if activation:
            self.hold_socket()
        if not self.stopping:
            self.start_registry()
        while not self.stopping or self.registries or self.gc.pid is not None:
            self.turn(self.next_timeout())
        status = next((self.statuses[pid] for pid in self.stopped if self.statuses.get(pid)), 0)
        if status == 0 and not self.had_current:
            status = self.last  # stopped while pausing after a failed start: that failure is ours
        return status

    def turn(self, timeout: float | None) -> None:
        """Wait for output, a signal or the timeout; act on everything that happened."""
        for key, _events in self.selector.select(timeout):
            if key.fd == self.wake_read:
                continue
            self.read_output(key.data)
        for sig in self.take_signals():
            self.on_signal(sig)
        self.reap()
        now = time.monotonic()
        if self.restart_at is not None and now >= self.restart_at and not self.stopping:
            self.restart_at = None
            self.start_registry()
        if self.successor is not None:
            self.probe_successor()
        if self.steering and not self.stopping:
            self.retire()
            if self.waiting and now >= self.waiting_due:
                self.waiting_due = now + WAIT_POLL_SECONDS
                self.check_waiting(now)
            self.regroup()
        self.gc_due = self.gc.tick(now)

    def next_timeout(self) -> float | None:
        now = time.monotonic()
        due = [t for t in (self.restart_at, self.gc_due) if t is not None]
        if self.successor is not None or self.retiring is not None or self.replace_due is not None:
            due.append(now + PROBE_SECONDS)
        if self.waiting:
            due.append(self.waiting_due)
        return max(0.0, min(due) - now) if due else None

    def take_signals(self) -> list[int]:
        signals = []
        while True:
            try:
                data = os.read(self.wake_read, 256)
            except BlockingIOError:
                return signals
            if not data:
                return signals
            signals.extend(data)

    def on_signal(self, sig: int) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT):
            self.stop(signal.Signals(sig).name[3:])
        elif self.stopping:
            return
        elif sig == signal.SIGUSR1:
            self.take_handover()
        elif sig == signal.SIGHUP:
            self.take_replacement()
        elif sig == signal.SIGUSR2:
            self.gc.take_request()

    # ---- starting and stopping ---------------------------------------------------------------------------------

    def speaks_activation(self) -> bool:
        """Whether the registry binary serves on a socket it is handed: Distribution 3 (`registry --version`)."""
        try:
            version = version_output([self.s.registry_bin, "--version"], self.base_env)
        except SpawnError as exc:
            version = str(exc).encode()
        if ACTIVATION.search(version):
            return True
        self.log(f"{self.s.registry_bin} is not Distribution 3 ({version.strip()[:200].decode(errors='replace')!r}"
                 "): no socket activation, so each registry binds its own listener (overlapped restarts)")
        return False

    def hold_socket(self) -> None:
        """The one listening socket of this container (3.x): every registry serves on it, none binds its own."""
        host, port = split_addr(self.s.listen or "")
        while self.listener is None and not self.stopping:
            try:
                self.listener = listening_socket(host, port, reuse_port=True)
                self.log(f"holding the registry's listening socket on {self.s.listen}")
                self.group = [inode(self.listener)]
                self.steering = self.steer(0)
            except OSError as exc:
                self.log(f"cannot listen on {self.s.listen}: {exc}; trying again in 1s")
                self.turn(PAUSE_SECONDS)

    def start_registry(self, *, successor: bool = False) -> None:
        port = self.pick_debug_port()
        env = dict(registry_env(self.base_env, self.s.config), **MARKERS)
        if self.listener is not None:
            env["BERTH_SUPERVISE_SOCKET"] = "1"
        if port is not None:
            env.update(REGISTRY_HTTP_DEBUG_ADDR=f"{self.s.debug_host}:{port}",
                       REGISTRY_HTTP_DEBUG_PROMETHEUS_ENABLED="true", REGISTRY_HTTP_DEBUG_PROMETHEUS_PATH="/metrics")
        sock = self.successor_socket() if successor else self.listener
        read_end, write_end = os.pipe()
        try:
            pid = spawn([self.s.registry_bin, "serve", str(self.s.config)], env, stdout=write_end,
                        listener=sock)
        except SpawnError as exc:
            os.close(read_end)
            self.drop_socket(sock)
            self.log(f"{exc}; trying again in {PAUSE_SECONDS:g}s")
            self.last = 127
            self.restart_at = time.monotonic() + PAUSE_SECONDS
            return
        finally:
            os.close(write_end)
        os.set_blocking(read_end, False)
        registry = Registry(pid, time.monotonic(), port, read_end)
        registry.sock = sock
        try:
            registry.drain = drain_seconds(self.s.config.read_bytes())  # what it read a moment ago
        except OSError:
            pass
        self.registries[pid] = registry
        self.selector.register(read_end, selectors.EVENT_READ, registry)
        metrics = f", metrics on {self.s.debug_host}:{port}" if port is not None else ""
        if successor:
            self.successor = registry
            self.log(f"started registry (pid {pid}{metrics}) beside registry (pid {self.current_pid()}) on the "
                     "held socket")
        else:
            self.current = registry
            self.write_metrics(registry)
            self.log(f"started registry (pid {pid}{metrics})")
        if self.stopping:
            _signal(pid, signal.SIGTERM)

    def stop(self, name: str) -> None:
        if self.stopping:
            return
        self.stopping = name
        self.restart_at = None
        ordered = [r for r in (self.current, self.successor) if r is not None] + self.draining
        for registry in ordered:
            if registry.pid in self.registries:
                self.log(f"received SIG{name}, stopping registry (pid {registry.pid})")
                _signal(registry.pid, signal.SIGTERM)
        self.stopped = [r.pid for r in ordered]
        self.had_current = self.current is not None
        self.gc.stop()
        self.retiring = None
        for _waiting, registry in self.waiting:  # SIGTERMed above, among the draining ones
            self.log(f"registry (pid {registry.pid}) stops with its notification queues as they are (the supervisor "
                     "stops)")
        self.waiting = []
        for registry in ordered:
            if registry.sock is not None and registry.sock is not self.listener:
                registry.sock.close()
        for sock in self.unused:
            sock.close()
        self.unused = []
        if self.listener is not None:
            self.listener.close()  # the registries close theirs as they stop: then connections are refused
            self.listener = None

    def pick_debug_port(self) -> int | None:
        """The first of the debug ports no live registry holds and none failed to bind since the last handover;
        on the held socket (where the successor's own port is how it is seen answering) a free one otherwise."""
        held = {r.debug_port for r in self.registries.values()}
        for port in self.s.debug_ports:
            if port in held or port in self.refused_ports:
                continue
            if not port_is_free(self.s.debug_host, port):
                # Another process holds it. Started on it, the registry would die of it (field-notes §8), 2.8
                # perhaps only after it answered on its own port (its debug listener runs in a goroutine).
                self.refused_ports.add(port)
                self.log(f"could not listen on debug port {port}: another process holds it; not used until the "
                         "next reload")
                continue
            return port
        if self.listener is not None:
            return free_loopback_port(self.s.debug_host)
        return None

    # ---- handovers ---------------------------------------------------------------------------------------------

    def named_in_handover(self) -> bool:
        """Whether the handover file names the current registry (a late or repeated signal changes nothing)."""
        if self.current is None:
            return False
        try:
            lines = self.s.handover.read_text().splitlines()
        except OSError:
            return False
        self.quick = QUICK_WORD in lines
        return any(line.split()[:1] == [str(self.current.pid)] for line in lines)

    def take_handover(self) -> None:
        """SIGUSR1 (2.8): the agent SIGTERMed the current registry and its listener is closed: start its successor."""
        if not self.named_in_handover() or self.current is None:
            return
        self.log(f"registry (pid {self.current.pid}) stopped listening, draining; starting its successor")
        self.draining.append(self.current)
        self.current = None
        self.handed_over = True
        self.retries = 0
        self.refused_ports.clear()  # a new reload tries every port again
        self.restart_at = None
        self.start_registry()

    def take_replacement(self) -> None:
        """SIGHUP (3.x): start a successor on the held socket beside the current registry the handover names."""
        if self.listener is None:
            self.log("SIGHUP ignored: no listening socket is held (BERTH_LISTEN_ADDR is not set)")
            return
        if not self.named_in_handover():
            return
        if self.steering and self.retiring is not None:
            self.replace_due = self.replace_due or time.monotonic()  # one steered-away registry at a time: soon
            return
        self.replace_due = None
        if self.successor is not None:
            # A newer config is asked for (the agent's rollback, or an edit on an edit): the unanswered successor
            # is stopped (it drains whatever it may have accepted) and one on the config as it is now starts.
            self.log(f"registry (pid {self.successor.pid}) did not answer yet: stopping it for a newer one")
            _signal(self.successor.pid, signal.SIGTERM)
            self.draining.append(self.successor)  # its socket is closed once it has exited (exited)
            self.successor = None
        self.refused_ports.clear()
        self.successor_retries = 0
        self.start_registry(successor=True)

    def probe_successor(self) -> None:
        successor = self.successor
        if successor is None or successor.debug_port is None or not answers(self.s.debug_host, successor.debug_port):
            return
        own = self.steering and successor.sock is not None and successor.sock is not self.listener
        old, self.current, self.successor = self.current, successor, None
        if own:
            old_sock, self.listener = self.listener, successor.sock
            self.point_at_current()  # every new connection to the successor from now on
        if old is None or not own:
            self.write_metrics(successor)
        if old is None:
            self.log(f"registry (pid {successor.pid}) answers on its debug port")
            if own and old_sock is not None:
                self.drop_socket(old_sock)  # its registry has exited
                self.close_sockets()
            return
        self.draining.append(old)
        old.quick = self.quick
        if own and old_sock is not None:
            self.log(f"registry (pid {successor.pid}) answers on its debug port: new connections go to it; "
                     f"stopping registry (pid {old.pid}) once its accept queue is empty")
            self.retiring = (old, old_sock, time.monotonic())
            return
        self.log(f"registry (pid {successor.pid}) answers on its debug port: stopping registry (pid {old.pid}), "
                 "which drains")
        _signal(old.pid, signal.SIGTERM)

    def retire(self) -> None:
        """SIGTERM the steered-away registry once nothing waits in its accept queue (it took all it was given)."""
        if self.retiring is None:
            return
        old, sock, since = self.retiring
        waited = time.monotonic() - since
        alive = old.pid in self.registries
        if alive and waited < SETTLE_SECONDS:
            return
        try:
            queued = accept_queue(sock)
            if not queued and alive and waited < RETIRE_SECONDS:
                # Read the whole TCP table (slow with many TIME_WAIT entries): at most every 20 ms, only now.
                if time.monotonic() - self.handshakes_seen_at < HANDSHAKE_LOOK_SECONDS:
                    return
                self.handshakes_seen_at = time.monotonic()
                queued = handshakes(sock.getsockname()[1], begun_before=waited)
        except OSError:
            queued = 0
        if alive and waited < RETIRE_SECONDS and queued:
            return
        self.retiring = None
        if self.current is not None:
            # Named only now: the agent's restart is done once registry-metrics names the successor, and its next
            # one then finds the old registry stopping, as without steering (its debug port soon free again).
            self.write_metrics(self.current)
        if old.pid in self.registries and old.debug_port is not None:
            # Its queued notifications die with it (field-notes §9): it goes once they are delivered (notify.py).
            note = f" ({queued} connections queued or in their handshake after {waited:.1f}s)" if queued else ""
            self.log(f"registry (pid {old.pid}) no longer gets connections{note}; stopping it once its clients "
                     "have closed theirs and its notification queues are empty")
            port = sock.getsockname()[1]
            connections = None if old.quick else (lambda pid=old.pid: client_connections(pid, port))
            self.waiting.append((Waiting(old.pid, self.s.debug_host, old.debug_port, old.drain, time.monotonic(),
                                         connections), old))
            # Checked at once; a fifth waiting registry stops the oldest there, under the same rule as any other
            # (its accept queue empty).
            self.waiting_due = time.monotonic()
            return
        if old.pid in self.registries:
            note = f" ({queued} connections queued or in their handshake after {waited:.1f}s)" if queued else ""
            self.log(f"stopping registry (pid {old.pid}), which drains{note}")
            _signal(old.pid, signal.SIGTERM)
        if not alive:
            self.drop_socket(sock)

    def check_waiting(self, now: float) -> None:
        for index, (waiting, registry) in enumerate(list(self.waiting)):
            over = len(self.waiting) - MAX_WAITING
            reason = f"more than {MAX_WAITING} registries waiting" if index < over else waiting.check(now)
            if reason is None:
                continue
            try:
                queued = accept_queue(registry.sock) if registry.sock is not None and registry.sock.fileno() >= 0 else 0
            except OSError:
                queued = 0
            if queued:  # it has connections to take first: looked at again
                continue
            self.release(waiting, registry, reason)

    def release(self, waiting: Waiting, registry: Registry, reason: str) -> None:
        """SIGTERM a waiting registry (it drains); what it still had queued is dropped, counted per endpoint."""
        self.waiting.remove((waiting, registry))
        seconds = time.monotonic() - waiting.since
        dropped = {name: count for name, count in waiting.pending.items() if count > 0}
        if dropped:
            for name, count in sorted(dropped.items()):
                self.dropped[name] = self.dropped.get(name, 0) + count
                self.log(f"registry (pid {registry.pid}) still had {count} events queued for notification endpoint "
                         f"{name} after {seconds:.1f}s ({reason}): dropped")
            put(self.s.state / DROPPED_NAME, "\n".join(f"{n} {c}" for n, c in sorted(self.dropped.items())))
        self.log(f"stopping registry (pid {registry.pid}), which drains: {reason} after {seconds:.1f}s")
        _signal(registry.pid, signal.SIGTERM)  # its socket stays in the group, steered past, until it has exited

    def regroup(self) -> None:
        """Close the sockets no registry uses when that moves no socket the program names, keep the program on the
        current registry's, and take a SIGHUP that waited for the last steered-away registry."""
        self.close_sockets()
        self.point_at_current()
        if self.replace_due is not None and self.retiring is None:
            self.take_replacement()

    def point_at_current(self) -> None:
        if self.listener is None or not self.steering:
            return
        try:
            index = self.group.index(inode(self.listener))
        except (ValueError, OSError):
            return
        if index != self.pointed:
            self.steer(index)

    def joined(self, sock: socket.socket) -> None:
        self.group.append(inode(sock))

    def left(self, number: int) -> None:
        """The kernel's reuseport_detach_sock: the last socket takes the slot of the one that left."""
        if number in self.group:
            slot = self.group.index(number)
            self.group[slot] = self.group[-1]
            self.group.pop()

    def successor_socket(self) -> socket.socket | None:
        """A socket of the successor's own in the current one's group (steered past it until it answers)."""
        if not self.steering or self.listener is None:
            return self.listener
        host, port = split_addr(self.s.listen or "")
        try:
            sock = listening_socket(host, port, reuse_port=True)
        except OSError as exc:
            self.log(f"cannot open a second socket on {self.s.listen} ({exc}): the successor shares the current one")
            return self.listener
        self.joined(sock)
        return sock

    def steer(self, index: int) -> bool:
        """Point the group's program at socket `index`; False (logged) where the kernel cannot."""
        if self.listener is None:
            return False
        try:
            point_group_at(self.listener, index)
        except OSError as exc:
            self.log(f"cannot steer connections between registries ({exc}): they share one socket")
            return False
        self.pointed = index
        return True

    def drop_socket(self, sock: socket.socket | None) -> None:
        """A socket no live registry uses any more: closed by close_sockets (never while a registry holds it)."""
        if sock is None or sock is self.listener or sock.fileno() < 0 or any(sock is s for s in self.unused):
            return
        if any(r.sock is sock for r in self.registries.values()):
            return  # a registry restarted on it still serves there (its last user's exit brings it back)
        if not self.steering:
            sock.close()
            return
        self.unused.append(sock)

    def close_sockets(self) -> None:
        """Close the unused sockets whose leaving moves no socket the program names. The kernel moves the group's
        last socket into the slot of one that leaves, so a leave with the current socket last would leave the
        program past the end until it is pointed again, and the kernel's hash would meanwhile give new connections
        to any socket of the group, a stopped registry's included. Such a socket waits, steered past, until a
        successor has joined behind the current one (or it is the only other one: the hash then has one choice)."""
        current = self.slot(self.listener)
        for sock in list(self.unused):
            slot, last = self.slot(sock), len(self.group) - 1
            if current == last and slot is not None and slot != last and len(self.group) > 2:
                continue
            self.unused.remove(sock)
            if slot is not None:
                self.left(self.group[slot])
            sock.close()
            current = self.slot(self.listener)
            self.point_at_current()

    def slot(self, sock: socket.socket | None) -> int | None:
        try:
            return self.group.index(inode(sock)) if sock is not None else None
        except (ValueError, OSError):
            return None

    # ---- exits -------------------------------------------------------------------------------------------------

    def reap(self) -> None:
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            status = exit_status(wait_status)
            if pid == self.gc.pid:
                self.gc.ended(status)
            elif pid in self.registries:
                self.exited(self.registries.pop(pid), status)

    def exited(self, registry: Registry, status: int) -> None:
        self.read_output(registry, until_end=True)
        self.statuses[registry.pid] = status
        lived = time.monotonic() - registry.started
        for waiting, held in list(self.waiting):
            if held is registry:  # it died while waiting (a crash, a kill -9): its queue went with it
                self.waiting.remove((waiting, held))
        self.drop_socket(registry.sock)  # closed when that moves no socket the program names (close_sockets)
        if registry in self.draining:
            self.draining.remove(registry)
            self.log(f"registry (pid {registry.pid}) exited with status {status} after draining")
            return
        if self.stopping:
            if registry is self.current:
                self.current = None
            self.log(f"registry (pid {registry.pid}) exited with status {status}")
            return
        quick = status != 0 and lived < QUICK_FAILURE_SECONDS
        if registry is self.successor:
            self.successor = None
            self.record_exit(registry, status, lived)
            if quick and registry.lost_debug_port and self.successor_retries < SUCCESSOR_RETRIES:
                self.successor_retries += 1
                self.refused_ports.add(registry.debug_port or 0)
                self.log(f"registry (pid {registry.pid}) could not listen on debug port {registry.debug_port}: "
                         "starting its successor on another")
                self.start_registry(successor=True)
                return
            self.log(f"registry (pid {registry.pid}) exited with status {status} before it answered; "
                     f"registry (pid {self.current_pid()}) serves on")
            if self.current is None:
                self.schedule_restart(status, quick)
            return
        self.log(f"registry (pid {registry.pid}) exited with status {status}")
        self.current = None
        self.last = status
        self.record_exit(registry, status, lived)
        if quick and registry.debug_port is not None and registry.lost_debug_port:
            self.log(f"registry (pid {registry.pid}) could not listen on debug port {registry.debug_port}: "
                     "starting without it")
            self.refused_ports.add(registry.debug_port)
        if self.successor is None:
            self.schedule_restart(status, quick)
        # else: the successor becomes current once it answers (the held socket queues connections meanwhile)

    def schedule_restart(self, status: int, quick: bool) -> None:
        delay = 0.0
        if quick:
            if self.handed_over and self.retries < RACE_RETRIES:
                self.retries += 1
                delay = RACE_RETRY_SECONDS
            else:
                self.handed_over = False
                delay = PAUSE_SECONDS
        else:
            self.handed_over = False
        self.restart_at = time.monotonic() + delay

    def record_exit(self, registry: Registry, status: int, lived: float) -> None:
        """For the agent, which counts unexpected exits and quotes what the registry said."""
        put(self.s.state / EXIT_NAME, f"{registry.pid} {status} {int(lived)}")
        try:
            data = self.output_path.read_bytes()
            _write_replacing(self.s.state / PREVIOUS_OUTPUT_NAME, data)
            os.truncate(self.output_path, 0)  # the next start begins on an empty file
        except OSError:
            pass

    def write_metrics(self, registry: Registry) -> None:
        if self.s.debug_ports or self.listener is not None:
            port = "-" if registry.debug_port is None else str(registry.debug_port)
            put(self.s.state / METRICS_NAME, f"{registry.pid} {port}")

    def current_pid(self) -> int | None:
        return self.current.pid if self.current is not None else None

    # ---- output ------------------------------------------------------------------------------------------------

    def read_output(self, registry: Registry, *, until_end: bool = False) -> None:
        while registry.pipe is not None:
            try:
                data = os.read(registry.pipe, 65536)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno != errno.EINTR:
                    data = b""
                else:
                    continue
            if not data:
                for line in registry.splitter.close():
                    self.emit(registry, line)
                self.selector.unregister(registry.pipe)
                os.close(registry.pipe)
                registry.pipe = None
                return
            for line in registry.splitter.feed(data):
                self.emit(registry, line)
            if not until_end:
                return

    def emit(self, registry: Registry | None, line: bytes) -> None:
        """One redacted line to the container log and to registry-output."""
        if registry is not None and DEBUG_BIND_ERROR in line:
            registry.lost_debug_port = True
        _write_all(1, line)
        if self.output_fd is None:
            try:
                self.output_fd = os.open(self.output_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError:
                return  # no state dir: the container log has it all
        try:
            _write_all(self.output_fd, line)
        except OSError:
            os.close(self.output_fd)
            self.output_fd = None

    def log(self, message: str) -> None:
        _write_all(2, f"berth-supervise: {message}\n".encode(errors="replace"))


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether an HTTP server answers on host:port (any status: the debug server says the process is up)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(b"GET /debug/health HTTP/1.0\r\nHost: berth-supervise\r\n\r\n")
            return conn.recv(8).startswith(b"HTTP/")
    except OSError:
        return False


def put(path: Path, text: str) -> None:
    """A one-line state file, replaced whole (the agent never reads half of it)."""
    try:
        _write_replacing(path, (text + "\n").encode())
    except OSError:
        pass


def _write_replacing(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_bytes(data)
    os.replace(temp, path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            time.sleep(0.001)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _noted(_signum: int, _frame: object) -> None:
    """The signal's number is in the signal pipe (set_wakeup_fd): the loop acts on it."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        print(f"berth-supervise {berth_version()}")
        return 0
    if args:
        wanted = args in (["-h"], ["--help"])
        print(USAGE, end="", file=sys.stdout if wanted else sys.stderr)
        if not wanted:
            print(f"berth-supervise: takes no arguments, not {' '.join(args)!r}", file=sys.stderr)
        return 0 if wanted else 2
    try:
        settings = Settings.from_env()
        if settings.listen is not None and split_addr(settings.listen)[1] == 0:
            raise ValueError(f"BERTH_LISTEN_ADDR needs a port, not {settings.listen!r}")
    except ValueError as exc:
        print(f"berth-supervise: {exc}", file=sys.stderr)
        return 2
    return Supervisor(settings).run()


__all__ = ["Supervisor", "answers", "main"]
