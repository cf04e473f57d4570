"""How `berth-agent run` wires the layers, in each of its two modes.

API mode (--registry NAMESPACE/NAME): the Registry and the Secrets over the Kubernetes API, status written
back, the reload Lease between replicas, garbage collection. File mode (--registry-file): a Registry YAML file,
status in the log. Both give the pipeline the same things (Wiring); run.py starts what they give.
Imports stay inside the functions: a file-mode agent never loads the API client (its memory budget).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from berth_supervise.protocol import CONFIG_NAME

if TYPE_CHECKING:
    from ..apply.applier import Applier
    from ..core.health import Health


@dataclass
class Wiring:
    """What one mode hands the pipeline: its sources of change, where status goes, what it names in the log."""

    sources: list[Any]
    reporter: Any
    subject: str
    api_secrets: Any = None  # API mode with --api-secret: the mounted Secrets' API copies (sources/api_secrets.py)
    turn: Any = None  # API mode: the reload Lease between replicas
    # API mode: garbage collection, given the applier (its acknowledgement reads what serves): the pipeline's
    # read-only window, and the runner, one more source.
    gc: Callable[[Applier], tuple[Any, Any]] | None = None


def file_mode(args: argparse.Namespace, health: Health) -> Wiring:
    from ..pipeline.report import LogReporter
    from ..sources.registry_file import RegistryFileWatcher

    return Wiring([RegistryFileWatcher(args.registry_file, health)], LogReporter(str(args.registry_file)),
                  str(args.registry_file))


def api_mode(args: argparse.Namespace, health: Health, loop: asyncio.AbstractEventLoop) -> Wiring:
    from berth_api.leases import reload_lease_name

    from ..apply.turns import ReplicaTurn
    from ..kube.lease import ReloadLease
    from ..pipeline.report import ApiReporter
    from ..sources.registry_api import RegistryApiWatcher

    namespace, name = args.registry.split("/")
    api_client = _kube_api_client(args)
    sources: list[Any] = [RegistryApiWatcher(api_client, namespace, name, health)]
    api_secrets = None
    config_maps = getattr(args, "api_config_maps", None) or {}
    if args.api_secrets or config_maps:
        from ..sources.api_secrets import STORE_NAME, ApiSecrets
        from ..sources.secret_api import SecretApiWatcher

        # One store for both kinds: a volume is one object, a Secret or a ConfigMap (the name says which).
        api_secrets = ApiSecrets(args.config_dir / STORE_NAME, args.mounts,
                                 {**args.api_secrets, **{v: f"configmap/{n}" for v, n in config_maps.items()}})
        sources += [SecretApiWatcher(api_client, namespace, secret, volume, health)
                    for volume, secret in args.api_secrets.items()]
        sources += [SecretApiWatcher(api_client, namespace, name, volume, health, kind="ConfigMap")
                    for volume, name in config_maps.items()]
    reporter = ApiReporter(api_client, namespace, name, args.pod_name)

    def waiting(message: str | None) -> None:  # called from the applier's worker thread
        asyncio.run_coroutine_threadsafe(reporter.waiting(message), loop)

    turn = ReplicaTurn(ReloadLease(api_client, namespace, reload_lease_name(name), args.pod_name), health,
                       leave_seconds=args.leave_seconds, on_wait=waiting)

    def gc(applier: Applier) -> tuple[Any, Any]:
        # Garbage collection (docs/design.md §4.5): read-only while a request stands, acknowledged on status.
        from ..gc.ack import GcAck
        from ..gc.read_only import GcReadOnly

        ack = GcAck(reporter.read_only_for, args.pod_name, args.config_dir / CONFIG_NAME,
                    lambda: applier.current.config if applier.current else None)
        runner = _gc_runner(args, api_client, namespace, name, reporter)
        return GcReadOnly(ack, on_registry=runner.offer), runner

    return Wiring(sources, reporter, args.registry, api_secrets=api_secrets, turn=turn, gc=gc)


def _kube_api_client(args: argparse.Namespace) -> Any:
    # The agent's own client on the standard library, not the official one (5.3 MiB per pod; kube/client.py).
    from ..kube import config
    from ..kube.client import ApiClient

    return ApiClient(config.load(args.kube_host, args.kubeconfig))


def _gc_runner(args: argparse.Namespace, api_client: Any, namespace: str, name: str, reporter: Any) -> Any:
    """The GC runner (gc/run.py): takes the `<registry>-gc` Lease when a request stands and runs the command
    in the registry container through the supervisor (gc/command.py)."""
    from berth_api.leases import gc_lease_name

    from ..gc.api import GcStatusApi
    from ..gc.command import GcCommand
    from ..gc.run import GcRunner
    from ..kube.lease import ReloadLease

    state_dir = args.state_dir.absolute() if args.state_dir else args.config_dir
    command = GcCommand(state_dir, args.config_dir)
    return GcRunner(GcStatusApi(api_client, namespace, name),
                    ReloadLease(api_client, namespace, gc_lease_name(name), args.pod_name),
                    command, reporter, args.pod_name, args.data_dir, args.config_dir / CONFIG_NAME)


__all__ = ["Wiring", "api_mode", "file_mode"]
