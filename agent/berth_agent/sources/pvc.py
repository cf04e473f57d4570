"""PvcProbe: the registry's data path (the PVC, filesystem storage only): present, mounted, size, writable.

Outside Kubernetes the data path is a plain directory, so "not a mount point" is reported (`mounted: false`)
but is not an error: one info line says so outside a pod, one warning inside a pod (where the PVC should be
mounted there). A missing or unwritable path is an error naming the path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from ..core import metrics
from ..core.health import Health
from .change import Change, Emit

log = logging.getLogger(__name__)

PROBE_FILE = ".berth-probe"


@dataclass(frozen=True)
class PvcState:
    path: str
    present: bool = False
    mounted: bool = False
    capacity_bytes: int | None = None
    free_bytes: int | None = None
    writable: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def probe_path(path: Path) -> PvcState:
    """Look at `path` once; blocking (statvfs and a file write may hang on a stuck volume)."""
    where = str(path)
    try:
        is_dir = stat.S_ISDIR(path.stat().st_mode)
    except FileNotFoundError:
        return PvcState(where, error=f"data path {where}: does not exist")
    except OSError as exc:  # e.g. a parent directory we may not enter
        return PvcState(where, error=f"data path {where}: cannot stat ({_why(exc)})")
    if not is_dir:
        return PvcState(where, present=True, error=f"data path {where}: is not a directory")
    mounted = os.path.ismount(path)
    try:
        st = os.statvfs(path)
        capacity, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize  # f_bavail: what non-root may use
    except OSError as exc:
        return PvcState(where, present=True, mounted=mounted, error=f"data path {where}: cannot stat ({_why(exc)})")
    try:
        # A file of its own per probe: the periodic loop and the pipeline may probe at the same moment, and the
        # agents of several replicas share a ReadWriteMany volume; one shared name made one unlink the other's
        # file and report the path unwritable.
        fd, probe = tempfile.mkstemp(prefix=PROBE_FILE + "-", dir=path)
        try:
            os.write(fd, b"ok")
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return PvcState(
            where, present=True, mounted=mounted, capacity_bytes=capacity, free_bytes=free,
            error=f"data path {where}: not writable ({_why(exc)})",
        )
    return PvcState(where, present=True, mounted=mounted, capacity_bytes=capacity, free_bytes=free, writable=True)


def _why(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else type(exc).__name__


class PvcProbe:
    name = "pvc"

    def __init__(self, path: Path, health: Health, *, interval: float = 30.0, enabled: bool = True,
                 on_state: Callable[[PvcState | None], Awaitable[None]] | None = None,
                 in_pod: bool | None = None) -> None:
        self.path = Path(path)
        # The kubelet sets KUBERNETES_SERVICE_HOST in every container: a plain directory there is a missing
        # volume worth a warning; on a workstation (examples/local/run) it is how things are meant to be.
        self.in_pod = "KUBERNETES_SERVICE_HOST" in os.environ if in_pod is None else in_pod
        # Called after every periodic probe with its state, and once with None when probing is switched off:
        # the agent's status record (Reporter.data_path) follows the volume.
        self.on_state = on_state
        self.health = health
        self.interval = interval
        # Only filesystem storage has a PVC: the pipeline turns the periodic probe off for object storage, so
        # no warning, no Change and no pvc_* series appear for a volume that is not meant to exist.
        self.enabled = enabled
        self.last: PvcState | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._warned_not_mounted = False

    def set_enabled(self, enabled: bool) -> None:
        """Probe periodically (filesystem storage) or not (object storage, in-memory); check() works either way.
        Thread-safe (the pipeline calls it while rendering, in a worker thread); a switch wakes the loop at once
        instead of after the interval."""
        changed, self.enabled = self.enabled != enabled, enabled
        loop, wake = self._loop, self._wake
        if changed and loop is not None and wake is not None:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:
                pass  # loop closed: shutting down

    def check(self) -> PvcState:
        """Probe now, set the pvc_* metrics, remember the state; blocking (call via asyncio.to_thread)."""
        state = probe_path(self.path)
        metrics.expose_pvc()
        metrics.pvc_ok.set(1 if state.ok else 0)
        if state.capacity_bytes is not None:
            metrics.pvc_capacity_bytes.set(state.capacity_bytes)
            metrics.pvc_free_bytes.set(state.free_bytes or 0)
        if state.present and not state.mounted and not self._warned_not_mounted:
            self._warned_not_mounted = True  # once
            if self.in_pod:
                log.warning("data path is not a mount point", extra={"fields": {"path": state.path}})
            else:
                log.info("data path is a plain directory (no volume mounted there; expected outside Kubernetes)",
                         extra={"fields": {"path": state.path}})
        self.last = state
        return state

    async def run(self, emit: Emit) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        self.health.register(self.name, max_silence_seconds=3 * self.interval + 30)
        reported: str | None = None  # the error last reported; None = ok (nothing to report at start)
        described = False  # on_state has been given a state since probing was last switched on
        try:
            while True:
                self.health.beat(self.name)
                if not self.enabled:
                    reported = None  # start afresh if turned on again
                    if described and self.on_state is not None:
                        await self.on_state(None)  # the storage is no longer a volume: withdraw its figures
                    described = False
                    await self._pause()
                    continue
                state = await asyncio.to_thread(self.check)
                self.health.beat(self.name)
                if self.on_state is not None:
                    await self.on_state(state)
                    described = True
                if state.error != reported:
                    reported = state.error
                    if state.error:
                        metrics.watch_errors_total.labels(source=self.name).inc()
                        log.warning("data path unusable", extra={"fields": {"path": state.path, "error": state.error}})
                    else:
                        log.info("data path usable again", extra={"fields": {"path": state.path}})
                    emit(Change("pvc"))
                await self._pause()
        finally:
            self._loop = self._wake = None
            self.health.unregister(self.name)

    async def _pause(self) -> None:
        """Wait one interval, or less when set_enabled switches the probe."""
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.interval):  # not wait_for: see sources/mount_watch.py
                await self._wake.wait()
        self._wake.clear()


__all__ = ["PROBE_FILE", "PvcProbe", "PvcState", "probe_path"]
