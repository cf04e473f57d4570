"""A small TCP balancer in front of registry pods, sending new connections only to ready ones, the way a
Service's endpoints and kube-proxy do.

    balancer = Balancer([Backend("pod-a", "127.0.0.2", port, "http://127.0.0.1:HEALTH/readyz"), ...],
                        check_interval=0.05).start()
    ... traffic to balancer.host ...
    balancer.stop(); balancer.stats

Readiness is polled every `check_interval` (the kubelet's readiness probe, with the endpoints following at
once). A connection is pinned to the backend it was sent to for its whole life (as conntrack pins it). A
backend that refuses the connection makes the balancer reset the client's connection (a client behind
kube-proxy sees the refusal too): counted in `refused`. No ready backend at all: reset, counted in
`no_backend`.
"""

from __future__ import annotations

import itertools
import selectors
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field


@dataclass
class Backend:
    name: str
    host: str
    port: int
    ready_url: str
    ready: bool = False
    connections: int = 0


@dataclass
class BalancerStats:
    connections: int = 0
    refused: int = 0
    no_backend: int = 0
    min_ready: int | None = None  # fewest ready backends seen by a readiness round (after the first)
    transitions: list[tuple[float, str, bool]] = field(default_factory=list)


def _reset(conn: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): what the client of a refused backend behind kube-proxy gets."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    conn.close()


def _probe(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Balancer:
    def __init__(self, backends: list[Backend], *, check_interval: float = 0.05, host: str = "127.0.0.1"):
        self.backends = backends
        self.check_interval = check_interval
        self.stats = BalancerStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, 0))
        self._listener.listen(256)
        self.address = self._listener.getsockname()
        self._rotation = itertools.count()
        self._threads: list[threading.Thread] = []

    @property
    def host(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def start(self, ready_within: float = 30.0) -> Balancer:
        # The first rounds decide who is ready before any connection is accepted. Until every backend has
        # answered once: on a loaded machine one /readyz can miss its 1 s, and a test's first push through a
        # balancer that saw no backend ready was reset before anything was measured (seen in CI at load 20).
        deadline = time.monotonic() + ready_within
        self._check()
        while not all(backend.ready for backend in self.backends) and time.monotonic() < deadline:
            time.sleep(self.check_interval)
            self._check()
        for target, name in ((self._accept_loop, "balancer-accept"), (self._readiness_loop, "balancer-check")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> BalancerStats:
        self._stop.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for thread in self._threads:
            thread.join(5)
        return self.stats

    # ---- readiness -------------------------------------------------------------------------------------------

    def _check(self) -> None:
        results = [(backend, _probe(backend.ready_url)) for backend in self.backends]
        with self._lock:
            for backend, ready in results:
                if ready != backend.ready:
                    self.stats.transitions.append((time.monotonic(), backend.name, ready))
                backend.ready = ready

    def _readiness_loop(self) -> None:
        while not self._stop.wait(self.check_interval):
            self._check()
            with self._lock:
                count = sum(backend.ready for backend in self.backends)
                if self.stats.min_ready is None or count < self.stats.min_ready:
                    self.stats.min_ready = count

    # ---- traffic ---------------------------------------------------------------------------------------------

    def _pick(self) -> Backend | None:
        with self._lock:
            ready = [backend for backend in self.backends if backend.ready]
            if not ready:
                return None
            backend = ready[next(self._rotation) % len(ready)]
            backend.connections += 1
            return backend

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.stats.connections += 1
            threading.Thread(target=self._serve, args=(client,), name="balancer-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        backend = self._pick()
        if backend is None:
            with self._lock:
                self.stats.no_backend += 1
            _reset(client)
            return
        try:
            upstream = socket.create_connection((backend.host, backend.port), timeout=5)
        except OSError:
            with self._lock:
                self.stats.refused += 1
            _reset(client)
            return
        upstream.settimeout(None)
        self._pipe(client, upstream)

    def _pipe(self, client: socket.socket, upstream: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        peers = {client: upstream, upstream: client}
        for sock in peers:
            selector.register(sock, selectors.EVENT_READ)
        open_ends = 2
        try:
            while open_ends and not self._stop.is_set():
                for key, _ in selector.select(timeout=0.5):
                    source = key.fileobj
                    try:
                        data = source.recv(65536)
                    except OSError:
                        data = b""
                    if data:
                        try:
                            peers[source].sendall(data)
                        except OSError:
                            return
                    else:
                        selector.unregister(source)
                        open_ends -= 1
                        try:
                            peers[source].shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
        finally:
            selector.close()
            client.close()
            upstream.close()
