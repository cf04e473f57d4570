"""What the pod's notification outbox (docs/decisions/0002-a-notification-outbox-in-the-agent.md)
sustains and costs: events per second through the relay on one
core, and the memory it adds.

A child process runs the agent's Outbox and its relay pinned to one core (as in a pod with a CPU limit of 1), its
log in a temporary directory on this machine's disk. This process posts single-event envelopes, as Distribution 3
does: one poster at a time (what one registry's queue does) and --concurrency posters at once (several registries
during a reload), and a receiver on the other core takes what the outbox delivers. Printed: events stored per
second (the relay answered: on disk, fsynced) and delivered per second, and the child's RSS idle, then holding
--held events for an endpoint that is down.

    python bench/outbox_relay.py [--events 5000] [--concurrency 8] [--held 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

EVENT = {"id": "", "timestamp": "2026-12-06T00:00:00Z", "action": "push", "target": {
    "mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 1024, "digest": "sha256:" + "a" * 64,
    "length": 1024, "repository": "bench/app", "url": "http://registry:5000/v2/bench/app/manifests/sha256:x",
    "tag": "1"}, "request": {"id": "r", "addr": "10.0.0.1:40000", "host": "registry:5000", "method": "PUT",
                             "useragent": "containerd/2.0"}, "actor": {}, "source": {"addr": "pod:5000",
                                                                                      "instanceID": "i"}}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def serve(directory: str, relay_port: int, endpoints: str) -> None:
    """The child: the Outbox and its relay on one core until killed."""
    os.sched_setaffinity(0, {0})
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
    from berth_agent.outbox.relay import start_relay
    from berth_agent.outbox.service import Outbox

    async def main() -> None:
        outbox = Outbox(Path(directory), Path(endpoints), 256 << 20)
        await start_relay(outbox, "127.0.0.1", relay_port)
        await outbox.run()

    asyncio.run(main())


async def post_all(port: int, count: int, concurrency: int, start: int) -> float:
    url = f"http://127.0.0.1:{port}/events"
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def poster(first: int) -> None:
            for index in range(first, start + count, concurrency):
                body = json.dumps({"events": [dict(EVENT, id=f"e{index}")]})
                async with session.post(url, data=body) as response:
                    assert response.status == 200, response.status

        began = time.perf_counter()
        await asyncio.gather(*(poster(start + n) for n in range(concurrency)))
        return time.perf_counter() - began


async def run(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {1} if os.cpu_count() and os.cpu_count() > 1 else {0})
    received: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        received.extend(e["id"] for e in json.loads(await request.read())["events"])
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    receiver_port, relay_port = free_port(), free_port()
    await web.TCPSite(runner, "127.0.0.1", receiver_port).start()
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        endpoints = Path(work) / "outbox.json"
        endpoints.write_text(json.dumps({"endpoints": [{
            "name": "bench", "url": f"http://127.0.0.1:{receiver_port}/hook", "headers": {}, "timeout": 5.0,
            "threshold": 3, "backoff": 0.5, "ignoredMediaTypes": [], "ignoredActions": []}]}))
        child = subprocess.Popen([sys.executable, __file__, "--serve", str(Path(work) / "log"), str(relay_port),
                                  str(endpoints)])
        try:
            for _ in range(200):
                try:
                    with socket.create_connection(("127.0.0.1", relay_port), timeout=0.1):
                        break
                except OSError:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            idle = rss_mib(child.pid)
            sent = 0
            for concurrency in (1, args.concurrency):
                began = time.perf_counter()
                seconds = await post_all(relay_port, args.events, concurrency, sent)
                sent += args.events
                while len(received) < sent and time.perf_counter() - began < 120:
                    await asyncio.sleep(0.01)
                delivered = time.perf_counter() - began
                print(f"{args.events} events, {concurrency} poster(s) at once: stored {args.events / seconds:,.0f} "
                      f"events/s (relay answered after fsync); delivered {len(received) - sent + args.events} in "
                      f"{delivered:.2f}s ({args.events / delivered:,.0f} events/s)")
            await runner.cleanup()  # the endpoint goes down: the outbox holds what comes
            seconds = await post_all(relay_port, args.held, args.concurrency, sent)
            await asyncio.sleep(0.5)
            held = rss_mib(child.pid)
            print(f"outbox RSS: {idle:.1f} MiB idle, {held:.1f} MiB holding {args.held} events "
                  f"({(held - idle) * 1024 / args.held:.2f} KiB per event held; stored at "
                  f"{args.held / seconds:,.0f} events/s)")
            print(f"delivered {len(received)} of {sent} events, {len(set(received))} distinct")
        finally:
            child.kill()
            child.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--held", type=int, default=10000)
    parser.add_argument("--dir", default=None, help="where the log goes (default: the system's temporary dir)")
    parser.add_argument("--serve", nargs=3, metavar=("DIR", "PORT", "ENDPOINTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), args.serve[2])
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
