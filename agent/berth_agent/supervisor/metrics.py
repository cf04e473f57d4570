"""The registry's own Prometheus metrics on one stable port, whichever registry process serves now.

berth-supervise starts each registry with its debug listener on a loopback port no draining registry holds (the
other of two, alternating) and names it in the state dir (files.METRICS_NAME: "PID PORT", or "PID -" for a
registry started without one). This module serves GET /metrics on the agent's stable reg-metrics port by
proxying to that port: the registry's text passes through unchanged (registry_http_*, registry_storage_*,
registry_notifications_*, registry_proxy_* and whatever a later version adds), with its own Content-Type.

A proxy, not a scrape merged into the agent's /metrics: both programs export process_* series (and the
registry go_*), which would collide in one exposition, and a pass-through needs no parsing, holds no copy and
is never staler than the scrape. During a handover the file names the successor before it listens: a refused
connection is retried (re-reading the file) for up to `wait_seconds`, so a scrape at that moment still succeeds.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from .files import METRICS_NAME

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
    try:
        words = (Path(state_dir) / METRICS_NAME).read_text().split()
    except OSError:
        return None
    if len(words) != 2 or not words[0].isdigit():
        return None
    pid, port = int(words[0]), words[1]
    if port == "-":
        return MetricsTarget(pid, None)
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return MetricsTarget(pid, int(port))


class RegistryMetricsProxy:
    def __init__(self, state_dir: Path, *, host: str = "127.0.0.1", wait_seconds: float = 3.0,
                 timeout_seconds: float = 10.0) -> None:
        self.state_dir = Path(state_dir)
        self.host = host  # where the supervisor's registries listen (BERTH_DEBUG_HOST)
        self.wait_seconds = wait_seconds
        self.timeout_seconds = timeout_seconds
        self._session: aiohttp.ClientSession | None = None

    async def _get(self, target: MetricsTarget, headers: dict[str, str]) -> web.Response:
        assert self._session is not None
        url = f"http://{self.host}:{target.port}/metrics"
        async with self._session.get(url, headers=headers, auto_decompress=False) as upstream:
            body = await upstream.read()
            passed = {name: upstream.headers[name] for name in _PASSED_RESPONSE_HEADERS if name in upstream.headers}
            return web.Response(status=upstream.status, body=body, headers=passed)

    async def handle(self, request: web.Request) -> web.Response:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_seconds))
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
                except (TimeoutError, aiohttp.ClientConnectionError) as exc:
                    # The successor named in the file may not listen yet (a handover), or it just exited.
                    why = f"the registry process (pid {target.pid}) did not answer on its metrics port: " \
                          f"{type(exc).__name__}"
            if loop.time() >= deadline:
                return web.Response(status=503, text=why + "\n")
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def start_metrics_proxy(state_dir: Path, host: str, port: int, *,
                              debug_host: str = "127.0.0.1") -> tuple[web.AppRunner, RegistryMetricsProxy]:
    """Serve the current registry's /metrics on host:port; stop with `await runner.cleanup()` (closes the proxy)."""
    proxy = RegistryMetricsProxy(state_dir, host=debug_host)
    app = web.Application()
    app.router.add_get("/metrics", proxy.handle)

    async def _close(_app: web.Application) -> None:
        await proxy.close()

    app.on_cleanup.append(_close)
    runner = web.AppRunner(app, access_log=None)  # a scrape every few seconds is not an action
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner, proxy


__all__ = ["MetricsTarget", "RegistryMetricsProxy", "read_target", "start_metrics_proxy"]
