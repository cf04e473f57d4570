"""`berth-agent run`: the sidecar in every registry pod (docs/design.md §4.2), or a local agent beside a registry.

It watches the Registry (API or file) and the mounted Secrets, renders and writes config.yml, has the
registry process restarted in place by berth-supervise (the registry container's command) when the config
changes, and serves /startupz /readyz /livez /metrics. Stops on SIGTERM or SIGINT (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from pathlib import Path
from typing import Any

from berth_api.pod import (
    CONFIG_DIR,
    CONFIG_NAME,
    DATA_DIR,
    INPUT_VOLUMES,
    MOUNT_ROOT,
    OUTBOX_DIR,
    OUTBOX_MAX_BYTES,
    OUTBOX_PORT,
    TRUST_VOLUMES,
)
from berth_supervise.protocol import split_addr

log = logging.getLogger("berth_agent.run")

# The pod's layout (berth_api.pod): the operator's pod runs the agent with these paths.
DEFAULT_CONFIG_DIR = Path(CONFIG_DIR)
DEFAULT_MOUNTS = Path(MOUNT_ROOT)
DEFAULT_DATA_DIR = Path(DATA_DIR)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="keep the registry configured from a Registry and the mounted Secrets", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--registry", metavar="NAMESPACE/NAME", help="watch this Registry through the Kubernetes API")
    which.add_argument("--registry-file", type=Path, metavar="FILE",
                       help="watch a Registry YAML file (outside Kubernetes)")
    parser.add_argument("--mounts", type=Path, default=DEFAULT_MOUNTS, metavar="DIR",
                        help=f"mount root holding {', '.join(v + '/' for v in INPUT_VOLUMES)} "
                             f"(default {DEFAULT_MOUNTS})")
    parser.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR, metavar="DIR",
                        help=f"where config.yml, htpasswd and tls/ are written "
                             f"(default {DEFAULT_CONFIG_DIR})")
    parser.add_argument("--state-dir", type=Path, default=None, metavar="DIR",
                        help="where berth-supervise keeps its pid, the last registry exit and the registry's output "
                             "(its BERTH_STATE_DIR; default: the config dir)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, metavar="DIR",
                        help=f"filesystem storage root, the PVC mount (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--distribution", choices=("2", "3"), default=None,
                        help="Distribution major version (default: spec.distribution, else from the image tag)")
    parser.add_argument("--health-addr", default="0.0.0.0:8081", metavar="HOST:PORT",
                        help="where /startupz, /readyz, /livez (the pod's probes) and the Prometheus /metrics are "
                             "served (default 0.0.0.0:8081)")
    parser.add_argument("--registry-metrics-addr", default=None, metavar="HOST:PORT",
                        help="serve the registry's own Prometheus /metrics here, proxied to the debug port of "
                             "whichever registry process is current (berth-supervise names it in the state dir; its "
                             "BERTH_DEBUG_PORTS turns them on); default: not served")
    parser.add_argument("--outbox-addr", default=f"127.0.0.1:{OUTBOX_PORT}", metavar="HOST:PORT",
                        help="the notification outbox's relay, the registry's one notification endpoint (default "
                             f"127.0.0.1:{OUTBOX_PORT}: the loopback of the pod)")
    parser.add_argument("--outbox-dir", type=Path, default=None, metavar="DIR",
                        help="where the outbox keeps events until every endpoint has them (default: outbox/ in the "
                             "state dir, on the pod's tmp volume)")
    parser.add_argument("--outbox-max-bytes", type=int, default=OUTBOX_MAX_BYTES, metavar="BYTES",
                        help="past this the oldest events are dropped, counted per endpoint (default "
                             f"{OUTBOX_MAX_BYTES})")
    parser.add_argument("--stop-delivery-seconds", type=float, default=20.0, metavar="SECONDS",
                        help="at SIGTERM (the registry has exited), how long the outbox may still deliver what it "
                             "holds; keep it under the pod's terminationGracePeriodSeconds (default 20)")
    parser.add_argument("--pod-name", default=os.environ.get("POD_NAME") or socket.gethostname(),
                        help="key of this agent's record in status.agents (default $POD_NAME, else the hostname)")
    parser.add_argument("--debounce", type=float, default=0.03, metavar="SECONDS",
                        help="quiet time that ends a burst of changes before rendering (default 0.03)")
    parser.add_argument("--max-wait", type=float, default=2.0, metavar="SECONDS",
                        help="longest a burst may postpone rendering (default 2)")
    parser.add_argument("--resync", type=float, default=60.0, metavar="SECONDS",
                        help="full re-check of every input, the safety net for missed events (default 60)")
    parser.add_argument("--upstream-interval", type=float, default=300.0, metavar="SECONDS",
                        help="with spec.config.proxy: how often the upstream is checked for status.agents.<pod>."
                        "upstream (it is also checked before every restart)")
    parser.add_argument("--api-secret", action="append", default=[], metavar="DIR=SECRET",
                        help="with --registry: also watch Secret SECRET, mounted at DIR/ of the mount root, over the "
                             "API, and apply its changes without waiting for the kubelet (repeatable)")
    parser.add_argument("--api-configmap", action="append", default=[], metavar="DIR=CONFIGMAP",
                        help=f"with --registry: the same for ConfigMap CONFIGMAP mounted at DIR/, DIR one of "
                             f"{', '.join(TRUST_VOLUMES)} (token auth's trust; repeatable)")
    parser.add_argument("--leave-seconds", type=float, default=5.0, metavar="SECONDS",
                        help="with more than one replica: how long /readyz stays false before the registry restarts, "
                             "and how long after it is back before the next replica may go: the readiness probe "
                             "period plus the time endpoints take to follow (default 5)")
    parser.add_argument("--listen-host", metavar="HOST",
                        help="listen on HOST instead of the host in spec.http.addr (the port is kept): several local "
                             "pods on one machine, each on its own loopback address")
    parser.add_argument("--kube-host", metavar="URL", help="API server URL without credentials (tests, kubectl proxy)")
    parser.add_argument("--kubeconfig", type=Path, metavar="FILE",
                        help="kubeconfig (default: in-cluster, else ~/.kube/config)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                        help="(default info)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..core.deferred import defer
    from ..core.logs import setup_json_logging

    # The agent serves its endpoints with the standard library (core/listener.py); aiohttp's client loads when first
    # used: a notification endpoint (core/deferred.py). prometheus_client is not deferred: its exposition would load at
    # the first scrape of /metrics, and a scrape must not wait for an import (0.6 MiB;
    # docs/decisions/0037-agent-memory.md).
    defer("aiohttp")

    setup_json_logging(args.log_level)
    # Absolute paths: the registry's command line names the config path, and restart/procfs.py matches it exactly.
    args.config_dir, args.mounts, args.data_dir = (p.absolute() for p in (args.config_dir, args.mounts, args.data_dir))
    try:
        host, port = _bind_addr(args.health_addr)
        args.outbox = split_addr(args.outbox_addr, "--outbox-addr")
        args.registry_metrics = (_bind_addr(args.registry_metrics_addr, "--registry-metrics-addr")
                                 if args.registry_metrics_addr else None)
        if args.registry is not None and args.registry.count("/") != 1:
            raise ValueError("--registry must be NAMESPACE/NAME")
        args.api_secrets = _api_secrets(args.api_secret)
        args.api_config_maps = _api_secrets(args.api_configmap, TRUST_VOLUMES, "--api-configmap", "CONFIGMAP")
        if set(args.api_secrets) & set(args.api_config_maps):
            raise ValueError("a directory is either --api-secret or --api-configmap, not both")
        if (args.api_secrets or args.api_config_maps) and args.registry is None:
            raise ValueError("--api-secret and --api-configmap need --registry (the objects are read through the API)")
        if args.leave_seconds < 0:
            raise ValueError("--leave-seconds must not be negative")
    except ValueError as exc:
        log.error("bad arguments", extra={"fields": {"error": str(exc)}})
        return 2
    try:
        return asyncio.run(_main(args, host, port))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:  # e.g. the health port is taken: one line, not a traceback
        log.error("cannot start", extra={"fields": {"error": f"{type(exc).__name__}: {exc.strerror or exc}"}})
        return 1
    except Exception as exc:
        from ..kube.config import ConfigError  # here, not above: a file-mode agent never loads the API client

        if not isinstance(exc, ConfigError):
            raise
        # No API server to reach (no kubeconfig, not in a pod, a field the client does not take): one line naming
        # what is wrong, not a traceback.
        log.error("cannot configure the API client", extra={"fields": {"error": str(exc)}})
        return 2


def _bind_addr(addr: str, flag: str = "--health-addr") -> tuple[str, int]:
    """Where to listen: split_addr's answer, with every IPv4 address for an empty host."""
    host, port = split_addr(addr, flag)
    return host or "0.0.0.0", port


def _api_secrets(values: list[str], volumes: tuple[str, ...] = INPUT_VOLUMES, flag: str = "--api-secret",
                 what: str = "SECRET") -> dict[str, str]:
    """--api-secret DIR=SECRET values as {DIR: SECRET}; DIR is one of the mount contract's directories."""
    result: dict[str, str] = {}
    for value in values:
        volume, sep, secret = value.partition("=")
        if not sep or volume not in volumes or not secret or volume in result:
            raise ValueError(f"{flag} must be DIR={what} with DIR one of {', '.join(volumes)}, each once; "
                             f"not {value!r}")
        result[volume] = secret
    return result


async def _main(args: argparse.Namespace, host: str, port: int) -> int:
    from ..apply.registry_watch import RegistryWatch
    from ..apply.upstream_watch import UpstreamWatch
    from ..core.health import Health, start_health_server
    from ..outbox import Outbox, start_relay
    from ..pipeline.coordinator import Pipeline, PipelineSettings, applier_for
    from ..render.paths import OUTBOX_FILE
    from ..sources import Change, queue_emitter
    from ..sources.mount_watch import MountWatcher
    from ..sources.pvc import PvcProbe
    from .wiring import api_mode, file_mode

    health = Health(config_path=args.config_dir / CONFIG_NAME)
    queue: asyncio.Queue[Change] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    wiring = api_mode(args, health, loop) if args.registry is not None else file_mode(args, health)
    # The pipeline enables it for filesystem storage; capacity and free space go to status.agents.<pod>.dataPath.
    pvc = PvcProbe(args.data_dir, health, enabled=False, on_state=wiring.reporter.data_path)
    settings = PipelineSettings(
        config_dir=args.config_dir, data_dir=args.data_dir, mount_root=args.mounts, distribution=args.distribution,
        quiet_seconds=args.debounce, max_wait_seconds=max(args.max_wait, args.debounce),
        listen_host=args.listen_host, resync_seconds=args.resync,
        state_dir=args.state_dir.absolute() if args.state_dir else None,
        outbox_url=f"http://{args.outbox[0] or '127.0.0.1'}:{args.outbox[1]}/events",
    )
    applier = applier_for(settings, health)
    read_only, gc_runner = wiring.gc(applier) if wiring.gc is not None else (None, None)
    pipeline = Pipeline(settings, wiring.reporter, health, applier=applier, pvc=pvc, api_secrets=wiring.api_secrets,
                        turn=wiring.turn, gc=read_only)
    # /readyz, unexpected exits, a missing supervisor; spec.config.proxy's upstream (status.agents.<pod>.upstream).
    watch = RegistryWatch(applier, health, report=pipeline.watch_problem, notify=pipeline.watch_event)
    upstream = UpstreamWatch(applier, interval=args.upstream_interval, on_record=wiring.reporter.upstream)
    sources = [MountWatcher(args.mounts, health, resync_seconds=args.resync), pvc, *wiring.sources,
               *([gc_runner] if gc_runner is not None else []), watch, upstream]
    args.config_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # berth-supervise waits for config.yml in it
    server = await start_health_server(health, host, port)
    servers = [server]
    outbox = Outbox(args.outbox_dir or (args.state_dir or args.config_dir) / Path(OUTBOX_DIR).name,
                    args.config_dir / OUTBOX_FILE, args.outbox_max_bytes, report=wiring.reporter.notifications)
    servers.append(await start_relay(outbox, args.outbox[0] or "127.0.0.1", args.outbox[1]))
    if args.registry_metrics is not None:
        from ..restart.metrics_proxy import start_metrics_proxy

        metrics_runner, _proxy = await start_metrics_proxy(args.state_dir or args.config_dir, *args.registry_metrics)
        servers.append(metrics_runner)
    log.info("agent started", extra={"fields": {
        "registry": wiring.subject, "config_dir": str(args.config_dir), "mounts": str(args.mounts),
        "health_addr": f"{host}:{port}", "pod": args.pod_name}})
    return await _serve(pipeline, sources, queue_emitter(queue), queue, loop, servers, outbox,
                        args.stop_delivery_seconds)


async def _serve(pipeline: Any, sources: list[Any], emit: Any, queue: asyncio.Queue, loop: Any,
                 servers: list[Any], outbox: Any, delivery_seconds: float) -> int:
    """Run the pipeline, the outbox and every source until SIGTERM or SIGINT, or until one of them ends (a bug:
    exit 1). At SIGTERM the outbox first delivers what it holds, for at most `delivery_seconds`: in a pod the agent
    (a native sidecar) is stopped after the registry container, so nothing more comes."""
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(pipeline.run(queue), name="pipeline"),
             asyncio.create_task(outbox.run(), name=outbox.name)]
    tasks += [asyncio.create_task(source.run(emit), name=source.name) for source in sources]
    stopper = asyncio.create_task(stop.wait(), name="stop")
    status = 0
    try:
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                status = 1  # a loop that ends on its own is a bug: exit so the kubelet restarts the agent
                log.error("loop ended", extra={"fields": {"loop": task.get_name(),
                                                           "error": f"{type(exc).__name__}: {exc}"}})
        if stopper in done and status == 0:
            try:  # bounded whatever a status write or the disk does: the pod's stop must not hang on the outbox
                await asyncio.wait_for(outbox.deliver_all(delivery_seconds), delivery_seconds + 5)
            except TimeoutError:
                log.warning("outbox delivery at stop cut short", extra={"fields": {"seconds": delivery_seconds}})
    finally:
        for task in [*tasks, stopper]:
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
        for server in servers:
            await server.cleanup()
        log.info("agent stopped", extra={"fields": {"exit_status": status}})
    return status
