"""ApiClient: the agent's Kubernetes API calls on the standard library (`http.client`, `ssl`, `json`).

The agent makes a handful of calls (its Registry, Secrets and ConfigMaps by name, the status subresource, Events,
Leases): a JSON request and answer, or a watch's stream of JSON lines. The official client does the same for
5.3 MiB more resident memory in every pod (docs/benchmarks.md, "The agent's memory"), so the agent has this one.

Blocking, like the official client: callers run it in worker threads. Connections are kept alive and shared by
those threads through a small pool: a connection is taken for one request, handed back when its answer has been
read to the end, and dropped when anything went wrong. A failed call raises ApiError (status and reason only: an
answer's body can carry secrets, so it is never kept), or OSError / http.client.HTTPException when the transport
failed; kube/api.py's describe_api_error names either without quoting them.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from .config import KubeConfig

Timeout = float | tuple[float, float] | None  # seconds; a pair is (connect, read)
Query = Mapping[str, Any] | Sequence[tuple[str, Any]] | None

DEFAULT_TIMEOUT = (10.0, 30.0)
MAX_IDLE = 4  # kept-alive connections; the agent has about as many worker threads that call at once
MAX_ERROR_BODY = 1 << 16  # an error answer is read (so the connection can be reused) up to this, then dropped


class ApiError(Exception):
    """The API server answered with a status other than 2xx. Holds the status and reason, never the body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(status, reason)
        self.status, self.reason = status, reason

    def __str__(self) -> str:
        return f"API answered {self.status} {self.reason}".rstrip()


def api_path(template: str, **names: str) -> str:
    """`template` with each {name} replaced by its URL-quoted value."""
    return template.format(**{key: quote(value, safe="") for key, value in names.items()})


class ApiClient:
    """JSON requests and watch streams to one API server, with its credentials. Thread-safe."""

    def __init__(self, config: KubeConfig, *, max_idle: int = MAX_IDLE) -> None:
        self.config = config
        self._max_idle = max_idle
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    @classmethod
    def for_host(cls, url: str) -> ApiClient:
        """A client for `url` without credentials (`--kube-host`: the test API server, kubectl proxy)."""
        return cls(KubeConfig(url))

    # ---- calls ----

    def request(self, method: str, path: str, *, query: Query = None, body: Any = None,
                content_type: str | None = None, timeout: Timeout = None) -> dict:
        """One call; the decoded JSON answer ({} when empty). `body` is sent as JSON, as `content_type`
        (default application/json: a merge patch must say application/merge-patch+json)."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = self._headers("application/json" if content_type is None and data is not None else content_type)
        conn, response = self._send(method, _target(self.config.prefix, path, query), data, headers, timeout)
        if not 200 <= response.status < 300:
            raise self._refused(conn, response)
        try:
            payload = response.read()
        except BaseException:
            conn.close()
            raise
        self._keep_or_close(conn, response)
        return json.loads(payload) if payload.strip() else {}

    def stream(self, path: str, query: Query = None, *, timeout: Timeout = None) -> WatchStream:
        """GET `path` and hand back its answer as a stream of JSON lines (a watch). The read timeout applies to
        each wait for more bytes; close() ends the stream, also from another thread."""
        conn, response = self._send("GET", _target(self.config.prefix, path, query), None, self._headers(None), timeout)
        if not 200 <= response.status < 300:
            raise self._refused(conn, response)
        return WatchStream(self, conn, response)

    # ---- the connection pool ----

    def close(self) -> None:
        """Close the idle connections (those in use close when their caller is done)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _send(self, method: str, target: str, data: bytes | None, headers: dict[str, str],
              timeout: Timeout) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        connect_timeout, read_timeout = _timeouts(timeout)
        while True:
            conn, reused = self._take()
            try:
                if conn.sock is None:
                    conn.timeout = connect_timeout
                    conn.connect()
                conn.sock.settimeout(read_timeout)
                conn.request(method, target, body=data, headers=headers)
                return conn, conn.getresponse()
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
                conn.close()
                if not reused:
                    raise
                # A kept-alive connection the server had closed meanwhile (nothing of the request was
                # processed: no answer came): once more on a new one, as urllib3 does.
            except BaseException:
                conn.close()
                raise

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection that is still open (reused=True), or a new one, not yet connected."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not _dropped(conn):
                    return conn, True
                conn.close()
        return self._connection(), False

    def _connection(self) -> http.client.HTTPConnection:
        config = self.config
        if config.scheme == "https":
            return http.client.HTTPSConnection(config.host, config.port, context=config.ssl_context)
        return http.client.HTTPConnection(config.host, config.port)

    def _keep_or_close(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        """Keep `conn` for the next call if its answer was read to the end and the server keeps it open."""
        if response.will_close or not response.isclosed() or conn.sock is None:
            conn.close()
            return
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def _refused(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> ApiError:
        """The ApiError for a non-2xx answer, its body read and dropped (the connection stays usable)."""
        error = ApiError(response.status, response.reason or "")
        try:
            response.read(MAX_ERROR_BODY)
        except (OSError, http.client.HTTPException):
            conn.close()
            return error
        self._keep_or_close(conn, response)
        return error

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "berth-agent"}
        token = self.config.token() if self.config.token else None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers


class WatchStream:
    """A streaming answer, one JSON document per line (the API server's watch events), decoded as they come.

    Iterated once, by one thread; close() may come from any thread."""

    def __init__(self, client: ApiClient, conn: http.client.HTTPConnection,
                 response: http.client.HTTPResponse) -> None:
        self._client, self._conn, self._response = client, conn, response
        self._lock = threading.Lock()
        self._closed = False
        self._reading = False

    def __iter__(self) -> Iterator[dict]:
        with self._lock:
            if self._closed:
                return
            self._reading = True
        ended = False
        try:
            buffer = b""
            while chunk := self._response.read1(65536):  # what has arrived, up to the chunk's end; b"" at the end
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                for line in complete:
                    if line.strip():
                        yield json.loads(line)
            if buffer.strip():
                yield json.loads(buffer)
            ended = True
        finally:
            with self._lock:
                keep = ended and not self._closed
                self._closed, self._reading = True, False
            if keep:  # the server ended the answer (its timeoutSeconds): the connection can serve the next call
                self._client._keep_or_close(self._conn, self._response)
            else:  # an error, close(), or a reader that stopped early: the connection's state is unknown
                self._conn.close()

    def close(self) -> None:
        """End the stream. From another thread, shutting the socket down wakes the reader blocked in recv(), which
        then closes the connection itself (closing it under a reader would break http.client's state instead)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if not reading:
            self._conn.close()


def _target(prefix: str, path: str, query: Query) -> str:
    path = prefix + path
    if not query:
        return path
    items = query.items() if isinstance(query, Mapping) else query
    pairs = [(key, _query_value(value)) for key, value in items if value is not None]
    return f"{path}?{urlencode(pairs)}" if pairs else path


def _query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _timeouts(timeout: Timeout) -> tuple[float, float]:
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, tuple):
        return timeout
    return timeout, timeout


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """An idle connection the server closed (or wrote to, which it must not): readable means unusable."""
    if conn.sock is None:
        return True
    try:
        readable, _, _ = select.select([conn.sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


__all__ = ["ApiClient", "ApiError", "WatchStream", "api_path"]
