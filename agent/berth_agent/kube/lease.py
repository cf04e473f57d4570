"""A Registry's coordination.k8s.io/v1 Lease, taken and renewed by one agent at a time
(docs/decisions/0010-replicas-reload-one-at-a-time.md, docs/decisions/0019-garbage-collection-inside-the-pods.md).

`ReloadLease` (the reload Lease `<registry>-reload`, and the GC Lease `<registry>-gc`: berth_api.leases), created
by the operator; the agent's Role may only `get` and `update` that one object. Taken with an update that
carries the resourceVersion read (optimistic concurrency: of two agents racing, one gets 409 and waits). A
holder that stopped updating it for its leaseDurationSeconds, measured on OUR clock from when we first saw that
record (as client-go's leader election does: node clocks may differ), is taken over: no agent can block the
others for longer than the bound it wrote.

Blocking calls: run in a worker thread.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from berth_api.timestamps import format_time

from .api import describe_api_error
from .client import ApiClient, api_path

log = logging.getLogger(__name__)

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"


class LeaseError(Exception):
    """The Lease could not be read or written (names the HTTP status only)."""


class ReloadLease:
    def __init__(self, api_client: ApiClient, namespace: str, name: str, holder: str, *, request_timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self._api = api_client
        self.namespace, self.name, self.holder = namespace, name, holder
        self.request_timeout = request_timeout
        self._clock = clock
        self._observed: tuple | None = None  # (holder, renewTime, resourceVersion) last seen
        self._observed_at = 0.0

    def _call(self, method: str, body: dict | None = None) -> dict:
        try:
            return self._api.request(method, api_path(LEASE_PATH, namespace=self.namespace, name=self.name),
                                     body=body, timeout=self.request_timeout)
        except Exception as exc:  # noqa: BLE001 - ApiError or a connection error: described, not quoted
            raise LeaseError(describe_api_error(exc), getattr(exc, "status", None)) from None

    def read(self) -> dict:
        return self._call("GET")

    def try_acquire(self, duration_seconds: float) -> tuple[bool, str | None]:
        """(taken, who holds it otherwise). Raises LeaseError when the API refuses."""
        lease = self.read()
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or None
        record = (holder, spec.get("renewTime"), (lease.get("metadata") or {}).get("resourceVersion"))
        now = self._clock()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = spec.get("leaseDurationSeconds") or 0
        if holder not in (None, self.holder) and now - self._observed_at <= duration:
            return False, holder
        stamp = format_time(precision="microseconds")
        transitions = spec.get("leaseTransitions") or 0
        lease["spec"] = {
            **spec, "holderIdentity": self.holder, "leaseDurationSeconds": int(math.ceil(duration_seconds)),
            "acquireTime": stamp if holder != self.holder else spec.get("acquireTime", stamp), "renewTime": stamp,
            "leaseTransitions": transitions + (1 if holder != self.holder else 0),
        }
        if holder not in (None, self.holder):
            log.warning("taking over a lease from a holder that let it expire",
                        extra={"fields": {"lease": self.name, "holder": holder}})
        try:
            self._call("PUT", lease)
        except LeaseError as exc:
            if exc.args[1] == 409:  # another agent took it between our read and our write
                return False, None
            raise
        return True, None

    def release(self) -> None:
        for _attempt in range(3):
            lease = self.read()
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.holder:
                return
            spec.pop("holderIdentity", None)
            spec["renewTime"] = format_time(precision="microseconds")
            lease["spec"] = spec
            try:
                self._call("PUT", lease)
                return
            except LeaseError as exc:
                if exc.args[1] != 409:
                    raise


__all__ = ["LEASE_PATH", "LeaseError", "ReloadLease"]
