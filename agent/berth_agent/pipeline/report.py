"""Reporting what the agent did: per-pod record on the Registry status and Events (API), or log lines (file mode).

A failure to report is logged and counted (berth_agent_report_errors_total), never raised: reporting must not
stop the pipeline from keeping the registry configured. Nothing here logs a request or response body; log
lines carry only the HTTP status and reason of a failed call.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from typing import Protocol

from berth_api import API_VERSION, KIND
from berth_api.timestamps import format_time

from ..core import metrics
from ..kube.api import MERGE_PATCH, describe_api_error, registry_path
from ..kube.client import ApiClient, api_path
from ..sources.pvc import PvcState

log = logging.getLogger(__name__)

COMPONENT = "berth-agent"
MAX_EVENT_MESSAGE = 1024  # what the events.k8s.io API allows for a note; longer is cut


class Reporter(Protocol):
    # applied and failed: True when the record reached status (or needs no write); False: the API refused it
    # identity: Rendered.identity of what the registry serves (status configHash)
    async def applied(self, identity: str, generation: int | None) -> bool: ...  # + trust= with token auth

    async def failed(self, error: str, generation: int | None) -> bool: ...  # error already secret-free

    async def event(self, reason: str, message: str, *, warning: bool = False) -> None: ...

    async def data_path(self, state: PvcState | None) -> None: ...  # None: no data path (not filesystem storage)

    async def waiting(self, message: str | None) -> None: ...  # waiting for its turn to reload; None: not any more

    async def upstream(self, record: dict | None) -> None: ...  # status.agents.<pod>.upstream; None removes it

    async def notifications(self, record: dict | None) -> None: ...  # status.agents.<pod>.notifications (merge)


class LogReporter:
    """File mode, outside Kubernetes: what a pod reports to status and Events, as DEBUG log lines.

    The pipeline's own line for each action (`written`, `restarted`, `rolled back`, `failed`) already carries the
    config hash and the error; at INFO these would repeat it, two or three lines per action, where a pod logs one.
    """

    def __init__(self, subject: str = "") -> None:
        self.subject = subject  # e.g. the registry file's path, so a line says what it is about

    async def applied(self, identity: str, generation: int | None, trust: dict | None = None) -> bool:
        log.debug("config applied", extra={"fields": {"registry": self.subject, "config_hash": identity,
                                                        "generation": generation, "trust": trust}})
        return True

    async def failed(self, error: str, generation: int | None) -> bool:
        log.debug("config not applied", extra={"fields": {"registry": self.subject, "error": error,
                                                            "generation": generation}})
        return True

    async def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        log.debug(message, extra={"fields": {"registry": self.subject, "reason": reason, "type": _type(warning)}})

    async def data_path(self, state: PvcState | None) -> None:
        pass  # outside Kubernetes there is no status; the berth_agent_pvc_* metrics carry the figures

    async def waiting(self, message: str | None) -> None:
        if message:
            log.info(message, extra={"fields": {"registry": self.subject}})

    async def upstream(self, record: dict | None) -> None:
        log.debug("upstream checked", extra={"fields": {"registry": self.subject, "upstream": record}})

    async def notifications(self, record: dict | None) -> None:
        log.debug("notification endpoints", extra={"fields": {"registry": self.subject, "notifications": record}})


def data_path_record(state: PvcState | None, now: float) -> dict | None:
    """status.agents.<pod>.dataPath for a probe's state; None when there is no usable data path to describe."""
    if state is None or state.capacity_bytes is None:
        return None
    return {"mounted": state.mounted, "capacityBytes": state.capacity_bytes, "freeBytes": state.free_bytes,
            "checkedAt": format_time(now)}


def data_path_moved(old: dict | None, new: dict | None, *, fraction: float = 0.01) -> bool:
    """Worth a status write: the record appeared or went, the volume changed, or free space moved by 1% of it."""
    if old is None or new is None:
        return old is not new
    if (old["mounted"], old["capacityBytes"]) != (new["mounted"], new["capacityBytes"]):
        return True
    return abs((old["freeBytes"] or 0) - (new["freeBytes"] or 0)) >= fraction * max(new["capacityBytes"], 1)


def _type(warning: bool) -> str:
    return "Warning" if warning else "Normal"


class ApiReporter:
    """Writes status.agents.<pod> (merge patch of the pod's own key, status subresource) and core/v1 Events.

    Identical events within `coalesce_seconds` are folded into one Event whose count goes up (as the kubelet
    and client-go's recorder do), so an input broken for an hour is one Event with a count, not hundreds.
    An identical status record is not written again within `refresh_seconds`.
    """

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        name: str,
        pod_name: str,
        *,
        request_timeout: float = 10.0,
        coalesce_seconds: float = 600.0,
        refresh_seconds: float = 600.0,
        clock=time.time,
    ) -> None:
        self._api = api_client
        self.namespace, self.name, self.pod_name = namespace, name, pod_name
        self.request_timeout = request_timeout
        self.coalesce_seconds = coalesce_seconds
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._uid: str | None = None
        self._last_record: tuple[tuple, float] | None = None  # (what was written, when)
        self._last_data_path: tuple[dict | None, float] | None = None  # (dataPath written, when)
        self._recent_events: dict[tuple[str, str, str], dict] = {}  # (type, reason, message) -> name, count, last
        self._lock = threading.Lock()  # the calls run in worker threads; a caller may overlap them

    # ---- status ----

    async def applied(self, identity: str, generation: int | None, trust: dict | None = None) -> bool:
        # waiting: null too: a record left by an agent that died while waiting for its turn goes with this one.
        # trust: null removes a record of token auth's trust when token auth is gone (merge patch).
        record = {"configHash": identity, "appliedAt": None, "observedGeneration": generation, "error": None,
                  "waiting": None, "trust": trust or None}
        key = ("applied", identity, generation, tuple(sorted((trust or {}).items())))
        return await asyncio.to_thread(self._write_record, record, key)

    async def failed(self, error: str, generation: int | None) -> bool:
        # Only `error`: configHash, appliedAt and observedGeneration keep describing the config that still runs
        # (the last good one), which is what status.agents.<pod> records.
        return await asyncio.to_thread(self._write_record, {"error": error}, ("failed", error))

    async def data_path(self, state: PvcState | None) -> None:
        await asyncio.to_thread(self._write_data_path, state)

    async def waiting(self, message: str | None) -> None:
        """status.agents.<pod>.waiting while another pod holds the reload Lease (null removes it)."""
        await asyncio.to_thread(self._write_waiting, message)

    async def upstream(self, record: dict | None) -> None:
        """status.agents.<pod>.upstream (the upstream watch writes only what changed, or every 10 minutes)."""
        await asyncio.to_thread(self._write_upstream, record)

    def _write_upstream(self, record: dict | None) -> None:
        with self._lock:
            self._patch_status({"upstream": record}, "status")

    async def notifications(self, record: dict | None) -> None:
        """status.agents.<pod>.notifications, merged by endpoint name (a name set to null is removed; the outbox
        decides when a write is worth it)."""
        await asyncio.to_thread(self._write_notifications, record)

    def _write_notifications(self, record: dict | None) -> None:
        with self._lock:
            self._patch_status({"notifications": record}, "status")

    async def read_only_for(self, request_id: str | None) -> bool:
        """status.agents.<pod>.readOnlyFor: the GC request this pod's registry serves read-only for (null: it
        serves the spec's readonly again). True when written; the caller retries otherwise."""
        return await asyncio.to_thread(self._write_read_only_for, request_id)

    def _write_read_only_for(self, request_id: str | None) -> bool:
        with self._lock:
            return self._patch_status({"readOnlyFor": request_id}, "status")

    def _write_waiting(self, message: str | None) -> None:
        with self._lock:
            self._patch_status({"waiting": message}, "status")

    def _write_data_path(self, state: PvcState | None) -> None:
        # The probe runs every 30 s in every pod: write only what a reader would notice, so N replicas do not
        # patch the Registry N times a minute for a byte of free space.
        with self._lock:
            now = self._clock()
            record = data_path_record(state, now)
            if self._last_data_path is not None:
                last, when = self._last_data_path
                if not data_path_moved(last, record) and now - when < self.refresh_seconds:
                    return
            elif record is None:
                return  # nothing written before, nothing to remove
            if self._patch_status({"dataPath": record}, "status"):
                self._last_data_path = (record, now)

    def _write_record(self, record: dict, key: tuple) -> bool:
        with self._lock:
            return self._write_record_locked(record, key)

    def _write_record_locked(self, record: dict, key: tuple) -> bool:
        now = self._clock()
        if self._last_record and self._last_record[0] == key and now - self._last_record[1] < self.refresh_seconds:
            return True  # same record written recently: nothing new to say
        if "appliedAt" in record:
            record["appliedAt"] = format_time(now, precision="milliseconds")
        if self._patch_status(record, "status"):
            self._last_record = (key, now)
            return True
        return False

    def _patch_status(self, record: dict, kind: str) -> bool:
        """Merge-patch status.agents.<pod> with `record` (this pod's key only); False when the API refused."""
        body = {"status": {"agents": {self.pod_name: record}}}
        try:
            self._api.request("PATCH", registry_path(self.namespace, self.name, "status"), body=body,
                              content_type=MERGE_PATCH, timeout=self.request_timeout)
        except Exception as exc:  # noqa: BLE001 - reporting never raises into the pipeline
            if getattr(exc, "status", None) == 404:
                self._uid = None  # the Registry is gone (or being recreated with a new uid)
            self._count_failure(kind, exc)
            return False
        return True

    # ---- events ----

    async def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        await asyncio.to_thread(self._write_event, reason, message[:MAX_EVENT_MESSAGE], _type(warning))

    def _write_event(self, reason: str, message: str, event_type: str) -> None:
        with self._lock:
            self._write_event_locked(reason, message, event_type)

    def _write_event_locked(self, reason: str, message: str, event_type: str) -> None:
        now = self._clock()
        self._forget_old_events(now)
        key = (event_type, reason, message)
        seen = self._recent_events.get(key)
        try:
            if seen is not None:
                try:
                    self._bump_event(seen, now)
                    return
                except Exception as exc:  # noqa: BLE001
                    if getattr(exc, "status", None) != 404:
                        raise
                    # The Event expired (the API server keeps them for an hour by default): write a new one.
            self._recent_events[key] = self._create_event(reason, message, event_type, now)
        except Exception as exc:  # noqa: BLE001 - reporting never raises into the pipeline
            self._recent_events.pop(key, None)
            self._count_failure("event", exc)

    def _create_event(self, reason: str, message: str, event_type: str, now: float) -> dict:
        name = f"{self.name}.{time.time_ns():x}{secrets.token_hex(2)}"  # client-go style: <object>.<unique>
        stamp = format_time(now)
        involved = {"apiVersion": API_VERSION, "kind": KIND, "name": self.name, "namespace": self.namespace}
        uid = self._registry_uid()
        if uid:
            involved["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": self.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": event_type,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": COMPONENT, "host": self.pod_name},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.pod_name,
        }
        self._events_call("POST", "/api/v1/namespaces/{namespace}/events", body, "application/json")
        return {"name": name, "count": 1, "last": now}

    def _bump_event(self, seen: dict, now: float) -> None:
        body = {"count": seen["count"] + 1, "lastTimestamp": format_time(now)}
        # Merge patch: only the count and the time move.
        self._events_call("PATCH", "/api/v1/namespaces/{namespace}/events/{name}", body, MERGE_PATCH, name=seen["name"])
        seen["count"] += 1
        seen["last"] = now

    def _events_call(self, method: str, path: str, body: dict, content_type: str, **path_params: str) -> None:
        self._api.request(method, api_path(path, namespace=self.namespace, **path_params), body=body,
                          content_type=content_type, timeout=self.request_timeout)

    def _forget_old_events(self, now: float) -> None:
        for key in [k for k, v in self._recent_events.items() if now - v["last"] >= self.coalesce_seconds]:
            del self._recent_events[key]

    def _registry_uid(self) -> str | None:
        if self._uid is None:
            try:
                obj = self._api.request("GET", registry_path(self.namespace, self.name),
                                        timeout=self.request_timeout)
                self._uid = (obj.get("metadata") or {}).get("uid")
            except Exception as exc:  # noqa: BLE001 - the Event is still useful without the uid
                self._count_failure("lookup", exc)
        return self._uid

    def _count_failure(self, kind: str, exc: BaseException) -> None:
        metrics.report_errors_total.labels(kind=kind).inc()
        log.warning(
            "cannot report to the API",
            extra={"fields": {"registry": f"{self.namespace}/{self.name}", "kind": kind,
                              "error": describe_api_error(exc)}},
        )


__all__ = ["ApiReporter", "LogReporter", "Reporter"]
