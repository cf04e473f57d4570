"""RegistryApiWatcher: `--registry NAMESPACE/NAME`, the agent's own Registry over the Kubernetes API.

List, then watch that single object (fieldSelector=metadata.name=NAME, which RBAC can scope to the name,
docs/upstream.md#k8s-rbac-resource-names) from the list's resourceVersion. Idle watch connections get dropped
silently by load balancers (docs/upstream.md#k8s-watch-timeouts), so: a server-side timeoutSeconds ends each watch,
after which it is reopened from the last resourceVersion; a client read timeout catches a connection that died
without a word; 410 Gone or a broken connection leads to a fresh list. Errors back off exponentially (capped,
jittered) and are counted. The API client is blocking: the loop runs in one thread of its own.

The list/watch loop is kube_watch.SingleObjectWatcher, which secret_api.SecretApiWatcher shares for the
mounted Secrets.

Emits Change("registry", registry=obj) when the object's content changes. Changes to `status` alone (every
agent's own status patch, the operator's conditions) and to resourceVersion/managedFields are not emitted:
they cannot change the rendered config, and emitting them would make N agents wake each other N times. The
exception is the garbage-collection keys an agent acts on (status_digest: the request, the runner's
`active`, the last result's id): they turn the registry read-only and back (docs/design.md §4.5).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from berth_api.gc import gc_status

from ..kube.api import registry_path
from .change import Change, Emit
from .kube_watch import SingleObjectWatcher, content_digest

log = logging.getLogger(__name__)


class RegistryApiWatcher(SingleObjectWatcher):
    name = "registry-api"
    kind = "Registry"
    log_key = "registry"

    @property
    def registry_name(self) -> str:
        return self.object_name

    def _collection_path(self) -> str:
        return registry_path(self.namespace)

    def _offer(self, emit: Emit, obj: dict) -> None:
        self._offer_state(emit, ("ok", content_digest(obj) + status_digest(obj)), obj)

    def _offer_state(self, emit: Emit, state: tuple[str, str], obj: dict | None) -> None:
        if state == self._last:
            return
        self._last = state
        if state[0] == "ok":
            emit(Change("registry", registry=obj))
        else:
            emit(Change("registry", error=state[1]))


def status_digest(registry: dict | None) -> str:
    """What of status.garbageCollection moves an agent: the request (id, deadline), the runner's `active` and
    the last result's id. Added to the content digest (status is otherwise ignored)."""
    gc = gc_status(registry)
    request, last_run = _mapping(gc.get("request")), _mapping(gc.get("lastRun"))
    keys = {"request": [request.get("id"), request.get("deadline")], "active": gc.get("active"),
            "lastRun": last_run.get("id")}
    return hashlib.sha256(json.dumps(keys, sort_keys=True, default=str).encode()).hexdigest()


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


__all__ = ["RegistryApiWatcher", "status_digest"]
