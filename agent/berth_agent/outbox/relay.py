"""The relay: where the registry posts its notification envelopes (its one endpoint, on the loopback). It answers
200 only once the events are on disk (Outbox.store), 400 to what is not an envelope, 503 when they could not be
written (the registry's queue then tries again, as with any endpoint)."""

from __future__ import annotations

import logging

from aiohttp import web

from .service import Outbox, parse_envelope

log = logging.getLogger(__name__)
PATH = "/events"


def build_app(outbox: Outbox) -> web.Application:
    async def events(request: web.Request) -> web.Response:
        try:
            parsed = parse_envelope(await request.read())
        except ValueError:
            return web.Response(status=400, text="not a notification envelope\n")
        try:
            await outbox.store(parsed)
        except OSError as exc:
            log.error("outbox write failed", extra={"fields": {"errno": exc.errno, "events": len(parsed)}})
            return web.Response(status=503, text="not stored\n")
        return web.Response(status=200)

    app = web.Application(client_max_size=16 << 20)
    app.router.add_post(PATH, events)
    return app


async def start_relay(outbox: Outbox, host: str, port: int) -> web.AppRunner:
    """Serve the relay on host:port; the caller stops it with `await runner.cleanup()`."""
    runner = web.AppRunner(build_app(outbox), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


__all__ = ["PATH", "build_app", "start_relay"]
