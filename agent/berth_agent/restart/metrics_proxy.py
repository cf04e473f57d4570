"""The registry's own Prometheus metrics on one stable port, whichever registry process serves now.

berth-supervise starts each registry with its debug listener on a loopback port no draining registry holds (the
other of two, alternating) and names it in the state dir (protocol.read_current: its pid and port, or no port for
a registry started without one). This module serves GET /metrics on the agent's stable reg-metrics port by
proxying to that port: the registry's text passes through unchanged (registry_http_*, registry_storage_*,
registry_notifications_*, registry_proxy_* and whatever a later version adds), with its own Content-Type.

A proxy, not a scrape merged into the agent's /metrics: both programs export process_* series (and the
registry go_*), which would collide in one exposition, and a pass-through needs no parsing, holds no copy and
is never staler than the scrape. During a handover the file names the successor before it listens: a refused
connection is retried (re-reading the file) for up to `wait_seconds`, so a scrape at that moment still succeeds.

The request to the registry is one HTTP/1.0 GET on the loopback over asyncio's streams (the answer ends when the
registry closes the connection: no chunks, no keep-alive), not aiohttp's client: every pod serves this proxy, and
aiohttp's client half is ~4 MiB of the agent's memory that a pod without notification endpoints never loads, and a
first scrape would wait for its import (docs/decisions/0037-agent-memory.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from berth_supervise import protocol

from ..core.listener import Listener, Request, Response, listen

log = logging.getLogger(__name__)

# What a scrape may ask for and get back unchanged (Prometheus negotiates the exposition format).
_PASSED_REQUEST_HEADERS = ("Accept", "Accept-Encoding")
_PASSED_RESPONSE_HEADERS = ("Content-Type", "Content-Encoding")


@dataclass(frozen=True)
class MetricsTarget:
    pid: int
    port: int | None  # None: this registry was started without a debug listener


def read_target(state_dir: Path) -> MetricsTarget | None:
    """The current registry's metrics port from the supervisor's file; None while there is none (or unreadable)."""
    current = protocol.read_current(Path(state_dir))
    return MetricsTarget(*current) if current is not None else None


class RegistryMetricsProxy:
    def __init__(self, state_dir: Path, *, host: str = "127.0.0.1", wait_seconds: float = 3.0,
                 timeout_seconds: float = 10.0) -> None:
        self.state_dir = Path(state_dir)
        self.host = host  # where the supervisor's registries listen (BERTH_DEBUG_HOST)
        self.wait_seconds = wait_seconds
        self.timeout_seconds = timeout_seconds

    async def _get(self, target: MetricsTarget, headers: dict[str, str]) -> Response:
        """The registry's answer, passed on: its status, its body as sent (compressed if it was) and the
        response headers a scrape needs. OSError when the registry refuses, resets or answers no whole head."""
        async with asyncio.timeout(self.timeout_seconds):
            reader, writer = await asyncio.open_connection(self.host, target.port)
            try:
                head = ["GET /metrics HTTP/1.0", f"Host: {self.host}:{target.port}",
                        *(f"{name}: {value}" for name, value in headers.items())]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
                await writer.drain()
                raw = await reader.read()  # to the end: the registry closes an HTTP/1.0 connection after its answer
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
        status, answered, body = _parse_answer(raw)
        passed = {name: answered[name.lower()] for name in _PASSED_RESPONSE_HEADERS if name.lower() in answered}
        return Response(status, body, passed)

    async def handle(self, request: Request) -> Response:
        headers = {name: request.headers[name] for name in _PASSED_REQUEST_HEADERS if name in request.headers}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        why = "no registry has started yet"
        while True:
            target = read_target(self.state_dir)
            if target is not None and target.port is None:
                why = (f"the registry process (pid {target.pid}) was started without metrics: every debug port was "
                       "held by a draining registry or another process")
            elif target is not None:
                try:
                    return await self._get(target, headers)
                except (TimeoutError, OSError) as exc:
                    # The successor named in the file may not listen yet (a handover), or it just exited.
                    why = f"the registry process (pid {target.pid}) did not answer on its metrics port: " \
                          f"{type(exc).__name__}"
            if loop.time() >= deadline:
                return Response.text(503, why + "\n")
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        """Nothing is kept between scrapes (a connection each: a loopback connect costs less than a kept one's
        state across handovers)."""


def _parse_answer(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers by lower-case name, body) of a whole HTTP/1.x answer; ConnectionError if it is not one."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if not sep or len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ConnectionError(f"no whole HTTP answer ({len(raw)} bytes)")
    answered = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            answered[name.strip().lower()] = value.strip()
    return int(parts[1]), answered, body


async def start_metrics_proxy(state_dir: Path, host: str, port: int, *,
                              debug_host: str = "127.0.0.1") -> tuple[Listener, RegistryMetricsProxy]:
    """Serve the current registry's /metrics on host:port; stop with `await listener.cleanup()`."""
    proxy = RegistryMetricsProxy(state_dir, host=debug_host)
    return await listen("reg-metrics", {"/metrics": {"GET": proxy.handle}}, host, port), proxy


__all__ = ["MetricsTarget", "RegistryMetricsProxy", "read_target", "start_metrics_proxy"]
