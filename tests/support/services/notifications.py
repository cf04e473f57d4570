"""A webhook receiver on 127.0.0.1 for Distribution's notifications: records every event envelope it is POSTed,
with the request headers, and answers 200 (after `delay` seconds, to stand for a slow consumer).

    with running_receiver() as receiver:
        ... url = receiver.url ...
        receiver.events(action="push")       # [(headers, event), ...]
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, delay: float = 0.0, port: int = 0, host: str = "127.0.0.1") -> None:
        self.delay = delay
        self.refusing = False  # True: every post is answered 503 and nothing is recorded (a consumer that is down)
        self._lock = threading.Lock()
        self._received: list[tuple[dict[str, str], dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if receiver.refusing:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if receiver.delay:
                    time.sleep(receiver.delay)
                try:
                    envelope = json.loads(body or b"{}")
                except ValueError:
                    envelope = {}
                headers = {key: value for key, value in self.headers.items()}
                with receiver._lock:
                    for event in envelope.get("events") or ():
                        receiver._received.append((headers, event))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}/events"
        self._thread = threading.Thread(target=self.server.serve_forever, name="receiver", daemon=True)

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self, action: str | None = None, *, manifests_only: bool = False) -> list[tuple[dict[str, str], dict]]:
        with self._lock:
            found = list(self._received)
        if action is not None:
            found = [(h, e) for h, e in found if e.get("action") == action]
        if manifests_only:  # a manifest event has a tag or a manifest media type; blob events neither
            found = [(h, e) for h, e in found if "manifest" in (e.get("target") or {}).get("mediaType", "")]
        return found


@contextmanager
def running_receiver(delay: float = 0.0, port: int = 0, host: str = "127.0.0.1") -> Iterator[Receiver]:
    """`port`: a given one (an endpoint that was down comes up); default a free one. `host`: the node's bridge
    address for pods on the real node (support.clusters.node GATEWAY)."""
    receiver = Receiver(delay, port, host).start()
    try:
        yield receiver
    finally:
        receiver.stop()


__all__ = ["Receiver", "running_receiver"]
