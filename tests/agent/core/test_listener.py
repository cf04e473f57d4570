"""The agent's HTTP listeners on the standard library (core/listener.py): real requests over 127.0.0.1 from
http.client, answered as aiohttp.web answered them (routes, 404, 405, HEAD, keep-alive, bodies, 500), each handler
run on the event loop; cleanup closes idle connections, lets a handler in flight answer and cancels one that
outlives the shutdown bound."""

from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import threading

import pytest

from berth_agent.core.listener import Request, Response, listen
from support.common.ports import free_port

WAIT = 60.0  # generous: a loaded machine; a hang fails instead of blocking the suite


def _exchange(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
              connection: http.client.HTTPConnection | None = None) -> tuple[int, dict, bytes]:
    conn = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        if connection is None:
            conn.close()


def call(*args, **kwargs):
    return asyncio.wait_for(asyncio.to_thread(_exchange, *args, **kwargs), WAIT)


def test_routes_methods_head_and_bodies():
    async def scenario() -> None:
        loop_thread = threading.get_ident()
        seen: list[tuple[str, str, bytes, int]] = []

        async def hello(request: Request) -> Response:
            seen.append((request.method, request.path, request.body, threading.get_ident()))
            return Response(200, b"hello\n", {"Content-Type": "text/plain; version=0.0.4", "X-Seen": "yes"})

        async def echo(request: Request) -> Response:
            seen.append((request.method, request.path, request.body, threading.get_ident()))
            return Response.text(200, request.headers.get("x-token", "") + ":" + request.body.decode())

        port = free_port()
        listener = await listen("test", {"/hello": {"GET": hello}, "/echo": {"POST": echo}}, "127.0.0.1", port,
                                max_body=64)
        try:
            status, headers, body = await call(port, "GET", "/hello?x=1")
            assert (status, body) == (200, b"hello\n")
            assert headers["content-type"] == "text/plain; version=0.0.4" and headers["x-seen"] == "yes"
            assert headers["content-length"] == "6"
            status, headers, body = await call(port, "HEAD", "/hello")
            assert (status, body, headers["content-length"]) == (200, b"", "6")

            status, headers, body = await call(port, "POST", "/echo", b"payload", {"X-Token": "t"})
            assert (status, body) == (200, b"t:payload") and headers["content-type"] == "text/plain; charset=utf-8"
            assert [s[:3] for s in seen] == [("GET", "/hello", b""), ("HEAD", "/hello", b""),
                                             ("POST", "/echo", b"payload")]
            assert all(s[3] == loop_thread for s in seen)  # every handler ran on the event loop

            status, _, body = await call(port, "GET", "/nothing")
            assert (status, body) == (404, b"404: Not Found")
            status, headers, body = await call(port, "POST", "/hello", b"x")
            assert (status, body, headers["allow"]) == (405, b"405: Method Not Allowed", "GET,HEAD")
            status, headers, body = await call(port, "GET", "/echo")
            assert (status, headers["allow"]) == (405, "POST")

            status, headers, body = await call(port, "POST", "/echo", b"x" * 65)  # over max_body
            assert status == 413 and b"Maximum request body size 64 exceeded" in body
            assert headers["connection"] == "close"
            assert len(seen) == 3  # none of those reached a handler
        finally:
            await listener.cleanup()

    asyncio.run(scenario())


def test_a_kept_alive_connection_serves_several_requests_and_a_chunked_body_is_refused():
    async def scenario() -> None:
        async def ok(_request: Request) -> Response:
            return Response.text(200, "ok\n")

        port = free_port()
        listener = await listen("test", {"/ok": {"GET": ok, "POST": ok}}, "127.0.0.1", port)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        try:
            assert (await call(port, "GET", "/ok", connection=conn))[0] == 200
            first = conn.sock
            assert (await call(port, "GET", "/ok", connection=conn))[0] == 200
            assert conn.sock is first  # the same connection: HTTP/1.1 keep-alive

            def chunked() -> int:
                with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
                    sock.sendall(b"POST /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"1\r\nx\r\n0\r\n\r\n")
                    return int(sock.makefile("rb").readline().split()[1])

            assert await asyncio.wait_for(asyncio.to_thread(chunked), WAIT) == 411

            def expecting_100() -> tuple[bytes, int]:
                with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
                    sock.sendall(b"POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
                    answers = sock.makefile("rb")
                    interim = answers.readline()  # before the body is sent: a client waits for it
                    answers.readline()
                    sock.sendall(b"{}")
                    return interim.strip(), int(answers.readline().split()[1])

            assert await asyncio.wait_for(asyncio.to_thread(expecting_100), WAIT) == (b"HTTP/1.1 100 Continue", 200)
        finally:
            conn.close()
            await listener.cleanup()

    asyncio.run(scenario())


def test_a_failing_handler_answers_500_and_the_listener_goes_on(caplog):
    async def scenario() -> None:
        async def broken(_request: Request) -> Response:
            raise RuntimeError("boom")

        async def ok(_request: Request) -> Response:
            return Response.text(200, "ok\n")

        port = free_port()
        listener = await listen("test", {"/broken": {"GET": broken}, "/ok": {"GET": ok}}, "127.0.0.1", port)
        try:
            with caplog.at_level(logging.ERROR, logger="berth_agent.core.listener"):
                status, _, body = await call(port, "GET", "/broken")
            assert status == 500 and body.startswith(b"500 Internal Server Error")
            assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)
            assert (await call(port, "GET", "/ok"))[0] == 200
        finally:
            await listener.cleanup()

    asyncio.run(scenario())


def test_a_taken_port_raises_oserror():
    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            with pytest.raises(OSError):
                await listen("test", {}, "127.0.0.1", taken.getsockname()[1])

    asyncio.run(scenario())


def test_cleanup_closes_idle_connections_lets_a_handler_answer_and_cancels_one_past_the_bound():
    async def scenario() -> None:
        release = asyncio.Event()
        started = asyncio.Event()
        cancelled = asyncio.Event()

        async def slow(_request: Request) -> Response:
            started.set()
            await release.wait()
            return Response.text(200, "late\n")

        async def stuck(_request: Request) -> Response:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            raise AssertionError("unreachable")

        async def ok(_request: Request) -> Response:
            return Response.text(200, "ok\n")

        routes = {"/slow": {"GET": slow}, "/stuck": {"GET": stuck}, "/ok": {"GET": ok}}

        # A handler in flight answers; an idle kept-alive connection is closed; then nothing listens.
        port = free_port()
        listener = await listen("test", routes, "127.0.0.1", port)
        idle = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        assert (await call(port, "GET", "/ok", connection=idle))[0] == 200
        in_flight = asyncio.create_task(call(port, "GET", "/slow"))
        await asyncio.wait_for(started.wait(), WAIT)
        cleanup = asyncio.create_task(listener.cleanup())
        await asyncio.sleep(0.2)
        assert not cleanup.done()  # waits for the handler in flight
        release.set()
        status, _, body = await in_flight
        assert (status, body) == (200, b"late\n")
        await asyncio.wait_for(cleanup, WAIT)

        def idle_is_closed() -> bool:
            idle.sock.settimeout(WAIT)
            return idle.sock.recv(1) == b""

        assert await asyncio.wait_for(asyncio.to_thread(idle_is_closed), WAIT)
        idle.close()
        with pytest.raises(ConnectionRefusedError):
            await call(port, "GET", "/ok")

        # A handler that outlives the bound is cancelled and its connection closed without an answer.
        started.clear()
        port = free_port()
        listener = await listen("test", routes, "127.0.0.1", port)
        listener.shutdown_seconds = 0.2
        in_flight = asyncio.create_task(call(port, "GET", "/stuck"))
        await asyncio.wait_for(started.wait(), WAIT)
        await asyncio.wait_for(listener.cleanup(), WAIT)
        with pytest.raises(http.client.RemoteDisconnected):
            await in_flight
        assert cancelled.is_set()

    asyncio.run(scenario())
