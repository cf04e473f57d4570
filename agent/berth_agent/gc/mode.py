"""Is this Registry read-only for garbage collection now? (docs/design.md §4.5). Pure: object and time in.

A hold stands while `status.garbageCollection.request` exists, its `deadline` is in the future and
`lastRun.id` is not the request's id (the runner's result ends it). Every agent renders
`storage.maintenance.readonly.enabled: true` while it stands, whatever the spec says, and returns to the
spec's value when it ends: when the result is recorded, or at the deadline by its own timer, so a replica
goes writable even when the operator and the runner are both gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from berth_api import RegistrySpec
from berth_api.gc import gc_status, parse_gc_duration
from berth_api.timestamps import parse_epoch


@dataclass(frozen=True)
class GcHold:
    request_id: str
    trigger: str
    dry_run: bool
    delete_untagged: bool
    read_only_timeout: float  # seconds
    deadline: float  # wall clock (epoch seconds)


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def standing_request(registry: dict | None) -> GcHold | None:
    """The request in status as a hold, whatever the time; None when absent, malformed, or finished."""
    gc = gc_status(registry)
    request = _mapping(gc.get("request"))
    request_id, deadline = request.get("id"), parse_epoch(request.get("deadline"))
    if not isinstance(request_id, str) or not request_id or deadline is None:
        return None
    if _mapping(gc.get("lastRun")).get("id") == request_id:
        return None
    try:
        timeout = parse_gc_duration(str(request.get("readOnlyTimeout") or "10m")).total_seconds()
    except ValueError:
        timeout = 600.0
    return GcHold(request_id=request_id, trigger=str(request.get("trigger") or "manual"),
                  dry_run=request.get("dryRun") is True, delete_untagged=request.get("deleteUntagged") is True,
                  read_only_timeout=timeout, deadline=deadline)


def read_only_for(registry: dict | None, now_wall: float) -> GcHold | None:
    """The hold in effect at `now_wall`: a standing request whose deadline is still ahead."""
    hold = standing_request(registry)
    return hold if hold is not None and now_wall < hold.deadline else None


def with_read_only(spec: RegistrySpec) -> RegistrySpec:
    """The spec with storage.maintenance.readonly.enabled forced on (the renderer writes the whole block)."""
    storage = spec.config.storage
    maintenance = storage.maintenance.model_copy(
        update={"readonly": storage.maintenance.readonly.model_copy(update={"enabled": True})})
    config = spec.config.model_copy(update={"storage": storage.model_copy(update={"maintenance": maintenance})})
    return spec.model_copy(update={"config": config})


__all__ = ["GcHold", "read_only_for", "standing_request", "with_read_only"]
