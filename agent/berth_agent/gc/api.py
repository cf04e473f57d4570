"""The GC runner's API side (docs/design.md §4.5): the Registry's status.garbageCollection, and the
renewals of the `<registry>-gc` Lease while a run lasts. Blocking: used from the runner's worker thread.
"""

from __future__ import annotations

import logging
import threading
import time

from ..kube.api import MERGE_PATCH, registry_path
from ..kube.client import ApiClient
from ..kube.lease import LeaseError, ReloadLease

log = logging.getLogger(__name__)

LEASE_SECONDS = 15  # leaseDurationSeconds of the gc Lease
RENEW_SECONDS = 5.0
RENEW_RETRY_SECONDS = 1.0  # after a failed renewal
LOST_MARGIN_SECONDS = 3.0  # give up this long before the Lease would expire: a taker's clock may run ahead


class GcStatusApi:
    """Reads the Registry and merge-patches status.garbageCollection (status subresource). Raises on failure."""

    def __init__(self, api_client: ApiClient, namespace: str, name: str, *, request_timeout: float = 10.0) -> None:
        self._api = api_client
        self.namespace, self.name, self.request_timeout = namespace, name, request_timeout

    def read(self) -> dict:
        return self._api.request("GET", registry_path(self.namespace, self.name), timeout=self.request_timeout)

    def patch(self, gc: dict) -> None:
        self._api.request("PATCH", registry_path(self.namespace, self.name, "status"),
                          body={"status": {"garbageCollection": gc}}, content_type=MERGE_PATCH,
                          timeout=self.request_timeout)


class LeaseKeeper(threading.Thread):
    """Renews the gc Lease every RENEW_SECONDS while the run lasts; sets `lost` (and the run's stop) when
    another holder took it or no renewal worked for (nearly) its duration."""

    def __init__(self, lease: ReloadLease, stop: threading.Event, *, renew_seconds: float = RENEW_SECONDS,
                 lease_seconds: float = LEASE_SECONDS) -> None:
        super().__init__(name="gc-lease", daemon=True)
        self.lease, self.stop_run = lease, stop
        self.renew_seconds, self.lease_seconds = renew_seconds, lease_seconds
        self.lost = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        renewed = time.monotonic()
        wait = self.renew_seconds
        while not self.done.wait(wait):
            try:
                taken, holder = self.lease.try_acquire(self.lease_seconds)
            except LeaseError:
                taken, holder = False, None
            if taken:
                renewed, wait = time.monotonic(), self.renew_seconds
                continue
            if holder is not None or time.monotonic() - renewed >= self.lease_seconds - LOST_MARGIN_SECONDS:
                log.error("gc lease lost", extra={"fields": {"lease": self.lease.name, "holder": holder}})
                self.lost.set()
                self.stop_run.set()
                return
            wait = RENEW_RETRY_SECONDS


__all__ = ["GcStatusApi", "LeaseKeeper", "LEASE_SECONDS", "RENEW_SECONDS"]
