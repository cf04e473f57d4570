"""Put a rendered config in place: pre-flight, atomic write, restart in place, verify, roll back on failure.

Blocking (file writes, /proc scans, HTTP polls): the pipeline runs it in a worker thread, one call at a time.
Returns an Outcome the pipeline turns into logs, metrics and status. Every message is secret-free: it names
files, config paths, hashes and pids, never file contents.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .preflight import PreflightError, check_config, s3_target
from .render import Rendered
from .restart import (
    STOPPED,
    Endpoint,
    RegistryProcess,
    RestartResult,
    find_registry_processes,
    read_handover,
    restart_registry,
)
from .turns import ReplicaTurn
from .write import CONFIG_NAME, remove_stale, write_atomic, write_tree

log = logging.getLogger(__name__)

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# Beyond the drain: how long a fresh registry may take to answer (cold start is ~30 ms, field-notes §6).
START_ALLOWANCE_SECONDS = 10.0


def go_duration_seconds(text: str | None) -> float:
    """Seconds in a Go duration ("30s", "1m30s", "500ms", "0"); 0 for anything else."""
    if not text or text == "0":
        return 0.0
    parts = _DURATION_PART.findall(str(text))
    if "".join(n + u for n, u in parts) != str(text):
        return 0.0
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def endpoint_of(config: bytes) -> Endpoint:
    http = (yaml.safe_load(config) or {}).get("http") or {}
    return Endpoint.from_addr(str(http.get("addr", ":5000")), tls=bool(http.get("tls")))


def restart_bound(config: bytes) -> float:
    """How long a restart may take: the old registry's drain plus the new one's start."""
    http = (yaml.safe_load(config) or {}).get("http") or {}
    return go_duration_seconds(http.get("draintimeout")) + START_ALLOWANCE_SECONDS


@dataclass
class Outcome:
    action: str  # "unchanged", "written" (first config), "htpasswd", "restarted", "preflight-failed",
    #              "rolled-back", "failed"
    ok: bool
    detail: str = ""
    restart: RestartResult | None = None
    rollback: RestartResult | None = None
    changed_files: list[str] | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per step, for the log line


class Applier:
    """What is on disk and running, and how to move it to a new render (and back)."""

    def __init__(self, config_dir: Path, *, restart_timeout: float | None = None, preflight: bool = True):
        self.config_dir = Path(config_dir)
        self.config_path = self.config_dir / CONFIG_NAME
        self.restart_timeout = restart_timeout
        self.preflight = preflight
        self.current: Rendered | None = None  # the last good render: on disk and (when started) running
        # Set when the agent stops: a restart still being verified is abandoned (the pod is going away).
        self.stopping = threading.Event()
        # Registries handed over to a successor that are still draining: never signalled again. After an agent
        # restart the handover file says which they are.
        self.draining = read_handover(self.config_path)

    def adopt_existing(self, rendered: Rendered) -> bool:
        """After an agent restart: if the files on disk already are this render, take them as current."""
        try:
            if self.config_path.read_bytes() != rendered.config:
                return False
            if any((self.config_dir / name).read_bytes() != data for name, data in rendered.files.items()):
                return False
        except OSError:
            return False
        self.current = rendered
        return True

    def on_disk(self, names: set[str]) -> Rendered | None:
        """What the config dir holds now (config.yml and `names`), as a render to roll back to; None if empty."""
        try:
            config = self.config_path.read_bytes()
        except OSError:
            return None
        files = {}
        for name in sorted(names):
            try:
                files[name] = (self.config_dir / name).read_bytes()
            except OSError:
                pass
        return Rendered(config=config, files=files, config_hash=hashlib.sha256(config).hexdigest())

    def apply(self, rendered: Rendered, turn: ReplicaTurn | None = None) -> Outcome:
        """Move to `rendered`. With `turn` (a pod with siblings) the restart waits for this pod's turn and
        happens out of the Service."""
        previous = self.current
        if previous is None and find_registry_processes(self.config_path):
            # The agent restarted and the registry runs on what the config dir holds: that is the last good
            # config to return to if the new one fails.
            previous = self.on_disk(set(rendered.files))
        if previous is not None and previous.config == rendered.config and previous.files == rendered.files:
            return Outcome("unchanged", True)
        if previous is not None and not rendered.restart_needed(previous):
            # Only the htpasswd file differs: the registry re-reads it on its next request (field-notes §1).
            changed = write_tree(self.config_dir, rendered.files)
            remove_stale(self.config_dir, set(rendered.files), set(previous.files))
            self.current = rendered
            return Outcome("htpasswd", True, changed_files=changed)

        timings: dict[str, float] = {}
        began = time.monotonic()
        if self.preflight and _storage_changed(previous, rendered):
            try:
                check_config(rendered.config)
            except PreflightError as exc:
                return Outcome("preflight-failed", False, detail=str(exc))
            timings["preflight"] = round(time.monotonic() - began, 4)

        began = time.monotonic()
        running = [p for p in find_registry_processes(self.config_path) if p not in self.draining]
        first = previous is None and not running
        if turn is not None and not first:
            # Another pod may be restarting: wait for our turn, then leave the Service (turns.py).
            waited = turn.begin(self.stopping, hold_seconds=self._bound(previous, rendered) * 2)
            timings.update(lease_wait=waited.lease_wait, drain_wait=waited.drain_wait)
            if waited.stopped:
                return Outcome("failed", False, detail=STOPPED, timings=timings)
            began = time.monotonic()
            running = None  # seconds may have passed: restart_registry looks again
        try:
            return self._write_and_restart(rendered, previous, first, timings, began, running)
        finally:
            if turn is not None and not first:
                turn.end(self.stopping)

    def _bound(self, previous: Rendered | None, rendered: Rendered) -> float:
        return self.restart_timeout or restart_bound(previous.config if previous else rendered.config)

    def _write_and_restart(self, rendered: Rendered, previous: Rendered | None, first: bool,
                           timings: dict[str, float], began: float,
                           running: list[RegistryProcess] | None) -> Outcome:
        self._write(rendered, previous)
        timings["write"] = round(time.monotonic() - began, 4)
        if first:
            # The first config: the supervisor has been waiting for it and starts the registry now. There is
            # nothing older to roll back to, so there is nothing to verify against here.
            self.current = rendered
            return Outcome("written", True, timings=timings)

        result = restart_registry(self.config_path, endpoint_of(rendered.config),
                                  timeout=self._bound(previous, rendered), stop=self.stopping,
                                  draining=self.draining, running=running)
        timings["restart"] = round(result.seconds, 4)
        if result.ok:
            self.current = rendered
            return Outcome("restarted", True, restart=result, timings=timings)
        if result.detail == STOPPED:
            return Outcome("failed", False, detail=STOPPED, restart=result, timings=timings)
        if previous is None:
            return Outcome("failed", False, detail=result.detail, restart=result)

        log.warning("registry did not come up, restoring the last good config",
                    extra={"fields": {"config_hash": rendered.config_hash, "restore_hash": previous.config_hash,
                                      "reason": result.detail}})
        self._write(previous, rendered)
        self.current = previous  # what is on disk again, and what runs once the restart below succeeds
        rollback = restart_registry(self.config_path, endpoint_of(previous.config),
                                    timeout=self.restart_timeout or restart_bound(previous.config), stop=self.stopping,
                                    draining=self.draining)
        return Outcome("rolled-back", False, detail=result.detail, restart=result, rollback=rollback)

    def _write(self, rendered: Rendered, replacing: Rendered | None) -> None:
        # Side files first, config.yml last: the supervisor starts the registry as soon as config.yml exists,
        # and the files it names (htpasswd, TLS) must be there by then.
        write_tree(self.config_dir, rendered.files)
        write_atomic(self.config_path, rendered.config)
        if replacing is not None:
            remove_stale(self.config_dir, set(rendered.files), set(replacing.files))


def _storage_changed(previous: Rendered | None, rendered: Rendered) -> bool:
    """Check the bucket only when the S3 target or key changes: other edits must not depend on S3 being up."""
    new = s3_target(yaml.safe_load(rendered.config) or {})
    if new is None:
        return False
    if previous is None:
        return True
    old = s3_target(yaml.safe_load(previous.config) or {})
    return old is None or (old.endpoint, old.bucket, old.region, old.access_key, old.secret_key) != (
        new.endpoint, new.bucket, new.region, new.access_key, new.secret_key)


__all__ = ["Applier", "Outcome", "endpoint_of", "go_duration_seconds", "restart_bound"]
