"""Leader election on a coordination.k8s.io/v1 Lease: one berth-operator acts, the others stand by.

The algorithm is client-go's (k8s.io/client-go/tools/leaderelection), on our Kube client:
- A candidate reads the Lease every `retry_period`. It takes the Lease when there is none, when it is
  released (no holderIdentity), or when the record has not changed for `lease_duration` seconds as
  measured on the candidate's own monotonic clock from the moment it first saw that record (so clock skew
  between nodes does not matter). Every write is a JSON patch that first tests metadata.resourceVersion:
  of two candidates racing for one record, exactly one wins.
- The leader renews every `retry_period`. If no renewal has succeeded for `renew_deadline` seconds it stops
  acting at once (the caller cancels the operator) and may no longer write (`may_write`). renew_deadline <
  lease_duration, so a leader has stopped before any standby can take over.
- A leader that stops on purpose (SIGTERM: a rollout, a drain) releases the Lease: the standby takes over at
  its next read, within retry_period.

Takeover bound after the leader dies without releasing: lease_duration + retry_period after its last
renewal (15 s + 2 s with the defaults), plus the new leader's start (kopf lists the Registries).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from berth_api.timestamps import format_time

from ..core import metrics
from ..kube.client import Kube, KubeError

logger = logging.getLogger("berth.operator.leader")

LEASE = ("coordination.k8s.io/v1", "Lease")
DEFAULT_LEASE_NAME = "berth-operator"


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    identity: str
    name: str = DEFAULT_LEASE_NAME
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs 0 < retry period < renew deadline < lease duration")


class MissingLeaseNamespace(Exception):
    """The leader-election namespace does not exist: nothing can be elected until it does (or is changed)."""

    def __init__(self, namespace: str, name: str):
        super().__init__(
            f"cannot take the leader Lease {namespace}/{name}: the namespace {namespace!r} does not exist. "
            f"Install the operator's namespace and RBAC (kubectl apply -k deploy), or pass "
            f"--leader-election-namespace with a namespace that exists, or --no-leader-elect where no other "
            f"operator runs. Standing by; retrying every few seconds.")


class LeaderElector:
    """Take and keep the Lease. Synchronous API calls run in worker threads."""

    def __init__(self, kube: Kube, settings: LeaseSettings, *, clock: Callable[[], float] = time.monotonic):
        self.kube = kube
        self.settings = settings
        self.clock = clock  # monotonic seconds (tests pass their own)
        self._observed: tuple[Any, ...] | None = None  # the last Lease record seen
        self._observed_at = 0.0  # monotonic time it was first seen
        self._standing_since: float | None = None  # monotonic time a record held by another was first seen
        self._renewed_at: float | None = None  # monotonic time of the last successful write while leading
        self._held: dict[str, Any] | None = None  # the Lease as our last write left it (renewals start from it)
        self._writing = threading.Lock()  # one attempt or release at a time (they run in worker threads)
        self._last_problem: str | None = None  # the failure last logged: a standby retrying says it once

    # ---- the fence

    def leading(self) -> bool:
        """True while this process holds the Lease and renewed it within renew_deadline."""
        return self._renewed_at is not None and self.clock() - self._renewed_at < self.settings.renew_deadline

    def may_write(self) -> bool:  # for Kube(may_write=...): no write from a leader that lost its Lease
        return self.leading()

    # ---- one attempt

    def _lease_body(self, *, acquire_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": max(1, round(self.settings.lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": format_time(precision="microseconds"),
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        """One read and at most one write; True when this process holds the Lease afterwards."""
        with self._writing:
            return self._try_acquire_or_renew()

    def _try_acquire_or_renew(self) -> bool:
        s = self.settings
        started = self.clock()
        if self._held is not None and self.leading() and self._renew(self._held, started):
            return True
        lease = self.kube.get(*LEASE, s.namespace, s.name)
        if lease is None:
            now = format_time(precision="microseconds")
            try:
                self._held = self.kube.create({"apiVersion": LEASE[0], "kind": LEASE[1],
                                  "metadata": {"name": s.name, "namespace": s.namespace},
                                  "spec": self._lease_body(acquire_time=now, transitions=0)})
            except KubeError as exc:
                if exc.status == 409:  # another candidate created it first
                    return False
                if exc.status == 404:  # a create answers 404 only when its namespace does not exist
                    raise MissingLeaseNamespace(s.namespace, s.name) from None
                raise
            self._renewed_at = started
            return True
        spec: Mapping[str, Any] = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"),
                  spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, started
        holder = spec.get("holderIdentity") or ""
        mine = holder == s.identity
        duration = float(spec.get("leaseDurationSeconds") or s.lease_duration)
        if holder and not mine and started < self._observed_at + duration:
            self._renewed_at = self._held = None  # held by another, not expired by our own clock: not ours (any more)
            if self._standing_since is None:
                self._standing_since = started
            return False
        if not holder and not self._stood_by(2 * s.retry_period) and started < self._observed_at + 2 * s.retry_period:
            # Released (a leader stopping): a standby that saw it held takes it at its next read. A process that
            # has only just started (the pod a rollout made in place of the leader) leaves it two retry periods,
            # in each of which the standby tries once; it takes the Lease after that, if still free. Without,
            # the newcomer's first read could come before the standby's, which then waited behind a cold start.
            # "Just started" includes a newcomer that saw the leader's last moments (held, then released within
            # two retry periods): a standby has stood by longer than that.
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        body = self._lease_body(
            acquire_time=(spec.get("acquireTime") if mine and spec.get("acquireTime")
                          else format_time(precision="microseconds")),
            transitions=transitions if mine else transitions + 1,
        )
        ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": lease["metadata"]["resourceVersion"]},
               {"op": "replace", "path": "/spec", "value": body}]
        try:
            self._held = self.kube.patch(*LEASE, s.namespace, s.name, ops, json_patch=True)
        except KubeError as exc:
            if exc.status in (409, 422):  # someone wrote first: read again next round
                self._held = None
                return False
            raise
        if not mine:
            logger.info("took the leader Lease %s/%s from %r", s.namespace, s.name, holder or None)
        self._renewed_at = started
        return True

    def _stood_by(self, at_least: float) -> bool:
        """Whether this process saw the Lease held by another at least `at_least` seconds before the record now
        observed (a standby, not a newcomer that arrived as the leader left)."""
        return self._standing_since is not None and self._observed_at - self._standing_since >= at_least

    def _renew(self, held: Mapping[str, Any], started: float) -> bool:
        """The leader's renewal in one request, as client-go's: the Lease as our last write left it, guarded by its
        resourceVersion. False when it changed meanwhile (then it is read again, the slow path); under a loaded API
        server every request a renewal saves brings it further from the renew deadline."""
        spec: Mapping[str, Any] = held.get("spec") or {}
        body = self._lease_body(acquire_time=spec.get("acquireTime") or format_time(precision="microseconds"),
                                transitions=int(spec.get("leaseTransitions") or 0))
        ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": held["metadata"]["resourceVersion"]},
               {"op": "replace", "path": "/spec", "value": body}]
        try:
            self._held = self.kube.patch(*LEASE, self.settings.namespace, self.settings.name, ops, json_patch=True)
        except KubeError as exc:
            if exc.status in (404, 409, 422):  # written or deleted meanwhile: read it
                self._held = None
                return False
            raise
        self._renewed_at = started
        return True

    def release(self) -> None:
        """Give the Lease up (only if still ours), so a standby takes over at its next read."""
        s = self.settings
        # After any renewal still running in a worker thread (a cancelled task does not stop its thread).
        with self._writing:
            if self._renewed_at is None:
                return
            self._renewed_at = self._held = None
            metrics.LEADER.set(0)
            for _attempt in range(3):
                try:
                    lease = self.kube.get(*LEASE, s.namespace, s.name)
                    if lease is None or (lease.get("spec") or {}).get("holderIdentity") != s.identity:
                        return
                    ops = [{"op": "test", "path": "/metadata/resourceVersion",
                            "value": lease["metadata"]["resourceVersion"]},
                           {"op": "replace", "path": "/spec", "value": {
                               "leaseDurationSeconds": 1, "renewTime": format_time(precision="microseconds"),
                               "leaseTransitions": (lease["spec"].get("leaseTransitions") or 0)}}]
                    self.kube.patch(*LEASE, s.namespace, s.name, ops, json_patch=True)
                    logger.info("released the leader Lease %s/%s", s.namespace, s.name)
                    return
                except KubeError as exc:
                    if exc.status in (409, 422):  # written meanwhile: read again
                        continue
                    logger.warning("could not release the leader Lease %s/%s: %s", s.namespace, s.name, exc)
                    return  # it expires on its own
            logger.warning("could not release the leader Lease %s/%s: it kept changing", s.namespace, s.name)

    # ---- loops

    def attempt(self) -> bool:
        """One attempt, in the calling thread; a failure (an API outage: keep trying, a leader's deadline still runs
        out) is logged once per kind, not every retry period."""
        s = self.settings
        try:
            took = self.try_acquire_or_renew()
        except Exception as exc:
            problem = str(exc)
            if problem != self._last_problem:
                if isinstance(exc, MissingLeaseNamespace):
                    logger.error("%s", problem)
                else:
                    logger.warning("leader Lease %s/%s: %s", s.namespace, s.name, problem)
            self._last_problem = problem
            return False
        if self._last_problem is not None:
            logger.info("leader Lease %s/%s can be read and written again", s.namespace, s.name)
            self._last_problem = None
        return took

    async def _attempt(self) -> bool:
        return await asyncio.to_thread(self.attempt)

    async def acquire(self) -> None:
        """Return once this process is the leader (stand by until then)."""
        s = self.settings
        logger.info("standing by for the leader Lease %s/%s as %s", s.namespace, s.name, s.identity)
        while not await self._attempt():
            await asyncio.sleep(s.retry_period)
        metrics.LEADER.set(1)
        logger.info("leading: holder of the Lease %s/%s as %s", s.namespace, s.name, s.identity)

    async def keep(self) -> None:
        """Renew until a renewal has failed for renew_deadline; then return (leadership is lost).

        The renewals run in a thread of their own, not from the event loop: at 1000 Registries kopf's start keeps
        the loop busy for seconds at a time, and a renewal that waited for it missed the renew deadline and gave
        leadership up mid-converge (docs/benchmarks.md)."""
        s = self.settings
        loop = asyncio.get_running_loop()
        lost = asyncio.Event()
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(s.retry_period):
                self.attempt()
                if not self.leading():
                    try:
                        loop.call_soon_threadsafe(lost.set)
                    except RuntimeError:  # the loop closed meanwhile: nobody is waiting
                        pass
                    return

        thread = threading.Thread(target=renew, daemon=True, name="berth-leader-renewal")
        thread.start()
        try:
            await lost.wait()
        finally:
            stop.set()  # and no renewal after keep() ends: the caller releases, or a new elector takes over
            await asyncio.to_thread(thread.join, s.renew_deadline)
        metrics.LEADER.set(0)
        logger.error("lost the leader Lease %s/%s: no renewal for %.0f s", s.namespace, s.name, s.renew_deadline)
