"""Garbage collection: spec.garbageCollection, the run-now annotation, and status.garbageCollection.

Who writes what (docs/design.md §4.5): the operator writes `request`, `nextRun`, `schedule`
and `handledRequest`; the runner (the agent holding the Registry's Lease) writes `active` while it runs and
`lastRun` when it ends. The operator writes `lastRun` only for a request whose deadline passed with no result
(result Interrupted: the runner died).
"""

from __future__ import annotations

import datetime
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints

from . import cron
from .types import ApiModel

# `kubectl annotate registry NAME berth.dev/gc-requested-at=$(date -u +%Y-%m-%dT%H:%M:%SZ) --overwrite`
GC_REQUEST_ANNOTATION = "berth.dev/gc-requested-at"

# Hours, minutes and seconds only ("10m", "1h30m", "90s"): the subset of Go durations CEL's duration() and
# every reader parse alike.
GC_DURATION_PATTERN = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
READ_ONLY_TIMEOUT_MIN = datetime.timedelta(minutes=1)
READ_ONLY_TIMEOUT_MAX = datetime.timedelta(hours=24)
READ_ONLY_TIMEOUT_MESSAGE = "readOnlyTimeout must be between 1m and 24h"
# An in-memory store lives in the serving registry process: a `registry garbage-collect` process sees an empty
# store of its own and (2.8 and 3.1.1 alike) fails on it as on a store never pushed to.
GC_STORAGE_MESSAGE = ("garbageCollection needs storage outside the registry process (filesystem, s3, azure, gcs or "
                      "objectStorage): config.storage.inmemory keeps the data inside the registry process, where "
                      "registry garbage-collect cannot reach it")
# Whitespace-separated, 5 fields of cron characters; cron.parse says precisely what is wrong.
CRON_PATTERN = r"^\s*[0-9A-Za-z*,/-]+(\s+[0-9A-Za-z*,/-]+){4}\s*$"

GcTrigger = Literal["schedule", "manual"]
GcResult = Literal["Succeeded", "Failed", "Interrupted", "TimedOut"]
GcPhase = Literal["SwitchingReadOnly", "Collecting", "Recording"]


def gc_status(registry: dict | None) -> dict:
    """status.garbageCollection of a Registry object as the API returns it ({} when absent or malformed)."""
    value = ((registry or {}).get("status") or {}).get("garbageCollection")
    return value if isinstance(value, dict) else {}


def parse_gc_duration(text: str) -> datetime.timedelta:
    match = re.fullmatch(GC_DURATION_PATTERN, text)
    if not match or not text:
        raise ValueError(f"{text!r} is not a duration like 10m, 1h30m or 90s")
    hours, minutes, seconds = (int(group[:-1]) if group else 0 for group in match.groups())
    return datetime.timedelta(hours=hours, minutes=minutes, seconds=seconds)


def _bounded_timeout(text: str) -> str:
    value = parse_gc_duration(text)
    if not READ_ONLY_TIMEOUT_MIN <= value <= READ_ONLY_TIMEOUT_MAX:
        raise ValueError(READ_ONLY_TIMEOUT_MESSAGE)  # the CRD's CEL rule says the same
    return text


def _valid_cron(text: str) -> str:
    try:
        cron.parse(text)
    except cron.CronError as exc:
        raise ValueError(exc.detail) from None
    return text


# The model checks with cron.parse, whose errors say which field is wrong; the CRD can only check the shape.
CronSchedule = Annotated[
    str,
    StringConstraints(max_length=200),
    AfterValidator(_valid_cron),
    Field(json_schema_extra={"pattern": CRON_PATTERN}),
]
ReadOnlyTimeout = Annotated[
    str, StringConstraints(pattern=GC_DURATION_PATTERN, min_length=2, max_length=16), AfterValidator(_bounded_timeout)
]
Count = Annotated[int, Field(ge=0)]


class GarbageCollection(ApiModel):
    """When and how the registry's storage is garbage-collected, with every replica read-only meanwhile."""

    schedule: CronSchedule | None = Field(
        None,
        description="Standard 5-field cron expression (minute hour day-of-month month day-of-week), evaluated in "
        "UTC, e.g. '0 3 * * sun'. Absent: no scheduled runs (the berth.dev/gc-requested-at annotation still "
        "starts one).",
    )
    delete_untagged: bool = Field(
        False,
        alias="deleteUntagged",
        description="Also delete manifests no tag points to, and their blobs (registry garbage-collect "
        "--delete-untagged).",
    )
    dry_run: bool = Field(
        False, alias="dryRun", description="Only report what would be deleted (registry garbage-collect --dry-run)."
    )
    read_only_timeout: ReadOnlyTimeout = Field(
        "10m",
        alias="readOnlyTimeout",
        description="Longest time the registry may stay read-only for one run (1m to 24h); a run that needs "
        "longer is stopped, the registry returns to writable and the run is reported TimedOut.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "duration(self) >= duration('1m') && duration(self) <= duration('24h')",
                    "message": READ_ONLY_TIMEOUT_MESSAGE,
                }
            ]
        },
    )


class GarbageCollectionRequest(ApiModel):
    """A run the operator asked for; it stays until its result is recorded or its deadline passes."""

    id: str = Field(min_length=1, max_length=64, description="Unique id of the run; lastRun.id repeats it.")
    trigger: GcTrigger = Field(description="schedule or manual (the berth.dev/gc-requested-at annotation).")
    requested_at: str = Field(alias="requestedAt", description="When the operator asked for it (RFC 3339).")
    dry_run: bool = Field(alias="dryRun", description="Run with --dry-run.")
    delete_untagged: bool = Field(alias="deleteUntagged", description="Run with --delete-untagged.")
    read_only_timeout: ReadOnlyTimeout = Field(
        alias="readOnlyTimeout", description="Longest read-only window for this run (from the spec at request time)."
    )
    deadline: str = Field(
        description="When the operator records the run Interrupted if no result is recorded by then (RFC 3339): "
        "requestedAt + readOnlyTimeout + a grace for taking the Lease and restoring writable."
    )


class GarbageCollectionActive(ApiModel):
    """The run in progress, written by the runner."""

    id: str = Field(min_length=1, max_length=64, description="The request id being run.")
    runner: str = Field(description="Pod whose agent runs it (holds the Registry's Lease).")
    started_at: str = Field(alias="startedAt", description="When the runner took the request (RFC 3339).")
    phase: GcPhase = Field(
        description="SwitchingReadOnly (waiting for every replica), Collecting (the command runs) or Recording "
        "(the command ended; measuring and recording the result)."
    )


class GarbageCollectionRun(ApiModel):
    """The outcome of the last run."""

    id: str = Field(min_length=1, max_length=64, description="The request id.")
    trigger: GcTrigger = Field(description="schedule or manual.")
    dry_run: bool = Field(alias="dryRun", description="Whether it was a dry run (nothing deleted).")
    delete_untagged: bool = Field(alias="deleteUntagged", description="Whether untagged manifests were deleted.")
    result: GcResult = Field(description="Succeeded, Failed, Interrupted (the runner died) or TimedOut.")
    started_at: str | None = Field(None, alias="startedAt", description="When it started (RFC 3339); absent if "
                                   "it never started.")
    finished_at: str = Field(alias="finishedAt", description="When it ended, or was found dead (RFC 3339).")
    runner: str | None = Field(None, description="Pod whose agent ran it.")
    blobs_marked: Count | None = Field(None, alias="blobsMarked", description="Blobs in use (kept).")
    manifests_marked: Count | None = Field(None, alias="manifestsMarked", description="Manifests in use (kept).")
    blobs_deleted: Count | None = Field(
        None, alias="blobsDeleted", description="Blobs deleted (in a dry run: that would be deleted)."
    )
    manifests_deleted: Count | None = Field(
        None, alias="manifestsDeleted", description="Untagged manifests deleted (in a dry run: that would be)."
    )
    bytes_freed: Count | None = Field(
        None, alias="bytesFreed", description="Storage freed, where measurable (filesystem storage)."
    )
    message: str = Field("", max_length=4096, description="Why it failed, or a summary.")

    def status(self) -> dict[str, Any]:
        """As status.garbageCollection.lastRun is written, by the runner and by the operator: every key present
        (null when unknown), so nothing of the previous run survives the merge patch."""
        return self.model_dump(mode="json", by_alias=True)


class GarbageCollectionStatus(ApiModel):
    schedule: str | None = Field(None, description="The schedule nextRun was computed from (operator).")
    next_run: str | None = Field(None, alias="nextRun", description="Next scheduled run (RFC 3339, UTC; operator).")
    handled_request: str | None = Field(
        None,
        alias="handledRequest",
        description="The last berth.dev/gc-requested-at value the operator acted on; the same value never "
        "starts a second run (operator).",
    )
    request: GarbageCollectionRequest | None = Field(
        None, description="The run requested and not yet finished (operator)."
    )
    active: GarbageCollectionActive | None = Field(None, description="The run in progress (runner).")
    last_run: GarbageCollectionRun | None = Field(None, alias="lastRun", description="The last run's outcome.")
