"""What the caches keep of a registry pod's status: its phase, and what engine.pod_problems and
engine.status.binary_findings read to say why a pod cannot run. No timestamps, ids or readiness flags, which change
without anything to report (each change of what is kept wakes the Registry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def strip_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """A pod's status as the caches keep it."""
    kept: dict[str, Any] = {}
    if "phase" in status:
        kept["phase"] = status["phase"]
    scheduled = [{k: c[k] for k in ("type", "status", "reason", "message") if k in c}
                 for c in status.get("conditions") or () if c.get("type") == "PodScheduled"]
    if scheduled:
        kept["conditions"] = scheduled
    for key in ("initContainerStatuses", "containerStatuses"):
        if status.get(key):
            kept[key] = [_strip_container(c) for c in status[key]]
    return kept


def _strip_container(status: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {k: status[k] for k in ("name", "image", "restartCount") if k in status}
    for part in ("state", "lastState"):
        for phase, fields in (("waiting", ("reason", "message")),
                              ("terminated", ("reason", "exitCode", "message"))):
            value = (status.get(part) or {}).get(phase)
            if value:
                kept.setdefault(part, {})[phase] = {k: value[k] for k in fields if k in value}
    return kept
