"""SingleObjectWatcher: list, then watch one named object over the Kubernetes API, in a thread of its own.

Idle watch connections get dropped silently by load balancers (docs/upstream.md#k8s-watch-timeouts), so: a
server-side timeoutSeconds ends each watch, after which it is reopened from the last resourceVersion; a client read
timeout catches a connection that died without a word; 410 Gone or a broken connection leads to a fresh list. Errors
back off exponentially (Backoff: capped, jittered) and are counted. The API client (kube/client.py) is blocking: the
loop runs in one thread of its own. The Registry's watcher (registry_api.py) and the mounted Secrets' (secret_api.py)
are its subclasses.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import threading
from typing import Any

from ..core import metrics
from ..core.health import Health
from ..kube.api import WatchErrorEvent, describe_api_error
from ..kube.client import ApiClient, WatchStream
from .change import Emit

log = logging.getLogger(__name__)


class Backoff:
    """Exponential backoff with full jitter in [delay/2, delay], capped; reset after a success."""

    def __init__(self, initial: float = 0.5, cap: float = 10.0, rng: random.Random | None = None) -> None:
        self.initial, self.cap = initial, cap
        self._next = initial
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self.cap, self._next * 2)
        return self._rng.uniform(delay / 2, delay)

    def reset(self) -> None:
        self._next = self.initial


def content_digest(obj: dict) -> str:
    """Digest of what can change the config: the object without status and server bookkeeping."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    relevant = {k: v for k, v in obj.items() if k not in ("status", "metadata")} | {"metadata": meta}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()


class _Gone(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class SingleObjectWatcher:
    """List, then watch one named object (resume, 410 relist, timeouts, backoff) in a thread of its own.

    Subclasses say what the object is (`kind`, the log field), where its kind is listed (`_collection_path`) and
    what to emit (`_offer`, `_offer_state`): RegistryApiWatcher in registry_api.py, SecretApiWatcher in
    secret_api.py.
    """

    name = "object-api"
    kind = "object"  # in messages: "cannot read KIND NS/NAME: ..."
    log_key = "object"  # the log field naming the object

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        name: str,
        health: Health,
        *,
        timeout_seconds: int = 60,
        read_timeout: float | None = None,
        connect_timeout: float = 10.0,
        backoff_initial: float = 0.5,
        backoff_cap: float = 10.0,
    ) -> None:
        self._api = api_client
        self.namespace, self.object_name = namespace, name
        self.health = health
        self.timeout_seconds = timeout_seconds
        # Longer than the server's own timeout: only a connection that died silently trips it.
        self.read_timeout = read_timeout if read_timeout is not None else timeout_seconds + 15.0
        self.connect_timeout = connect_timeout
        self._backoff = Backoff(backoff_initial, backoff_cap)
        self._stop = threading.Event()
        self._stream: WatchStream | None = None  # the open watch, so stop() can break a blocked read
        self._last: tuple[str, str] | None = None  # ("ok", content digest) or ("error", message): last emitted
        self.resource_version: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.object_name}"

    # ---- asyncio side ----

    async def run(self, emit: Emit) -> None:
        self.health.register(
            self.name, max_silence_seconds=self.timeout_seconds + self.read_timeout + self._backoff.cap + 30
        )
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        self._stop.clear()

        def finish(exc: BaseException | None) -> None:
            if not finished.done():
                finished.set_exception(exc) if exc else finished.set_result(None)

        def target() -> None:
            error: BaseException | None = None
            try:
                self._watch_forever(emit)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                error = exc
            try:
                loop.call_soon_threadsafe(finish, error)
            except RuntimeError:
                pass  # loop closed

        # A daemon thread, not the default executor: after a cancel the thread may sit in a read until it
        # notices the stop, and interpreter shutdown must not wait for it.
        thread = threading.Thread(target=target, name=f"{self.name}-watch", daemon=True)
        thread.start()
        log.info(f"watching {self.kind.lower()}", extra={"fields": {self.log_key: self.ref}})
        try:
            await finished
        finally:
            self.stop()
            self.health.unregister(self.name)

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()

    # ---- thread side ----

    def _watch_forever(self, emit: Emit) -> None:
        while not self._stop.is_set():
            self.health.beat(self.name)
            try:
                if self.resource_version is None:
                    self._list(emit)
                self._watch_once(emit)
                metrics.watch_restarts_total.labels(source=self.name).inc()  # ended by timeoutSeconds: reopen
            except Exception as exc:  # noqa: BLE001 - every failure of the loop is retried, never fatal
                if self._stop.is_set():
                    return
                if isinstance(exc, _Gone) or getattr(exc, "status", None) == 410:  # as an event or as the answer
                    metrics.watch_restarts_total.labels(source=self.name).inc()
                    log.info("watch expired (410 Gone), listing again", extra={"fields": {self.log_key: self.ref}})
                    self.resource_version = None
                    continue
                self.resource_version = None  # a broken connection may have lost events: list again
                metrics.watch_errors_total.labels(source=self.name).inc()
                delay = self._backoff.next_delay()
                log.warning(
                    f"{self.kind.lower()} watch failed, retrying",
                    extra={"fields": {self.log_key: self.ref, "error": describe_api_error(exc),
                                      "retry_seconds": round(delay, 2)}},
                )
                self._stop.wait(delay)

    def _list(self, emit: Emit) -> None:
        try:
            listing = self._api.request("GET", self._collection_path(), query=self._query(),
                                        timeout=(self.connect_timeout, self.read_timeout))
        except Exception as exc:
            # Tell the pipeline (it reports it); the watch loop retries with backoff.
            self._offer_state(emit, ("error", f"cannot read {self.kind} {self.ref}: {describe_api_error(exc)}"), None)
            raise
        self._backoff.reset()
        self.health.beat(self.name)
        items = [o for o in listing.get("items") or [] if (o.get("metadata") or {}).get("name") == self.object_name]
        self.resource_version = (listing.get("metadata") or {}).get("resourceVersion")
        if items:
            self._offer(emit, items[0])
        else:
            self._offer_state(emit, ("error", f"{self.kind} {self.ref} not found"), None)

    def _query(self, **more: Any) -> dict[str, Any]:
        # By name: RBAC can scope that to the one object (docs/upstream.md#k8s-rbac-resource-names).
        return {"fieldSelector": f"metadata.name={self.object_name}", **more}

    def _watch_once(self, emit: Emit) -> None:
        query = self._query(watch=True, timeoutSeconds=self.timeout_seconds, allowWatchBookmarks=True,
                            resourceVersion=self.resource_version or None)
        stream = self._api.stream(self._collection_path(), query,
                                  timeout=(self.connect_timeout, self.read_timeout))
        self._stream = stream
        try:
            if self._stop.is_set():  # stop() ran before the stream was published
                return
            self.health.beat(self.name)  # a (re)opened watch is progress
            for event in stream:
                if self._stop.is_set():
                    return
                self._handle_event(emit, event)
        finally:
            self._stream = None
            stream.close()

    def _handle_event(self, emit: Emit, event: dict) -> None:
        self.health.beat(self.name)
        metrics.watch_events_total.labels(source=self.name).inc()
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise WatchErrorEvent(f"watch error event {obj.get('code')} {obj.get('reason') or ''}".strip())
        meta = obj.get("metadata") or {}
        if meta.get("resourceVersion"):
            self.resource_version = meta["resourceVersion"]
        if kind == "BOOKMARK" or meta.get("name") != self.object_name:
            return  # a bookmark only moves the resourceVersion; other objects: a server ignoring fieldSelector
        self._backoff.reset()
        if kind == "DELETED":
            self._offer_state(emit, ("error", f"{self.kind} {self.ref} was deleted"), None)
        else:
            self._offer(emit, obj)

    # ---- what a subclass says -------------------------------------------------------------------------------

    def _collection_path(self) -> str:
        """Where the object's kind is listed and watched in its namespace."""
        raise NotImplementedError

    def _offer(self, emit: Emit, obj: dict) -> None:
        self._offer_state(emit, ("ok", content_digest(obj)), obj)

    def _offer_state(self, emit: Emit, state: tuple[str, str], obj: dict | None) -> None:
        """Emit `state` (("ok", digest) with the object, or ("error", message)) unless it is the last one."""
        raise NotImplementedError


__all__ = ["Backoff", "SingleObjectWatcher", "content_digest"]
