"""The relay: where the registry posts its notification envelopes (its one endpoint, on the loopback). It answers
200 only once the events are on disk (Outbox.store), 400 to what is not an envelope, 503 when they could not be
written (the registry's queue then tries again, as with any endpoint)."""

from __future__ import annotations

import logging

from ..core.listener import Handler, Listener, Request, Response, listen
from .service import Outbox, parse_envelope

log = logging.getLogger(__name__)
PATH = "/events"
MAX_BODY = 16 << 20


def build_routes(outbox: Outbox) -> dict[str, dict[str, Handler]]:
    async def events(request: Request) -> Response:
        try:
            parsed = parse_envelope(request.body)
        except ValueError:
            return Response.text(400, "not a notification envelope\n")
        try:
            await outbox.store(parsed)
        except OSError as exc:
            log.error("outbox write failed", extra={"fields": {"errno": exc.errno, "events": len(parsed)}})
            return Response.text(503, "not stored\n")
        return Response(200)

    return {PATH: {"POST": events}}


async def start_relay(outbox: Outbox, host: str, port: int) -> Listener:
    """Serve the relay on host:port; the caller stops it with `await listener.cleanup()`."""
    return await listen("relay", build_routes(outbox), host, port, max_body=MAX_BODY)


__all__ = ["PATH", "build_routes", "start_relay"]
