"""berth_supervise.notify: when a steered-away registry may go, against a stand-in debug port serving what
3.1.1's serves (/debug/vars with the endpoints' settings and header values, /metrics with the gauges). The real
registry's side is in e2e/test_e2e_notifications_reloads.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from berth_supervise.notify import QUEUE_SECONDS, Waiting, drain_seconds

SECRET = "Bearer never-kept-t0ken"


class DebugPort:
    def __init__(self) -> None:
        self.pending = {"scanner": 3}
        self.in_flight = 0
        debug = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path == "/debug/vars":
                    endpoints = [{"name": name, "url": "http://127.0.0.1:9/x", "Headers": {"Authorization": [SECRET]},
                                  "Timeout": 2_000_000_000, "Threshold": 3, "Backoff": 1_000_000_000}
                                 for name in debug.pending]
                    body = json.dumps({"registry": {"notifications": {"endpoints": endpoints or None}}}).encode()
                else:
                    body = "".join(f'registry_notifications_pending_total{{endpoint="{n}"}} {c}\n'
                                   for n, c in debug.pending.items()).encode()
                    body += f'registry_http_in_flight_requests{{handler="blob"}} {debug.in_flight}\n'.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def debug():
    port = DebugPort()
    yield port
    port.server.shutdown()
    port.server.server_close()


def test_the_rendered_drain_timeout():
    assert drain_seconds(b"version: 0.1\nhttp:\n  addr: :5000\n  draintimeout: 10s\n") == 10


def test_it_waits_while_its_queue_shrinks_and_goes_when_empty(debug):
    waiting = Waiting(1, "127.0.0.1", debug.port, 5.0, 0.0, connections=lambda: 0)
    assert waiting.check(0.0) is None and waiting.pending == {"scanner": 3}
    assert waiting.stall == 3 * 2 + 1 + 2  # threshold x timeout + backoff + timeout
    debug.pending["scanner"] = 1
    assert waiting.check(8.0) is None  # delivered some: not stalled
    debug.pending["scanner"] = 0
    assert waiting.check(9.0) == "notification queues empty"
    assert SECRET not in repr(vars(waiting))  # the header values are not kept


def test_a_bounded_wait_takes_no_in_flight_request_and_at_most_a_second_for_the_queues(debug):
    """A bounded wait (`quick`: a credential retired, or GC's switch;
    docs/decisions/0001-retirement-bounded-by-drain-timeout.md): requests in flight finish in the registry's own drain,
    after the SIGTERM; the queues get at most QUEUE_SECONDS, or the drain timeout if shorter."""
    debug.in_flight, debug.pending["scanner"] = 4, 0
    assert Waiting(1, "127.0.0.1", debug.port, 30.0, 0.0).check(0.0) == "notification queues empty"
    debug.pending["scanner"] = 3
    waiting = Waiting(1, "127.0.0.1", debug.port, 30.0, 0.0)
    assert waiting.check(0.0) is None and waiting.check(QUEUE_SECONDS - 0.01) is None
    assert waiting.check(QUEUE_SECONDS) == "bound" and waiting.pending == {"scanner": 3}
    short = Waiting(1, "127.0.0.1", debug.port, 0.2, 0.0)
    assert short.check(0.1) is None and short.check(0.2) == "bound"
    assert Waiting(1, "127.0.0.1", debug.port, 0.0, 0.0).check(0.0) == "bound"  # drainTimeout 0: at once


def test_in_flight_requests_first_then_the_queue(debug):
    debug.in_flight, debug.pending["scanner"] = 1, 0
    waiting = Waiting(1, "127.0.0.1", debug.port, 5.0, 0.0, connections=lambda: 0)
    assert waiting.check(1.0) is None  # a push in flight makes its event when it ends
    assert waiting.check(90.0) == "notification queues empty"  # the kept-alive bound


def test_an_endpoint_that_delivers_nothing_is_dropped_at_the_stall_bound(debug):
    waiting = Waiting(1, "127.0.0.1", debug.port, 5.0, 0.0, connections=lambda: 0)
    assert waiting.check(0.0) is None
    assert waiting.check(8.9) is None
    assert waiting.check(9.0) == "no event delivered for 9s"
    assert waiting.pending == {"scanner": 3}  # what the supervisor counts as dropped


def test_kept_alive_connections_hold_it_until_they_close_or_the_idle_bound(debug):
    debug.pending = {}
    open_connections = [2]
    waiting = Waiting(1, "127.0.0.1", debug.port, 5.0, 0.0, connections=lambda: open_connections[0])
    assert waiting.check(1.0) is None
    open_connections[0] = 0
    assert waiting.check(2.0) == "no notification endpoint"
    held = Waiting(1, "127.0.0.1", debug.port, 5.0, 0.0, connections=lambda: 1)
    assert held.check(89.0) is None
    assert held.check(90.0) == "1 connections still open"  # Go's IdleConnTimeout: the client would have closed it


def test_no_debug_port_or_an_unreadable_one_holds_nothing_long(debug):
    assert Waiting(1, "127.0.0.1", None, 5.0, 0.0).check(0.0) == "no debug port"
    port = debug.port
    debug.server.shutdown()
    debug.server.server_close()
    gone = Waiting(1, "127.0.0.1", port, 5.0, 0.0)
    assert gone.check(0.0) is None
    assert gone.check(2.0) == "debug port unreadable"
