"""The outbox end to end in one process (outbox/relay.py, service.py, delivery.py): envelopes posted to the relay
are answered once stored and delivered to a real HTTP receiver in order, one per envelope, with each endpoint's
headers, ignores and breaker; a rewritten endpoints file (a rotated header, a new endpoint) is followed without a
restart; a non-envelope gets 400."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import aiohttp
from aiohttp import web

from berth_agent.outbox.relay import PATH, start_relay
from berth_agent.outbox.service import Outbox
from support.common.polling import until


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Receiver:
    def __init__(self, fail_first: int = 0) -> None:
        self.got: list[tuple[dict, dict]] = []
        self.fail_first = fail_first
        self.port = free_port()

    async def start(self) -> web.AppRunner:
        async def handle(request: web.Request) -> web.Response:
            if self.fail_first > 0:
                self.fail_first -= 1
                return web.Response(status=503)
            envelope = json.loads(await request.read())
            assert len(envelope["events"]) == 1  # one event per envelope, as Distribution 3 posts them
            self.got.append((dict(request.headers), envelope["events"][0]))
            return web.Response(status=200)

        app = web.Application()
        app.router.add_post("/hook", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        return runner

    def ids(self) -> list[str]:
        return [event["id"] for _, event in self.got]


def endpoint(name: str, port: int, **fields) -> dict:
    return {"name": name, "url": f"http://127.0.0.1:{port}/hook", "headers": fields.pop("headers", {}),
            "timeout": 2.0, "threshold": 2, "backoff": 0.2, "ignoredMediaTypes": [], "ignoredActions": [], **fields}


def write(path: Path, *endpoints: dict) -> None:
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps({"endpoints": list(endpoints)}))
    temp.replace(path)  # as the applier writes it: a new file


async def post(port: int, *events: dict, body: bytes | None = None) -> int:
    data = body if body is not None else json.dumps({"events": list(events)}).encode()
    async with aiohttp.ClientSession() as session, session.post(f"http://127.0.0.1:{port}{PATH}", data=data) as answer:
        return answer.status


def event(name: str, action: str = "push", media: str = "application/vnd.oci.image.manifest.v1+json") -> dict:
    return {"id": name, "action": action, "target": {"mediaType": media, "repository": "demo/app"}}


def test_events_are_delivered_in_order_with_headers_ignores_and_retries(tmp_path):
    async def scenario() -> None:
        scanner, audit = Receiver(fail_first=3), Receiver()
        runners = [await scanner.start(), await audit.start()]
        endpoints = tmp_path / "outbox.json"
        write(endpoints, endpoint("scanner", scanner.port, headers={"Authorization": ["Bearer one"]}),
              endpoint("audit", audit.port, ignoredActions=["pull"], ignoredMediaTypes=["application/octet-stream"]))
        outbox = Outbox(tmp_path / "outbox", endpoints, 1 << 20)
        relay_port = free_port()
        runners.append(await start_relay(outbox, "127.0.0.1", relay_port))
        task = asyncio.create_task(outbox.run())
        try:
            assert await post(relay_port, event("e1"), event("e2", "pull")) == 200
            assert await post(relay_port, event("e3", media="application/octet-stream")) == 200
            assert await post(relay_port, event("e4")) == 200
            assert await post(relay_port, body=b'{"not": "an envelope"}') == 400
            await until(lambda: len(scanner.got) == 4 and len(audit.got) == 2,
                        "e1..e4 at the scanner, e1 and e4 at the audit", 10)
            assert scanner.ids() == ["e1", "e2", "e3", "e4"]  # in order, after 3 refusals (the breaker)
            assert audit.ids() == ["e1", "e4"]  # its ignores
            assert all(h["Authorization"] == "Bearer one" for h, _ in scanner.got)
            assert scanner.got[0][0]["Content-Type"] == "application/vnd.docker.distribution.events.v2+json"
            # A rotated header and a removed endpoint: followed from the next event, nothing restarted.
            write(endpoints, endpoint("scanner", scanner.port, headers={"Authorization": ["Bearer two"]}))
            assert await post(relay_port, event("e5")) == 200
            await until(lambda: len(scanner.got) == 5, "e5 at the scanner", 10)
            assert scanner.got[-1][0]["Authorization"] == "Bearer two" and "audit" not in outbox.senders
            from prometheus_client import REGISTRY

            assert REGISTRY.get_sample_value("berth_agent_notifications_pending", {"endpoint": "audit"}) is None
            await until(lambda: outbox.pending() == {"scanner": 0}, "nothing pending", 10)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            for runner in runners:
                await runner.cleanup()
        # The repr of what it read hides the header values.
        assert "Bearer" not in repr(outbox.senders) and "Bearer" not in repr(scanner.got[0][1])

    asyncio.run(scenario())


def test_held_events_survive_a_new_outbox_and_are_delivered_once_the_endpoint_is_back(tmp_path):
    async def scenario() -> None:
        receiver = Receiver()
        endpoints = tmp_path / "outbox.json"
        write(endpoints, endpoint("scanner", receiver.port))
        relay_port = free_port()
        first = Outbox(tmp_path / "outbox", endpoints, 1 << 20)
        relay = await start_relay(first, "127.0.0.1", relay_port)
        task = asyncio.create_task(first.run())
        await asyncio.sleep(0.05)
        assert await post(relay_port, event("held-1"), event("held-2")) == 200  # nothing listens at the endpoint
        await until(lambda: first.pending() == {"scanner": 2}, "both events held", 10)
        task.cancel()  # as a kill -9 would leave it: stored, not delivered
        await asyncio.gather(task, return_exceptions=True)
        await relay.cleanup()
        runner = await receiver.start()
        second = Outbox(tmp_path / "outbox", endpoints, 1 << 20)
        task = asyncio.create_task(second.run())
        try:
            await until(lambda: receiver.ids() == ["held-1", "held-2"], "both held events delivered", 10)
            assert await second.deliver_all(1.0) == {}
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await runner.cleanup()

    asyncio.run(scenario())


def test_the_logged_url_carries_no_user_info_or_query():
    from berth_agent.outbox.endpoints import Endpoint
    from berth_agent.outbox.service import _shown

    endpoint = Endpoint("e", "https://user:s3cret@hooks.example.com:8443/in?token=t0ken#x", (), 1.0, 1, 1.0,
                        frozenset(), frozenset())
    shown = _shown(endpoint)
    assert shown == "https://hooks.example.com:8443/in" and "s3cret" not in shown and "t0ken" not in shown
