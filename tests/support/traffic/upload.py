"""A slow blob upload and a connect probe: what a reload must not break, and what a user would see of it.

    upload = SlowUpload(registry_url, "demo/slow", os.urandom(256 * 1024), seconds=4).start()
    upload.in_flight.wait(10)          # the chunked PATCH is trickling now
    probe = ConnectProbe("127.0.0.1", port).start()
    ...                                # reload
    upload.join(30); assert upload.error is None and upload.read_back() == upload.data
    windows = probe.stop()             # [(first refused, next accepted), ...] in time.monotonic()

The upload is the registry's own protocol (distribution spec): POST starts it, one chunked PATCH sends the
bytes over `seconds`, PUT ?digest= completes it. The PUT is a new request: after a reload it reaches the new
process, which accepts the upload state only when it was signed with the same http.secret
(docs/upstream.md#dist-http-secret).
"""

from __future__ import annotations

import hashlib
import http.client
import socket
import threading
import time
import urllib.parse

from support.registries.registry import http_get


class SlowUpload(threading.Thread):
    def __init__(self, base_url: str, repo: str, data: bytes, *, seconds: float, chunks: int = 40,
                 host_header: str | None = None):
        super().__init__(name="slow-upload", daemon=True)
        self.base_url, self.repo, self.data = base_url.rstrip("/"), repo, data
        self.seconds, self.chunks = seconds, chunks
        self.digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.in_flight = threading.Event()  # set once the first chunk of the PATCH went out
        self.error: str | None = None
        self.statuses: dict[str, int] = {}
        self.finished_at: float | None = None

    def start(self) -> SlowUpload:  # type: ignore[override]
        super().start()
        return self

    def _connection(self, url: str) -> tuple[http.client.HTTPConnection, str]:
        parts = urllib.parse.urlsplit(url if "://" in url else self.base_url + url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        return http.client.HTTPConnection(parts.hostname, parts.port, timeout=60), path

    def _request(self, method: str, url: str, step: str) -> http.client.HTTPResponse:
        conn, path = self._connection(url)
        conn.request(method, path, body=b"", headers={"Content-Length": "0"})
        response = conn.getresponse()
        response.read()
        conn.close()
        self.statuses[step] = response.status
        return response

    def run(self) -> None:
        try:
            started = self._request("POST", f"{self.base_url}/v2/{self.repo}/blobs/uploads/", "post")
            if started.status != 202:
                raise RuntimeError(f"POST answered {started.status}")
            location = started.getheader("Location") or ""
            conn, path = self._connection(location)
            conn.putrequest("PATCH", path)
            conn.putheader("Content-Type", "application/octet-stream")
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            size = max(1, len(self.data) // self.chunks + 1)
            pause = self.seconds / max(1, self.chunks)
            for index, offset in enumerate(range(0, len(self.data), size)):
                piece = self.data[offset : offset + size]
                conn.send(b"%x\r\n" % len(piece) + piece + b"\r\n")
                if index == 2:
                    self.in_flight.set()  # a few chunks in: the registry is surely handling the request
                time.sleep(pause)
            conn.send(b"0\r\n\r\n")
            patched = conn.getresponse()
            patched.read()
            conn.close()
            self.statuses["patch"] = patched.status
            if patched.status != 202:
                raise RuntimeError(f"PATCH answered {patched.status}")
            location = patched.getheader("Location") or location
            separator = "&" if "?" in location else "?"
            done = self._request("PUT", f"{location}{separator}digest={urllib.parse.quote(self.digest)}", "put")
            if done.status != 201:
                raise RuntimeError(f"PUT ?digest= answered {done.status}")
        except Exception as exc:  # noqa: BLE001 - the test reads it
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.in_flight.set()
            self.finished_at = time.monotonic()

    def read_back(self) -> bytes | None:
        answer = http_get(f"{self.base_url}/v2/{self.repo}/blobs/{self.digest}", timeout=30)
        return answer.body if answer.status == 200 else None


class ConnectProbe(threading.Thread):
    """TCP connects every `interval` seconds; records when connections were refused."""

    def __init__(self, host: str, port: int, *, interval: float = 0.002):
        super().__init__(name="connect-probe", daemon=True)
        self.host, self.port, self.interval = host, port, interval
        self.attempts = 0
        self.refused = 0
        self.windows: list[tuple[float, float]] = []  # (first refused, next accepted)
        self._stop_event = threading.Event()

    def start(self) -> ConnectProbe:  # type: ignore[override]
        super().start()
        return self

    def run(self) -> None:
        refused_since: float | None = None
        while not self._stop_event.is_set():
            now = time.monotonic()
            self.attempts += 1
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0):
                    pass
                if refused_since is not None:
                    self.windows.append((refused_since, now))
                    refused_since = None
            except ConnectionRefusedError:
                self.refused += 1
                if refused_since is None:
                    refused_since = now
            except OSError:
                pass
            time.sleep(self.interval)
        if refused_since is not None:
            self.windows.append((refused_since, time.monotonic()))

    def stop(self) -> list[tuple[float, float]]:
        self._stop_event.set()
        self.join(10)
        return self.windows
