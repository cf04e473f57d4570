"""The agent's HTTP listeners (the probes and /metrics, the outbox's relay, the registry's metrics) on the standard
library, not aiohttp.web (docs/decisions/0037-agent-memory.md: aiohttp.web is about 8 MiB of every pod's memory for
three small endpoints).

- Python's `http.server` reads each request and writes each answer (no HTTP parsing of our own), in a thread per
  connection; prometheus_client imports it anyway, so it costs the agent nothing to load.
- Each route's handler is a coroutine that runs on the agent's event loop, as under aiohttp.web: what a probe reads
  (Health, its checks), the relay's store and the metrics proxy's request are asked on the loop, not in the thread.
- The listening sockets are accepted on the event loop (no thread waits on them); as aiohttp's TCPSite: every
  address the host resolves to, SO_REUSEADDR, a backlog of 128.
- Answers as aiohttp.web gave them: 404 "404: Not Found" for another path, 405 with Allow for another method, HEAD
  for every GET route, HTTP/1.1 keep-alive (a connection idle for IDLE_SECONDS is closed), a request body bounded by
  the listener's max_body (413), 500 when a handler raises. A chunked request body (no client of the agent sends
  one: the registry posts with a Content-Length) is answered 411.
- `await listener.cleanup()`: stops accepting, closes the idle connections, waits up to SHUTDOWN_SECONDS for the
  handlers in flight, then cancels them (aiohttp's AppRunner.cleanup and its shutdown_timeout); a connection whose
  handler was cancelled is closed without an answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote, urlsplit

log = logging.getLogger(__name__)

TEXT = "text/plain; charset=utf-8"
IDLE_SECONDS = 75.0  # aiohttp.web's keepalive_timeout
SHUTDOWN_SECONDS = 60.0  # aiohttp.web's shutdown_timeout
BACKLOG = 128  # aiohttp.web's TCPSite
MAX_BODY = 1 << 20  # aiohttp.web's client_max_size


@dataclass
class Request:
    method: str
    path: str  # decoded, without the query
    headers: Message  # case-insensitive: `name in headers`, `headers.get(name)`
    body: bytes = b""


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        return cls(status, text.encode(), {"Content-Type": TEXT})


Handler = Callable[[Request], Awaitable[Response]]


class Listener:
    """Routes {path: {method: handler}} served on `sockets`; made by `listen`."""

    def __init__(self, name: str, routes: dict[str, dict[str, Handler]], sockets: list[socket.socket],
                 loop: asyncio.AbstractEventLoop, max_body: int) -> None:
        self.name = name
        self.shutdown_seconds = SHUTDOWN_SECONDS
        self.routes = routes
        self.sockets = sockets
        self.max_body = max_body
        self._loop = loop
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._in_flight: set[concurrent.futures.Future] = set()
        self._closing = False
        self._stopped = False
        for sock in sockets:
            loop.add_reader(sock, self._accept, sock)

    # ---- on the event loop ---------------------------------------------------------------------------------------

    def _accept(self, sock: socket.socket) -> None:
        try:
            conn, address = sock.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return  # taken back by the client before it was accepted
        except OSError as exc:  # out of file descriptors: look again in a second (asyncio's own server does so)
            log.error("accept failed", extra={"fields": {"listener": self.name, "errno": exc.errno}})
            self._loop.remove_reader(sock)
            self._loop.call_later(1.0, self._resume, sock)
            return
        conn.setblocking(True)
        with self._lock:
            self._connections.add(conn)
        try:
            threading.Thread(target=self._serve, args=(conn, address), name=f"{self.name}-http", daemon=True).start()
        except RuntimeError as exc:  # no thread to be had: the client sees its connection closed and tries again
            log.error("connection not served", extra={"fields": {"listener": self.name, "error": str(exc)}})
            with self._lock:
                self._connections.discard(conn)
            conn.close()

    def _resume(self, sock: socket.socket) -> None:
        if not self._closing:
            self._loop.add_reader(sock, self._accept, sock)

    async def cleanup(self) -> None:
        """Stop accepting, close the idle connections, let the handlers in flight finish (then cancel them)."""
        self._closing = True
        for sock in self.sockets:
            self._loop.remove_reader(sock)
            sock.close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:  # a connection waiting for its next request reads its end; an answer still goes
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RD)
        deadline = self._loop.time() + self.shutdown_seconds
        while True:
            with self._lock:
                if not self._in_flight or self._loop.time() >= deadline:
                    self._stopped = True  # from now on a request read is closed without an answer
                    in_flight = list(self._in_flight)
                    break
            await asyncio.sleep(0.01)
        for future in in_flight:
            future.cancel()

    # ---- in a connection's thread --------------------------------------------------------------------------------

    def _serve(self, conn: socket.socket, address: tuple) -> None:
        try:
            _Exchange(conn, address, self)  # http.server's handler: `server` is this listener
        except OSError:
            pass  # the client went away (a reset, a broken pipe, a timeout while writing)
        except Exception:  # a bug of ours: said in the agent's log, the connection closed
            log.exception("connection failed", extra={"fields": {"listener": self.name}})
        finally:
            with self._lock:
                self._connections.discard(conn)
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
            conn.close()

    def run(self, handler: Handler, request: Request) -> Response | None:
        """`handler(request)` on the event loop; None when it was cancelled or the loop is gone (no answer)."""
        with self._lock:  # counted before it is scheduled: cleanup waits for every handler it did not stop
            if self._stopped:
                return None
            work = handler(request)
            try:
                future = asyncio.run_coroutine_threadsafe(work, self._loop)
            except RuntimeError:  # the loop is closed
                work.close()
                return None
            self._in_flight.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            return None
        except Exception:
            log.exception("Error handling request", extra={"fields": {"listener": self.name, "path": request.path}})
            return Response.text(500, "500 Internal Server Error\n\nServer got itself in trouble")
        finally:
            with self._lock:
                self._in_flight.discard(future)

    @property
    def closing(self) -> bool:
        return self._closing


class _Exchange(BaseHTTPRequestHandler):
    """One connection: http.server reads the requests; each is answered by its route's handler."""

    server: Listener
    protocol_version = "HTTP/1.1"  # keep-alive, as aiohttp.web; http.server closes a connection a client asks to
    timeout = IDLE_SECONDS
    # An answer leaves in one write, without Nagle's wait (aiohttp.web sets TCP_NODELAY too): the head and the body
    # written apart would wait for the client's delayed ACK, up to 40 ms an answer.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        """No access log (probes every second are not actions); a request http.server refuses is not logged."""

    @property
    def listener(self) -> Listener:
        return self.server

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection and not self.listener.closing:
            self.handle_one_request()

    def handle_expect_100(self) -> bool:
        """`Expect: 100-continue` (curl's larger POSTs): the interim answer leaves now, not with the final one."""
        ok = super().handle_expect_100()
        self.wfile.flush()
        return ok

    def _route(self) -> None:
        listener = self.listener
        path = unquote(urlsplit(self.path).path)
        methods = listener.routes.get(path)
        if methods is None:
            self._answer(Response.text(404, "404: Not Found"))
            return
        handler = methods.get(self.command) or (methods.get("GET") if self.command == "HEAD" else None)
        if handler is None:
            allowed = {*methods, *(["HEAD"] if "GET" in methods else [])}
            self._answer(Response(405, b"405: Method Not Allowed",
                                  {"Content-Type": TEXT, "Allow": ",".join(sorted(allowed))}))
            return
        body = self._body()
        if isinstance(body, Response):
            self._answer(body)
            return
        if body is None:
            self.close_connection = True  # the client closed before its whole body came
            return
        response = listener.run(handler, Request(self.command, path, self.headers, body))
        if response is None:
            self.close_connection = True
            return
        self._answer(response)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _route  # noqa: N815 - http.server's

    def _body(self) -> bytes | Response | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            return Response.text(411, "411: Length Required")
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        if not length.strip().isdigit():
            self.close_connection = True
            return Response.text(400, "400: Bad Request")
        size = int(length)
        if size > self.listener.max_body:
            self.close_connection = True
            return Response.text(413, f"Maximum request body size {self.listener.max_body} exceeded, "
                                      f"actual body size {size}")
        body = self.rfile.read(size)
        return body if len(body) == size else None

    def _answer(self, response: Response) -> None:
        self.send_response(response.status)
        headers = {"Content-Type": "application/octet-stream", **response.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)
        self.wfile.flush()


async def listen(name: str, routes: dict[str, dict[str, Handler]], host: str, port: int, *,
                 max_body: int = MAX_BODY) -> Listener:
    """Serve `routes` on host:port (every address the host resolves to); OSError if one cannot be bound."""
    loop = asyncio.get_running_loop()
    try:  # an address (what the agent is given): no lookup, and no executor thread started for one
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE | socket.AI_NUMERICHOST)
    except socket.gaierror:  # a name: looked up off the loop
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return Listener(name, routes, sockets, loop, max_body)


__all__ = ["IDLE_SECONDS", "SHUTDOWN_SECONDS", "TEXT", "Handler", "Listener", "Request", "Response", "listen"]
