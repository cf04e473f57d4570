"""Put a rendered config in place: pre-flight, atomic write, restart in place, verify, roll back on failure.

At the agent's start it first checks that the config on disk is served, else rolls back to the last config
verified good (last_good.py).

Blocking (file writes, /proc scans, HTTP polls): the pipeline runs it in a worker thread, one call at a time.
Returns an Outcome the pipeline turns into logs, metrics and status. Every message is secret-free: it names
files, config paths, hashes and pids, never file contents.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from berth_api.types import duration_seconds
from berth_supervise.protocol import CONFIG_NAME

from ..core.write import remove_stale, write_atomic, write_tree
from ..render.config import Rendered
from ..render.paths import HTPASSWD_FILE
from ..restart.endpoint import Endpoint
from ..restart.handover import still_draining
from ..restart.overlapped_restart import RestartResult
from ..restart.probe import (
    CRASHES_BEFORE_GIVING_UP,
    STOPPED,
    ServingWait,
    answers,
    is_up,
    wait_until_serving,
)
from ..restart.procfs import RegistryProcess, find_registry_processes, started_after
from ..restart.registry_output import with_registry_error
from ..restart.restarter import Restarter, SupervisorRestarter
from ..restart.supervisor_state import exit_line, supervisor_gone, supervisor_started
from .last_good import load_good, save_good
from .preflight import PreflightError, PreflightWarning, check_config, check_render
from .turns import ReplicaTurn

log = logging.getLogger(__name__)

# Beyond the drain: how long a fresh registry may take to answer (cold start is ~30 ms,
# docs/upstream.md#measured-registry-start).
START_ALLOWANCE_SECONDS = 10.0
# With no supervisor.pid at all the registry container has not started (an image pull, the startup probe):
# waiting the whole restart bound for it would hold the pipeline ~40 s with nothing on status. A supervisor that
# starts meanwhile writes its pid within ~0.1 s of config.yml appearing; then the full bound applies.
NO_SUPERVISOR_WAIT_SECONDS = 3.0


def endpoint_of(rendered: Rendered) -> Endpoint:
    return Endpoint.from_addr(rendered.listen_addr, tls=rendered.serves_tls)


def restart_bound(rendered: Rendered) -> float:
    """How long a restart may take: the old registry's drain plus the new one's start."""
    return duration_seconds(rendered.drain_timeout) + START_ALLOWANCE_SECONDS


@dataclass
class Outcome:
    action: str  # "unchanged", "written" (first config), "htpasswd" / "outbox" (no restart), "restarted",
    #              "preflight-failed", "rolled-back", "failed", "pending" (written; no supervisor has started a
    #              registry yet)
    ok: bool
    detail: str = ""
    restart: RestartResult | None = None
    rollback: RestartResult | None = None
    changed_files: list[str] | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per step, for the log line
    warnings: list[PreflightWarning] = field(default_factory=list)  # from the pre-flight, for Events
    failed_hash: str = ""  # the config that did not come up (after an agent restart: the one found on disk)
    restored_hash: str = ""  # the config rolled back to


class Applier:
    """What is on disk and running, and how to move it to a new render (and back).

    `current` is the config a registry was seen answering on (verified), or None: nothing verified yet, at the
    agent's start or after a rollback that did not come up either. Each verified config is also recorded on the
    config volume (last_good.py), so a new agent process knows what to roll back to.
    """

    def __init__(self, config_dir: Path, *, restart_timeout: float | None = None, preflight: bool = True,
                 on_written: Callable[[], None] | None = None, state_dir: Path | None = None,
                 restarter: Restarter | None = None):
        self.config_dir = Path(config_dir)
        # Where berth-supervise keeps its pid, the last exit and the registry's output (BERTH_STATE_DIR): the
        # config dir outside Kubernetes; in a pod the registry container mounts the config volume read-only.
        self.state_dir = Path(state_dir) if state_dir else self.config_dir
        self.config_path = self.config_dir / CONFIG_NAME
        # The one door to the registry container's processes (restart/restarter.py): on the socket the
        # supervisor holds (3.x) or overlapped (2.8).
        self.restarter: Restarter = restarter or SupervisorRestarter(self.config_path, self.state_dir)
        self.restart_timeout = restart_timeout
        self.preflight = preflight
        self.on_written = on_written  # config.yml is on disk: the registry container may start (startupProbe)
        self.current: Rendered | None = None  # the last good render: on disk and seen serving
        # Set when the agent stops: a restart still being verified is abandoned (the pod is going away).
        self.stopping = threading.Event()
        # Registries handed over to a successor that are still draining: never signalled again. After an agent
        # restart the handover file says which they are.
        self.draining = still_draining(self.config_path)
        self.busy = False  # an apply is running (in a worker thread)
        self.applies = 0  # applies begun: a look taken across one (busy, then not again) is stale

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
        return Rendered(config=config, files=files)

    def supervisor_gone(self) -> str | None:
        """Why no restart can work now (berth-supervise started once and is gone), or None."""
        if supervisor_gone(self.state_dir):
            return ("the supervisor (berth-supervise, the registry container's command) is not running: nothing "
                    "would start a registry, so nothing is restarted until it is back")
        return None

    def serving(self, rendered: Rendered) -> RegistryProcess | None:
        """The registry process started on config.yml as it is now (holding `rendered`) that answers, if any."""
        try:
            if self.config_path.read_bytes() != rendered.config:
                return None
        except OSError:
            return None
        fresh = [p for p in find_registry_processes(self.config_path)
                 if p not in self.draining and started_after(p, self.config_path)]
        if fresh and is_up(answers(endpoint_of(rendered), timeout=2.0)):
            return max(fresh, key=lambda p: p.start_ticks)
        return None

    def apply(self, rendered: Rendered, turn: ReplicaTurn | None = None) -> Outcome:
        """Move to `rendered`. With `turn` (a pod with siblings) the restart waits for this pod's turn and
        happens out of the Service."""
        self.busy = True  # the registry watch leaves readiness and exits alone meanwhile
        self.applies += 1
        try:
            return self._apply(rendered, turn)
        finally:
            self.busy = False

    def _apply(self, rendered: Rendered, turn: ReplicaTurn | None) -> Outcome:
        if self.current is None:
            established = self._establish(rendered)
            if established is not None:
                return established
        previous = self.current
        if previous is not None and previous.config == rendered.config and previous.files == rendered.files:
            return Outcome("unchanged", True)
        if previous is not None and not rendered.restart_needed(previous):
            # Only the htpasswd file or the outbox's endpoints differ: the registry re-reads htpasswd on its next
            # request (docs/upstream.md#dist-htpasswd-live); the outbox reads its file again before its next delivery
            # (outbox/).
            changed = write_tree(self.config_dir, rendered.files)
            remove_stale(self.config_dir, set(rendered.files), set(previous.files))
            self.current = rendered
            save_good(self.config_dir, rendered)
            return Outcome("htpasswd" if HTPASSWD_FILE in changed else "outbox", True, changed_files=changed)
        gone = self.supervisor_gone()
        if gone:
            return Outcome("failed", False, detail=gone, failed_hash=rendered.identity)

        timings: dict[str, float] = {}
        warnings: list[PreflightWarning] = []
        began = time.monotonic()
        if self.preflight:
            # Checked against what runs (or, with nothing verified, what the config dir holds): a config the
            # registry would refuse at start is refused here, and nothing is written or restarted.
            against = previous or self.on_disk(set(rendered.files))
            try:
                if against is None or rendered.restart_needed(against):
                    warnings = check_render(rendered, against, scratch_dir=self.config_dir)
                    timings["preflight_start"] = round(time.monotonic() - began, 4)
                if _storage_changed(previous, rendered):
                    check_config(rendered)
            except PreflightError as exc:
                return Outcome("preflight-failed", False, detail=str(exc), failed_hash=rendered.identity)
            timings["preflight"] = round(time.monotonic() - began, 4)

        began = time.monotonic()
        running = [p for p in find_registry_processes(self.config_path) if p not in self.draining]
        first = previous is None
        # On the socket the supervisor holds (3.x) nothing is refused while the registry restarts: the pod stays
        # in its Service and only takes its turn (docs/decisions/0010-replicas-reload-one-at-a-time.md).
        leave = not self.restarter.holds_socket(running)
        if turn is not None and not first:
            # Another pod may be restarting: wait for our turn, then leave the Service (apply/turns.py).
            waited = turn.begin(self.stopping, hold_seconds=self._bound(previous, rendered) * 2, leave=leave)
            timings.update(lease_wait=waited.lease_wait, drain_wait=waited.drain_wait)
            if waited.stopped:
                return Outcome("failed", False, detail=STOPPED, timings=timings, warnings=warnings)
            began = time.monotonic()
            running = None  # seconds may have passed: the restarter looks again
        try:
            outcome = self._write_and_restart(rendered, previous, timings, began, running)
            outcome.warnings = warnings
            return outcome
        finally:
            if turn is not None and not first:
                turn.end(self.stopping, leave=leave)

    def _bound(self, previous: Rendered | None, rendered: Rendered) -> float:
        return self.restart_timeout or restart_bound(previous or rendered)

    def _supervisor_started(self) -> bool:
        return supervisor_started(self.state_dir)

    def _start_wait(self, bound: float) -> float:
        """How long to wait for a first registry: the bound, or a short look when no supervisor ever started."""
        return bound if self._supervisor_started() else min(bound, NO_SUPERVISOR_WAIT_SECONDS)

    def _verified(self, rendered: Rendered) -> None:
        """A registry was seen answering on `rendered`: it is the config to return to from now on."""
        self.current = rendered
        save_good(self.config_dir, rendered)

    def _establish(self, rendered: Rendered) -> Outcome | None:
        """With nothing verified (the agent just started): is the config on disk served? If so it is current.
        If not (a crash loop on a config the last agent wrote and never verified), roll back to the last
        config verified good. None: carry on with `rendered` (an Outcome: this round is over)."""
        good = load_good(self.config_dir)
        disk = self.on_disk(set(rendered.files) | set(good.files if good else ()))
        if disk is None:
            return None  # the very first config: nothing on disk, nothing running
        if self.serving(disk) is not None:
            self._verified(disk)
            log.info("config on disk is current",
                     extra={"fields": {"config_hash": disk.identity, "seen_serving": True}})
            return None
        gone = self.supervisor_gone()
        detail = gone
        if not gone:
            stale = [p for p in find_registry_processes(self.config_path)
                     if p not in self.draining and not started_after(p, self.config_path)]
            if stale:
                # The last agent wrote config.yml and died before restarting the registry: what runs is older.
                detail = (f"the registry running (pid {stale[0].pid}) started before config.yml was last written, "
                          "so it runs an older config")
            else:
                # Perhaps starting (the supervisor pauses a second between failed starts): wait for it to answer.
                bound = self._bound(None, disk)
                detail = self._wait_served(disk, self._start_wait(bound))
                if detail and detail != STOPPED and self._supervisor_started():
                    detail = self._wait_served(disk, bound)
                if not detail:
                    self._verified(disk)
                    log.info("config on disk is current", extra={"fields": {"config_hash": disk.identity,
                                                                            "seen_serving": True}})
                    return None
                if detail == STOPPED:
                    return Outcome("failed", False, detail=STOPPED)
                if not self._supervisor_started():
                    return Outcome("pending", False, detail="waiting for the registry container to start")
                detail = with_registry_error(detail, self.state_dir)
        message = f"the config on disk ({disk.identity[:12]}) is not served: {detail}"
        same = good is not None and good.config == disk.config and good.files == disk.files
        if gone or good is None or same:
            if not gone and (rendered.config != disk.config or rendered.files != disk.files):
                return None  # nothing better to return to: try the wanted config
            return Outcome("failed", False, detail=message, failed_hash=disk.identity)
        log.warning("config on disk is not served, restoring the last config verified good",
                    extra={"fields": {"config_hash": disk.identity, "restore_hash": good.identity,
                                      "reason": detail}})
        self._write(good, disk)
        rollback = self.restarter.restart(endpoint_of(good), timeout=self._bound(None, good), stop=self.stopping,
                                          draining=self.draining)
        if rollback.ok:
            self._verified(good)
        else:
            rollback.detail = with_registry_error(rollback.detail, self.state_dir)
        return Outcome("rolled-back", False, detail=message, rollback=rollback, failed_hash=disk.identity,
                       restored_hash=good.identity)

    def _wait_served(self, rendered: Rendered, timeout: float) -> str:
        """Wait until a registry started on `rendered` answers: "" then, else why not. Registries that die at
        start live milliseconds (a /proc scan misses them): the supervisor's registry-exit line counts them."""
        deadline = time.monotonic() + timeout
        exits: set[str] = set()
        first = exit_line(self.state_dir)
        while time.monotonic() < deadline:
            if self.serving(rendered) is not None:
                return ""
            line = exit_line(self.state_dir)
            if line and line != first and not line.split()[1:2] == ["0"]:
                exits.add(line)
            if len(exits) >= CRASHES_BEFORE_GIVING_UP:
                return f"the registry exited at start {len(exits)} times on config {rendered.identity[:12]}"
            if self.supervisor_gone():
                return self.supervisor_gone() or ""
            if self.stopping.wait(0.05):
                return STOPPED
        return f"no registry answered on config {rendered.identity[:12]} within {timeout:g}s"

    def _write_and_restart(self, rendered: Rendered, previous: Rendered | None,
                           timings: dict[str, float], began: float,
                           running: list[RegistryProcess] | None) -> Outcome:
        self._write(rendered, previous or self.on_disk(set()))
        timings["write"] = round(time.monotonic() - began, 4)
        bound = self._bound(previous, rendered)
        if previous is None and not running:
            # The first config (or one after a failure, with no registry left): the supervisor has been waiting
            # for it, or restarts its registry within a second. Applied once a registry answers on it.
            if self.on_written is not None:
                self.on_written()
            began = time.monotonic()
            wanted = ServingWait(self.config_path, endpoint_of(rendered), self._start_wait(bound), self.draining)
            new, detail = wait_until_serving(wanted, stop=self.stopping)
            if new is None and detail != STOPPED and self._supervisor_started():
                rest = max(0.0, bound - (time.monotonic() - began))
                new, detail = wait_until_serving(replace(wanted, timeout=rest), stop=self.stopping)
            result = RestartResult(ok=new is not None, old=[], new=new, seconds=time.monotonic() - began,
                                   detail=detail, started_at=time.time())
            action = "written"
        else:
            # A bounded handover (berth_supervise/notify.py) when a credential is retired (the old registry is gone
            # within drainTimeout: the old one may be revoked then,
            # docs/decisions/0001-retirement-bounded-by-drain-timeout.md) and on GC's read-only switch (a writable
            # registry must not linger; GC's acknowledgement waits until it is gone, gc/ack.py).
            quick = _read_only(rendered) or rendered.retires_credential(previous)
            result = self.restarter.restart(endpoint_of(rendered), timeout=bound, stop=self.stopping,
                                            draining=self.draining, running=running, quick=quick)
            action = "restarted"
        timings["restart"] = round(result.seconds, 4)
        if result.ok:
            self._verified(rendered)
            return Outcome(action, True, restart=result, timings=timings)
        if result.detail == STOPPED:
            return Outcome("failed", False, detail=STOPPED, restart=result, timings=timings)
        if action == "written" and not self._supervisor_started():
            # No supervisor has run yet: in a pod the registry container starts after the startup probe (and
            # an image pull). Not a failure, not applied either: looked at again shortly.
            return Outcome("pending", False, detail="waiting for the registry container to start", restart=result,
                           timings=timings)
        detail = with_registry_error(result.detail, self.state_dir)
        if previous is None:
            return Outcome("failed", False, detail=detail, restart=result, failed_hash=rendered.identity)

        log.warning("registry did not come up, restoring the last good config",
                    extra={"fields": {"config_hash": rendered.identity, "restore_hash": previous.identity,
                                      "reason": detail}})
        self._write(previous, rendered)
        rollback = self.restarter.restart(endpoint_of(previous),
                                          timeout=self.restart_timeout or restart_bound(previous),
                                          stop=self.stopping, draining=self.draining)
        if not rollback.ok:
            # On disk again, but not seen serving: nothing is verified until a registry answers on it.
            rollback.detail = with_registry_error(rollback.detail, self.state_dir)
            self.current = None
        return Outcome("rolled-back", False, detail=detail, restart=result, rollback=rollback,
                       failed_hash=rendered.identity, restored_hash=previous.identity)

    def _write(self, rendered: Rendered, replacing: Rendered | None) -> None:
        # Side files first, config.yml last: the supervisor starts the registry as soon as config.yml exists,
        # and the files it names (htpasswd, TLS) must be there by then.
        write_tree(self.config_dir, rendered.files)
        write_atomic(self.config_path, rendered.config)
        if replacing is not None:
            remove_stale(self.config_dir, set(rendered.files), set(replacing.files))


def _read_only(rendered: Rendered) -> bool:
    """storage.maintenance.readonly.enabled: GC's read-only switch (or a read-only registry)."""
    storage = rendered.document.get("storage") or {}
    readonly = (storage.get("maintenance") or {}).get("readonly") or {}
    return readonly.get("enabled") is True


def _storage_changed(previous: Rendered | None, rendered: Rendered) -> bool:
    """Check the bucket only when the S3 target or key changes: other edits must not depend on S3 being up."""
    new = rendered.s3
    if new is None:
        return False
    if previous is None:
        return True
    old = previous.s3
    return old is None or (old.endpoint, old.bucket, old.region, old.access_key, old.secret_key) != (
        new.endpoint, new.bucket, new.region, new.access_key, new.secret_key)


__all__ = ["Applier", "Outcome", "endpoint_of", "restart_bound"]
