"""The supervisor's loop: one thread, one selector over the registries' output pipes and the signal pipe, and the
parts it wires, each with one job:

- signals.py: the signal pipe. TERM/INT stop every process (SIGTERM: the registry drains; SIGINT would kill 2.8 at
  once); the agent's, as protocol.py names them: USR1 is the 2.8 handover (overlapped_handover.py); HUP the 3.x
  handover on the held socket (held_socket.py, its states IDLE / STARTING / RETIRING, on the sockets of group.py,
  the steered-away registries then in waiting.py); USR2 a garbage-collect request (gc_child.py). CHLD reaps.
- backoff.py: when a registry that exited starts again; ports.py: each registry's debug port (named with its pid
  in registry-metrics for the agent's stable metrics endpoint); relay.py: each registry's output.

The Supervisor here holds the registry processes (registry.py), starts and reaps them, and is the handover's Host.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import time

from . import protocol
from .backoff import PAUSE_SECONDS, QUICK_FAILURE_SECONDS, CrashBackoff
from .gc_child import GarbageCollectChild
from .group import ReuseportGroup
from .held_socket import HeldSocketHandover, Host
from .notify import drain_seconds
from .overlapped_handover import take_overlapped_handover
from .ports import DebugPorts
from .registry import Registries, Registry
from .relay import OutputRelay
from .settings import USAGE, Settings, berth_version
from .signals import SignalPipe
from .spawn import SpawnError, exit_status, registry_env, spawn, version_output
from .steer import accept_queue, handshakes
from .waiting import WaitingRoom
from .write import log as write_log
from .write import send

CONFIG_POLL_SECONDS = 0.01  # while waiting for the first config.yml (in a pod it is there before the container)
PROBE_SECONDS = 0.005  # how often a successor's debug port is tried (it answers ~30 ms after exec)
# `registry --version`: 3.x ".../distribution/distribution/v3 v3.1.1", 2.8 ".../docker/distribution 2.8.2"
ACTIVATION = re.compile(rb"distribution/v3\b|\sv3\.\d")


class Outcome:
    """The supervisor's own exit status: the first failure among the registries signalled at the stop (current
    first), else the last failure if none ran then (stopped while pausing after a failed start)."""

    def __init__(self) -> None:
        self.stopped: list[int] = []  # pids signalled at the stop, current first
        self.had_current = False  # a registry ran when the stop came
        self.statuses: dict[int, int] = {}
        self.last = 0

    def status(self) -> int:
        status = next((self.statuses[pid] for pid in self.stopped if self.statuses.get(pid)), 0)
        return self.last if status == 0 and not self.had_current else status


class Supervisor(Host):
    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
        self.registries = Registries()
        self.stopping: str | None = None
        self.outcome = Outcome()
        self.backoff = CrashBackoff()
        self.ports = DebugPorts(settings.debug_ports, settings.debug_host, write_log)
        self.group = ReuseportGroup(settings.listen or "", write_log)
        self.handover = HeldSocketHandover(self)
        self.waiting = WaitingRoom(settings.state, settings.debug_host, write_log)
        self.gc = GarbageCollectChild(settings.state, settings.registry_bin, settings.config, self.env, write_log)
        self.gc_due: float | None = None  # when the garbage-collect's watchdog looks again
        self.signals = SignalPipe()
        self.relay = OutputRelay(settings.state, self.signals.fd)

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
            protocol.write_supervisor_pid(self.s.state, os.getpid())
        except OSError as exc:
            self.log(f"cannot write to the state dir {self.s.state}: {exc}")
        if activation:
            self.hold_socket()
        if not self.stopping:
            self.start_registry()
        while not self.stopping or self.registries or self.gc.pid is not None:
            self.turn(self.next_timeout())
        return self.outcome.status()

    def turn(self, timeout: float | None) -> None:
        """Wait for output, a signal or the timeout; act on everything that happened."""
        self.relay.wait(timeout)
        for sig in self.signals.take():
            self.on_signal(sig)
        self.reap()
        now = time.monotonic()
        if not self.stopping and self.backoff.due(now):
            self.start_registry()
        if self.handover.successor is not None:
            self.handover.probe(now)
        if self.group.steering and not self.stopping:
            self.handover.retire(now)
            self.waiting.tick(now)
            self.group.regroup()
            self.handover.take_pending(now)
        self.gc_due = self.gc.tick(now)
        self.enforce_retirement(now)

    def enforce_retirement(self, now: float) -> None:
        """The hard bound on an old registry replaced by a bounded (`quick`) handover: gone by its drain timeout
        after the switch, whatever it is still doing (its own drain deadline comes a moment later: a request cut
        here would be cut there). So an old credential may be revoked then
        (docs/decisions/0001-retirement-bounded-by-drain-timeout.md)."""
        for registry in self.registries.draining:
            if registry.retire_by is not None and now >= registry.retire_by and self.registries.alive(registry):
                registry.retire_by = None
                self.log(f"registry (pid {registry.pid}) still runs {registry.drain:g}s (its drain timeout) after it "
                         "was replaced: killing it")
                send(registry.pid, signal.SIGKILL)

    def next_timeout(self) -> float | None:
        now = time.monotonic()
        due = [t for t in (self.backoff.restart_at, self.gc_due) if t is not None]
        if self.handover.busy():
            due.append(now + PROBE_SECONDS)
        if self.waiting:
            due.append(self.waiting.due)
        due += [r.retire_by for r in self.registries.draining if r.retire_by is not None]
        return max(0.0, min(due) - now) if due else None

    def on_signal(self, sig: int) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT):
            self.stop(signal.Signals(sig).name[3:])
        elif self.stopping:
            return
        elif sig == protocol.HANDOVER_SIGNAL:
            if take_overlapped_handover(self.registries, self.s.handover, self.backoff, self.ports, self.log):
                self.start_registry()
        elif sig == protocol.HELD_SOCKET_SIGNAL:
            if self.group.listener is None:
                self.log("SIGHUP ignored: no listening socket is held (BERTH_LISTEN_ADDR is not set)")
            else:
                self.handover.hup(time.monotonic())
        elif sig == protocol.GC_SIGNAL:
            self.gc.take_request()

    # ---- starting and stopping ---------------------------------------------------------------------------------

    def speaks_activation(self) -> bool:
        """Whether the registry binary serves on a socket it is handed: Distribution 3 (`registry --version`)."""
        try:
            version = version_output([self.s.registry_bin, "--version"], self.env)
        except SpawnError as exc:
            version = str(exc).encode()
        if ACTIVATION.search(version):
            return True
        self.log(f"{self.s.registry_bin} is not Distribution 3 ({version.strip()[:200].decode(errors='replace')!r}"
                 "): no socket activation, so each registry binds its own listener (overlapped restarts)")
        return False

    def hold_socket(self) -> None:
        """The one listening socket of this container (3.x): every registry serves on it, none binds its own."""
        while self.group.listener is None and not self.stopping:
            try:
                self.group.hold()
            except OSError as exc:
                self.log(f"cannot listen on {self.s.listen}: {exc}; trying again in {PAUSE_SECONDS:g}s")
                self.turn(PAUSE_SECONDS)

    def start_registry(self, *, successor: bool = False) -> Registry | None:
        """A registry on the held socket (`successor`: on a socket of its own beside the current one) or, on 2.8,
        binding its own listener; None when it could not be started (tried again after a pause)."""
        held = self.group.listener is not None
        port = self.ports.pick(self.registries.debug_ports(), any_free=held)
        env = dict(registry_env(self.env, self.s.config), **protocol.markers(held_socket=held))
        if port is not None:
            env.update(REGISTRY_HTTP_DEBUG_ADDR=f"{self.s.debug_host}:{port}",
                       REGISTRY_HTTP_DEBUG_PROMETHEUS_ENABLED="true", REGISTRY_HTTP_DEBUG_PROMETHEUS_PATH="/metrics")
        sock = self.group.successor_socket() if successor else self.group.listener
        read_end, write_end = os.pipe()
        try:
            pid = spawn([self.s.registry_bin, "serve", str(self.s.config)], env, stdout=write_end, listener=sock)
        except SpawnError as exc:
            os.close(read_end)
            self.drop_socket(sock)
            self.log(f"{exc}; trying again in {PAUSE_SECONDS:g}s")
            self.outcome.last = 127
            self.backoff.pause(time.monotonic())
            return None
        finally:
            os.close(write_end)
        os.set_blocking(read_end, False)
        registry = Registry(pid, time.monotonic(), port, read_end)
        registry.sock = sock
        try:
            registry.drain = drain_seconds(self.s.config.read_bytes())  # what it read a moment ago
        except OSError:
            pass
        self.registries.by_pid[pid] = registry
        self.relay.watch(registry)
        metrics = f", metrics on {self.s.debug_host}:{port}" if port is not None else ""
        if successor:
            self.log(f"started registry (pid {pid}{metrics}) beside registry (pid {self.registries.current_pid()}) "
                     "on the held socket")
        else:
            self.registries.current = registry
            self.write_metrics(registry)
            self.log(f"started registry (pid {pid}{metrics})")
        if self.stopping:
            send(pid, signal.SIGTERM)
        return registry

    def stop(self, name: str) -> None:
        if self.stopping:
            return
        self.stopping = name
        self.backoff.cancel()
        ordered = [r for r in (self.registries.current, self.handover.successor) if r is not None]
        ordered += self.registries.draining
        for registry in ordered:
            if self.registries.alive(registry):
                self.log(f"received SIG{name}, stopping registry (pid {registry.pid})")
                send(registry.pid, signal.SIGTERM)
        self.outcome.stopped = [r.pid for r in ordered]
        self.outcome.had_current = self.registries.current is not None
        self.gc.stop()
        self.handover.stop()
        self.waiting.stop()  # the waiting ones were SIGTERMed above, among the draining ones
        self.group.close([r.sock for r in ordered])  # the registries close theirs as they stop: then refused

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
            elif pid in self.registries.by_pid:
                self.exited(self.registries.by_pid.pop(pid), status)

    def exited(self, registry: Registry, status: int) -> None:
        self.relay.read(registry, until_end=True)
        self.outcome.statuses[registry.pid] = status
        lived = time.monotonic() - registry.started
        self.waiting.forget(registry)  # it died while waiting (a crash, a kill -9): its queue went with it
        self.drop_socket(registry.sock)  # closed when that moves no socket the program names (group.py)
        if registry in self.registries.draining:
            self.registries.draining.remove(registry)
            self.log(f"registry (pid {registry.pid}) exited with status {status} after draining")
            return
        if self.stopping:
            if registry is self.registries.current:
                self.registries.current = None
            self.log(f"registry (pid {registry.pid}) exited with status {status}")
            return
        quick = status != 0 and lived < QUICK_FAILURE_SECONDS
        if registry is self.handover.successor:
            self.relay.record_exit(registry, status, lived)
            self.handover.successor_exited(registry, status, quick)
            return
        self.log(f"registry (pid {registry.pid}) exited with status {status}")
        self.registries.current = None
        self.outcome.last = status
        self.relay.record_exit(registry, status, lived)
        if quick and registry.debug_port is not None and registry.lost_debug_port:
            self.log(f"registry (pid {registry.pid}) could not listen on debug port {registry.debug_port}: "
                     "starting without it")
            self.ports.refuse(registry.debug_port)
        if self.handover.successor is None:
            self.backoff.schedule(time.monotonic(), quick)
        # else: the successor becomes current once it answers (the held socket queues connections meanwhile)

    # ---- the held-socket handover's Host (held_socket.py) --------------------------------------------------------

    def log(self, message: str) -> None:
        write_log(message)

    def current(self) -> Registry | None:
        return self.registries.current

    def named_in_handover(self) -> tuple[bool, bool | None]:
        return protocol.handover_names(self.s.handover, self.registries.current_pid())

    def start_successor(self, *, new_reload: bool) -> Registry | None:
        if new_reload:
            self.ports.new_reload()
        return self.start_registry(successor=True)

    def answers(self, registry: Registry) -> bool:
        return registry.debug_port is not None and debug_port_answers(self.s.debug_host, registry.debug_port)

    def promote(self, successor: Registry) -> socket.socket | None:
        self.registries.current = successor
        if not self.group.own(successor.sock) or successor.sock is None:
            return None
        return self.group.serve_on(successor.sock)

    def write_metrics(self, registry: Registry) -> None:
        if self.s.debug_ports or self.group.listener is not None:
            protocol.write_current(self.s.state, registry.pid, registry.debug_port)

    def drain(self, registry: Registry, *, now: bool) -> None:
        self.registries.draining.append(registry)
        if registry.quick and registry.drain > 0:
            registry.retire_by = time.monotonic() + registry.drain
        if now:
            send(registry.pid, signal.SIGTERM)

    def terminate(self, registry: Registry) -> None:
        send(registry.pid, signal.SIGTERM)

    def alive(self, registry: Registry) -> bool:
        return self.registries.alive(registry)

    def queued(self, sock: socket.socket, begun_before: float | None) -> int:
        if begun_before is None:
            return accept_queue(sock)
        return handshakes(sock.getsockname()[1], begun_before=begun_before)

    def wait_for_queues(self, registry: Registry, sock: socket.socket, now: float) -> None:
        self.waiting.add(registry, sock, now)

    def drop_socket(self, sock: socket.socket | None) -> None:
        self.group.drop_socket(sock, sock is not None and self.registries.hold(sock))

    def refuse_port(self, port: int) -> None:
        self.ports.refuse(port)

    def restart(self, status: int, quick: bool) -> None:
        self.backoff.schedule(time.monotonic(), quick)


def debug_port_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether a registry's debug server answers on host:port (any status: the process is up)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(b"GET /debug/health HTTP/1.0\r\nHost: berth-supervise\r\n\r\n")
            return conn.recv(8).startswith(b"HTTP/")
    except OSError:
        return False


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
        if settings.listen is not None and protocol.split_addr(settings.listen)[1] == 0:
            raise ValueError(f"BERTH_LISTEN_ADDR needs a port, not {settings.listen!r}")
    except ValueError as exc:
        print(f"berth-supervise: {exc}", file=sys.stderr)
        return 2
    return Supervisor(settings).run()


__all__ = ["Supervisor", "debug_port_answers", "main"]
