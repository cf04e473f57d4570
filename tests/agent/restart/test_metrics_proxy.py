"""The agent's stable registry-metrics endpoint (berth_agent.restart.metrics_proxy): it reads berth-supervise's file
and passes the current registry's metrics through unchanged; it says why when it cannot."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import aiohttp

from berth_agent.restart.metrics_proxy import MetricsTarget, read_target, start_metrics_proxy
from berth_supervise.protocol import METRICS_NAME
from support.common.ports import free_port

TEXT = b'# TYPE registry_proxy_hits_total counter\nregistry_proxy_hits_total 3\n'


class _Registry(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.end_headers()
        self.wfile.write(TEXT)

    def log_message(self, *_args):
        pass


def _debug_server(port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_read_target(tmp_path):
    assert read_target(tmp_path) is None
    for text, expected in [("12 5301\n", MetricsTarget(12, 5301)), ("12 -\n", MetricsTarget(12, None)),
                           ("", None), ("12\n", None), ("x 5301", None), ("12 70000", None), ("12 ab", None)]:
        (tmp_path / METRICS_NAME).write_text(text)
        assert read_target(tmp_path) == expected, text


async def _get(port: int) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as answer:
        return answer.status, answer.headers.get("Content-Type", ""), await answer.text()


def test_passes_the_current_registry_s_metrics_through_and_waits_for_a_successor(tmp_path):
    async def scenario():
        port = free_port()
        runner, proxy = await start_metrics_proxy(tmp_path, "127.0.0.1", port)
        proxy.wait_seconds = 3.0
        try:
            status, _, body = await _get(port)
            assert status == 503 and "no registry has started yet" in body

            (tmp_path / METRICS_NAME).write_text("41 -\n")
            status, _, body = await _get(port)
            assert status == 503 and "pid 41" in body and "without metrics" in body

            first = free_port()
            server = _debug_server(first)
            (tmp_path / METRICS_NAME).write_text(f"42 {first}\n")
            status, content_type, body = await _get(port)
            assert (status, body) == (200, TEXT.decode()) and content_type.startswith("text/plain; version=0.0.4")
            server.shutdown()
            server.server_close()

            # A handover: the file names a successor that listens a moment later; the scrape waits for it.
            second = free_port()
            (tmp_path / METRICS_NAME).write_text(f"43 {second}\n")
            loop = asyncio.get_running_loop()
            later = loop.call_later(0.5, lambda: setattr(scenario, "server", _debug_server(second)))
            status, _, body = await _get(port)
            assert (status, body) == (200, TEXT.decode())
            later.cancel()
            scenario.server.shutdown()
            scenario.server.server_close()

            proxy.wait_seconds = 0.2  # nobody listens: a 503 that names the process, after the wait
            status, _, body = await _get(port)
            assert status == 503 and "pid 43" in body and "did not answer" in body
        finally:
            await runner.cleanup()

    asyncio.run(scenario())
