"""`berth-operator`: run the operator (kopf) with a liveness endpoint, Prometheus metrics and JSON logs."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import sys

from kubernetes import config as kube_config
from kubernetes.client import Configuration

from .core import logs, metrics
from .core.identity import lease_identity
from .engine import facts
from .kube.client import Kube
from .reactor.leader import DEFAULT_LEASE_NAME, LeaseSettings
from .reactor.runner import LeadershipLost, run

# The install's namespace (deploy/): where a run outside the cluster looks for the Lease, so a local
# debugging run stands by while the installed operator leads.
DEFAULT_NAMESPACE = "berth-system"


def _version() -> str:
    try:
        return importlib.metadata.version("berth")
    except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="berth-operator", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="endpoints:\n"
               "  GET <--liveness URL>                   liveness (kopf): 200 while the operator runs\n"
               "                                         (default http://0.0.0.0:8080/healthz)\n"
               "  GET http://<--metrics-addr>:<--metrics-port>/metrics\n"
               "                                         Prometheus metrics (default http://0.0.0.0:9090/metrics)\n"
               "environment:\n"
               "  WATCH_NAMESPACE     comma-separated namespaces to watch when neither -n nor -A is given\n"
               "  BERTH_AGENT_IMAGE   the agent image for registry pods (default: the operator pod's own image,\n"
               "                      found through POD_NAME and POD_NAMESPACE)")
    parser.add_argument("--version", action="version", version=f"berth-operator {_version()}")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[],
                       help="watch Registries in this namespace (repeatable); default: $WATCH_NAMESPACE")
    scope.add_argument("-A", "--all-namespaces", action="store_true",
                       help="watch Registries in every namespace (default: off)")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", metavar="URL",
                        help="kopf's liveness endpoint URL, empty to disable (default: %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=9090, metavar="PORT",
                        help="port of the Prometheus /metrics server, 0 to disable (default: %(default)s)")
    parser.add_argument("--metrics-addr", default="0.0.0.0", metavar="ADDR",
                        help="address the metrics server binds (default: %(default)s)")
    parser.add_argument("--refresh-interval", type=float, default=60.0, metavar="SECONDS",
                        help="seconds between periodic reconciles of the Registries that depend on what no "
                             "watch reports (a missing Secret or class, a claim you named) (default: %(default)g)")
    # docs/decisions/0026-one-leader-through-a-lease.md
    election = parser.add_argument_group("leader election (a coordination.k8s.io/v1 Lease)")
    election.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
                          help="act only while holding the leader Lease, else stand by (default: on)")
    election.add_argument("--leader-election-namespace",
                          default=os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE,
                          help=f"namespace of the Lease (default: $POD_NAMESPACE, else {DEFAULT_NAMESPACE})")
    election.add_argument("--leader-election-id", default=DEFAULT_LEASE_NAME,
                          help="name of the Lease (default: %(default)s)")
    election.add_argument("--lease-duration", type=float, default=15.0,
                          help="seconds a standby waits on an unrenewed Lease before taking it over "
                               "(default: %(default)g)")
    election.add_argument("--renew-deadline", type=float, default=10.0,
                          help="seconds the leader keeps acting without a successful renewal (default: %(default)g)")
    election.add_argument("--retry-period", type=float, default=2.0,
                          help="seconds between renewals, and between a standby's attempts (default: %(default)g)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info",
                        help="(default: %(default)s)")
    parser.add_argument("--log-format", choices=["json", "text"], default="json",
                        help="one JSON object per line, or plain text (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.all_namespaces and not args.namespace:
        watch = os.environ.get("WATCH_NAMESPACE", "")
        args.namespace = [ns for ns in watch.split(",") if ns]
        if not args.namespace:
            parser.error("name a namespace (--namespace or $WATCH_NAMESPACE) or pass --all-namespaces")
    if args.leader_elect:
        try:
            args.lease = LeaseSettings(
                namespace=args.leader_election_namespace, identity=lease_identity(), name=args.leader_election_id,
                lease_duration=args.lease_duration, renew_deadline=args.renew_deadline,
                retry_period=args.retry_period,
            )
        except ValueError as exc:
            parser.error(str(exc))
    else:
        args.lease = None
    return args


def load_configuration() -> Configuration:
    """In-cluster service account, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    configuration = Configuration()
    try:
        kube_config.load_incluster_config(client_configuration=configuration)
    except kube_config.ConfigException:
        kube_config.load_kube_config(client_configuration=configuration)
    return configuration


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(level=args.log_level, json=args.log_format == "json")
    try:
        configuration = load_configuration()
        probe = Kube(configuration)
        try:
            image = facts.agent_image(probe)
        finally:
            probe.close()
    except Exception as exc:  # a clear line, not a stack trace, when the operator cannot start
        logs.logger.error("cannot start: %s", exc)
        return 2
    if args.metrics_port:
        port = metrics.serve(args.metrics_port, args.metrics_addr)
        logs.logger.info("serving Prometheus metrics on %s:%d/metrics", args.metrics_addr, port)
    try:
        asyncio.run(run(
            configuration,
            agent_image=image,
            namespaces=args.namespace,
            clusterwide=args.all_namespaces,
            liveness=args.liveness or None,
            refresh_interval=args.refresh_interval,
            leader=args.lease,
        ))
    except LeadershipLost as exc:  # exit: the kubelet restarts us as a standby
        logs.logger.error("stopping: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
