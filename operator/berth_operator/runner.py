"""Run the operator: kopf with our handlers, settings and credentials, in the current event loop.

Used by cli.py (the berth-operator process) and by the tests (in a thread, against the kmock fixture).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Collection
from typing import Any

import kopf
from kubernetes.client import Configuration

from .builders.names import MANAGED_BY_LABEL, NAME_LABEL
from .client import Kube
from .clock import UtcClock, WallClock
from .handlers import Context, make_registry

# Persist kopf's own bookkeeping in our annotations, never in status (the CRD's status schema has no
# room for status.kopf, and the API server would prune it).
ANNOTATION_PREFIX = "berth.dev"


def settings(*, peering_standalone: bool = True) -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    s.posting.reporting_component = "berth-operator"
    s.posting.event_name_prefix = "berth-"
    # Our own events (kopf.event) are always posted; kopf's per-handler log lines only from warnings up.
    s.posting.level = logging.WARNING
    s.peering.standalone = peering_standalone
    # Watches are re-opened at least every 5 minutes (idle connections get dropped: field-notes §3).
    s.watching.server_timeout = 270
    # Only Berth's pods and Deployments are of interest: filter on the server, not after receiving every pod
    # of the cluster (the handlers filter the same labels again).
    s.watching.label_selectors["", "v1", "pods"] = f"{MANAGED_BY_LABEL}=berth,{NAME_LABEL}=registry"
    s.watching.label_selectors["apps", "v1", "deployments"] = f"{MANAGED_BY_LABEL}=berth"
    s.watching.client_timeout = 300
    return s


def connection_info(configuration: Configuration) -> kopf.ConnectionInfo:
    """kopf's credentials from the same Configuration the official client uses (one source of truth)."""
    if configuration.refresh_api_key_hook is not None:
        configuration.refresh_api_key_hook(configuration)  # in-cluster tokens rotate
    token = (configuration.api_key or {}).get("authorization") or (configuration.api_key or {}).get("BearerToken")
    if token and token.lower().startswith("bearer "):
        token = token[7:]
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme="Bearer" if token else None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


async def run(
    configuration: Configuration,
    *,
    agent_image: str,
    namespaces: Collection[str] = (),
    clusterwide: bool = False,
    liveness: str | None = None,
    refresh_interval: float = 60.0,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Event | threading.Event | None = None,
    context: dict[str, Any] | None = None,
    clock: UtcClock | None = None,
) -> None:
    """Run until stop_flag is set (or a signal, when in the main thread).

    context, when given, receives the handlers' Context under "ctx" (tests read its counters). clock: the
    wall clock garbage-collection schedules are read on (tests pass one they set).
    """
    if not clusterwide and not namespaces:
        raise ValueError("name the namespaces to watch, or run cluster-wide")
    kube = Kube(configuration)
    ctx = Context(kube=kube, agent_image=agent_image, refresh_interval=refresh_interval, clock=clock or WallClock())
    if context is not None:
        context["ctx"] = ctx
    registry = make_registry(ctx)

    @kopf.on.login(registry=registry, id="login")
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(configuration)

    try:
        await kopf.operator(
            registry=registry,
            settings=settings(),
            standalone=True,
            clusterwide=clusterwide,
            namespaces=list(namespaces),
            liveness_endpoint=liveness,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        kube.close()
