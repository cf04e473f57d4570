"""Replicas reload one at a time, each out of its Service first (docs/design.md §4.2, "Coordination").

`ReloadLease`: the Registry's coordination.k8s.io/v1 Lease `<registry>-reload`, created by the operator; the
agent's Role may only `get` and `update` that one object. Taken with an update that carries the
resourceVersion read (optimistic concurrency: of two agents racing, one gets 409 and waits). A holder that
stopped updating it for its leaseDurationSeconds, measured on OUR clock from when we first saw that record
(as client-go's leader election does: node clocks may differ), is taken over: no agent can block the others
for longer than the bound it wrote.

`ReplicaTurn`: around a registry restart in a pod with siblings: take the Lease (reporting "waiting" on
status while another pod holds it), turn /readyz false and wait `leave_seconds` (the readiness probe and the
endpoints catching up: then no new connection comes to this pod), restart, turn /readyz true, wait
`leave_seconds` again (so the next pod never leaves while this one is not back yet), release the Lease.

Blocking calls: runs in the applier's worker thread.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..core.health import Health
from ..sources.registry_api import describe_api_error

log = logging.getLogger(__name__)

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
POLL_SECONDS = 0.2  # while another pod holds the Lease (with jitter, so waiters do not move in step)
DEFAULT_LEAVE_SECONDS = 5.0


def lease_name(registry: str) -> str:
    """`<registry>-reload`: the operator's builders name it the same (berth_operator.builders.names)."""
    return f"{registry}-reload"


def micro_time(ts: float | None = None) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    moment = datetime.fromtimestamp(time.time() if ts is None else ts, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseError(Exception):
    """The Lease could not be read or written (names the HTTP status only)."""


class ReloadLease:
    def __init__(self, api_client: Any, namespace: str, name: str, holder: str, *, request_timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self._api = api_client
        self.namespace, self.name, self.holder = namespace, name, holder
        self.request_timeout = request_timeout
        self._clock = clock
        self._observed: tuple | None = None  # (holder, renewTime, resourceVersion) last seen
        self._observed_at = 0.0

    def _call(self, method: str, body: dict | None = None) -> dict:
        try:
            response = self._api.call_api(
                LEASE_PATH, method, path_params={"namespace": self.namespace, "name": self.name},
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                body=body, auth_settings=["BearerToken"], response_types_map={},
                _preload_content=False, _request_timeout=self.request_timeout,
            )
        except Exception as exc:  # noqa: BLE001 - ApiException or a connection error: described, not quoted
            raise LeaseError(describe_api_error(exc), getattr(exc, "status", None)) from None
        try:
            return json.loads(response.data or b"{}")
        finally:
            response.release_conn()

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
        stamp = micro_time()
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
            spec["renewTime"] = micro_time()
            lease["spec"] = spec
            try:
                self._call("PUT", lease)
                return
            except LeaseError as exc:
                if exc.args[1] != 409:
                    raise


@dataclass
class TurnTimings:
    lease_wait: float = 0.0
    drain_wait: float = 0.0
    stopped: bool = False


class ReplicaTurn:
    """One restart at a time across the Registry's pods, each out of its Service while it restarts."""

    def __init__(self, lease: ReloadLease, health: Health, *, leave_seconds: float = DEFAULT_LEAVE_SECONDS,
                 on_wait: Callable[[str | None], None] = lambda _message: None):
        self.lease, self.health, self.leave_seconds = lease, health, leave_seconds
        self.on_wait = on_wait  # a status line while another pod holds the Lease; None when the wait ended
        self._holding = False
        self._began = 0.0
        self._taken_at = 0.0  # wall clock, for the "reload turn" log line

    def begin(self, stop: threading.Event, *, hold_seconds: float) -> TurnTimings:
        """Take the Lease (waiting for it), then leave the Service. `hold_seconds` bounds the hold."""
        timings = TurnTimings()
        started = time.monotonic()
        reported: str | None = None
        while True:
            try:
                taken, holder = self.lease.try_acquire(hold_seconds + 2 * self.leave_seconds)
            except LeaseError as exc:
                # An API we cannot reach must not stop reloads for good: after the bound, go alone.
                taken, holder = False, None
                if time.monotonic() - started > hold_seconds:
                    log.warning("reload lease unavailable, restarting without it",
                                extra={"fields": {"lease": self.lease.name, "error": exc.args[0]}})
                    break
            if taken:
                self._holding = True
                self._taken_at = time.time()
                break
            if holder is not None and holder != reported:
                reported = holder
                self.on_wait(f"waiting for its turn to reload: pod {holder} holds Lease {self.lease.name} "
                             f"(since {micro_time()})")
            if stop.wait(POLL_SECONDS * random.uniform(0.5, 1.5)):
                timings.stopped = True
                break
        if reported is not None:
            self.on_wait(None)
        timings.lease_wait = round(time.monotonic() - started, 4)
        self._began = time.monotonic()
        if timings.stopped:
            self._release()
            return timings
        # Out of the Service before the registry stops listening: /readyz fails, the kubelet's next probe sees
        # it, the endpoints drop the pod; after leave_seconds no new connection is sent here.
        self.health.set_ready(False)
        stop.wait(self.leave_seconds)
        timings.drain_wait = round(time.monotonic() - self._began, 4)
        return timings

    def end(self, stop: threading.Event) -> None:
        """Back into the Service; hand the turn on only once the endpoints could have taken this pod back."""
        self.health.set_ready(True)
        stop.wait(self.leave_seconds)
        released_at = time.time()  # before the release: nobody else can have it before this moment
        held = self._holding
        self._release()
        log.info("reload turn", extra={"fields": {
            "lease": self.lease.name, "held": held, "taken_at": round(self._taken_at, 4),
            "released_at": round(released_at, 4), "seconds": round(time.monotonic() - self._began, 4)}})

    def _release(self) -> None:
        if not self._holding:
            return
        self._holding = False
        try:
            self.lease.release()
        except LeaseError as exc:  # it expires by itself after its bound
            log.warning("cannot release the reload lease", extra={"fields": {"lease": self.lease.name,
                                                                            "error": exc.args[0]}})


__all__ = ["DEFAULT_LEAVE_SECONDS", "LeaseError", "ReloadLease", "ReplicaTurn", "TurnTimings", "lease_name",
           "micro_time"]
