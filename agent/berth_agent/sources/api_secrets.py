"""Which copy of a mounted Secret a render uses: the volume's or the API server's
(docs/decisions/0012-secrets-over-the-api.md).

The API copy (sources/secret_api.py) shows a change at once; the kubelet's volume shows it 60 to 90 s later
(docs/upstream.md#k8s-secret-refresh). The rule, per Secret, never goes back to older content:

- no API copy (never read, forbidden, API down at start and nothing kept): the mount;
- the mount shows content the agent knows to be superseded: the API copy. Superseded are every payload the
  API later replaced, and every payload the mount showed while the watch was live and said otherwise (the
  mount only lags: the API server is where the kubelet reads);
- the watch is live: the API copy (the mount equals it, or lags behind it);
- the watch is broken (or the copy was only kept from before an agent restart) and the mount shows a payload
  never seen superseded: the mount. The Secret changed while the API was out of sight, and the kubelet
  still reads the API server.
A watch that died without a word is live until its read timeout (75 s) notices; a volume that moved past it
meanwhile waits that long, then the relist brings the same payload over the API.

The API copy is materialised as files under `<config dir>/.api-secrets/<volume>/<key>` (mode 0600, the
memory-backed config volume, which already holds config.yml with the same values), laid out like a mount,
so `read_inputs` reads it with the same parsing, checks and limits as the mounted one: render sees one input.
Beside each, `<volume>.json` keeps the Secret's name, resourceVersion, payload fingerprint and the superseded
fingerprints, so an agent restarted while the API is unreachable does not fall back to a stale mount. Content
never leaves these files: not in logs, status, Events or metrics.

Everything here runs in the pipeline's render thread (overrides, settled) or on its loop (absorb); a lock
keeps them apart.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core import metrics
from ..core.write import DIR_MODE, write_atomic
from ..mounted.secret_volume import list_keys
from .change import Change
from .secret_api import SecretCopy, data_fingerprint

log = logging.getLogger(__name__)

STORE_NAME = ".api-secrets"
MAX_SUPERSEDED = 32  # fingerprints remembered per Secret: far more rotations than one kubelet delay holds
MAX_KEY_BYTES = 1 << 20  # a Secret is at most 1 MiB (API server); more on a mount is fingerprinted unread
# At start, how long the first render waits for every watch's first answer (a copy, or an error such as 403 or
# a refused connection, which come at once). Rendering before it could restart the registry onto a stale mount
# only to restart it again when the copy arrives; an API server that does not answer at all leaves the mount.
START_GRACE_SECONDS = 5.0


@dataclass
class _Volume:
    name: str  # the Secret's name
    api: SecretCopy | None = None
    live: bool = False  # the watch delivered this copy and has not failed since
    answered: bool = False  # the watch has said something (a copy or an error) since the agent started
    superseded: dict[str, None] = field(default_factory=dict)  # ordered set of fingerprints
    written: str | None = None  # fingerprint of the files under the store
    pending_lag: dict[str, list] = field(default_factory=dict)  # API fingerprint -> [seen at, mount behind?]
    chosen: tuple[str, str | None] = ("mount", None)  # (path, fingerprint) of the last render
    applied: str | None = None  # fingerprint of the payload of the last applied config


def mount_fingerprint(directory: Path) -> str | None:
    """The fingerprint of what a Secret volume shows now; None when it is not mounted."""
    if not directory.is_dir():
        return None
    data: dict[str, bytes] = {}
    for key in list_keys(directory):
        try:
            # O_NONBLOCK and a regular-file check: a FIFO or device in a volume must not block or flood the
            # render (the reader proper refuses such a key; here it only has to count as some payload).
            fd = os.open(directory / key, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as handle:
                if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                    raise OSError("not a regular file")
                data[key] = handle.read(MAX_KEY_BYTES + 1)
        except OSError:
            data[key] = b"\0unreadable"
    return data_fingerprint(data)


class ApiSecrets:
    def __init__(self, store_dir: Path, mount_root: Path, secrets: Mapping[str, str],
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        """`secrets`: mount directory (volume) -> the Secret's name, as --api-secret gives them."""
        self.store_dir = Path(store_dir)
        self.mount_root = Path(mount_root)
        self._clock = clock
        self._lock = threading.Lock()
        self._volumes = {volume: _Volume(name) for volume, name in secrets.items()}
        self._start_deadline = clock() + START_GRACE_SECONDS
        for volume, state in self._volumes.items():
            self._restore(volume, state)

    # ---- the loop's side -------------------------------------------------------------------------------------

    def absorb(self, change: Change) -> bool:
        """Take a Change from a SecretApiWatcher; False for any other Change."""
        if not change.source.startswith("secret:"):
            return False
        volume = change.source.split(":", 1)[1]
        with self._lock:
            state = self._volumes.get(volume)
            if state is None:
                return True
            state.answered = True
            copy = change.secret
            if not isinstance(copy, SecretCopy):
                state.live = False  # the error was logged by the watcher; the mount or the kept copy serves
                return True
            previous = state.api.fingerprint if state.api is not None else None
            state.api, state.live = copy, True
            state.superseded.pop(copy.fingerprint, None)  # content restored to an earlier payload is current
            if previous != copy.fingerprint:
                if previous is not None:
                    self._supersede(state, previous)  # the API replaced it: older, wherever it shows up
                state.pending_lag = {copy.fingerprint: [self._clock(), False]}
        return True

    def start_wait(self) -> float:
        """Seconds the first render should still wait for the watches' first answers (0: go ahead)."""
        with self._lock:
            if all(state.answered for state in self._volumes.values()):
                self._start_deadline = 0.0
            return max(0.0, self._start_deadline - self._clock())

    # ---- the render thread's side ----------------------------------------------------------------------------

    def overrides(self) -> dict[str, Path]:
        """Volume -> root to read it from, for read_inputs(..., roots=): the store where the API copy wins."""
        roots: dict[str, Path] = {}
        with self._lock:
            for volume, state in self._volumes.items():
                mount = mount_fingerprint(self.mount_root / volume)
                self._observe_lag(state, mount)
                path = self._choose(state, mount)
                if path == "api":
                    self._materialise(volume, state)
                    roots[volume] = self.store_dir
                    state.chosen = ("api", state.api.fingerprint)
                else:
                    state.chosen = ("mount", mount)
        return roots

    def settled(self, *, changed: bool) -> None:
        """After a round that ended well: count which path delivered each Secret change that was applied."""
        with self._lock:
            for state in self._volumes.values():
                path, fingerprint = state.chosen
                if changed and state.applied is not None and fingerprint != state.applied:
                    metrics.secret_changes_applied_total.labels(path=path).inc()
                state.applied = fingerprint

    # ---- the rule --------------------------------------------------------------------------------------------

    def _choose(self, state: _Volume, mount: str | None) -> str:
        if state.api is None:
            return "mount"
        if mount == state.api.fingerprint:
            return "api" if state.live else "mount"  # the same payload: only the delivery metric differs
        if mount is None:
            return "api"  # the volume is gone (or not there yet): a copy is better than none
        if mount in state.superseded:
            return "api"
        if state.live:
            if mount is not None:
                self._supersede(state, mount)  # shown while the API said otherwise: behind, never ahead
            return "api"
        return "mount"  # changed while the API was out of sight: the mount is newer than the kept copy

    def _supersede(self, state: _Volume, fingerprint: str) -> None:
        if state.api is not None and fingerprint == state.api.fingerprint:
            return
        state.superseded[fingerprint] = None
        while len(state.superseded) > MAX_SUPERSEDED:
            state.superseded.pop(next(iter(state.superseded)))

    def _observe_lag(self, state: _Volume, mount: str | None) -> None:
        """Time from the API change to the mount showing it; only for changes the mount was seen behind on."""
        for fingerprint, entry in list(state.pending_lag.items()):
            if mount == fingerprint:
                if entry[1]:
                    metrics.secret_mount_lag_seconds.observe(self._clock() - entry[0])
                del state.pending_lag[fingerprint]
            else:
                entry[1] = True

    # ---- the store -------------------------------------------------------------------------------------------

    def _materialise(self, volume: str, state: _Volume) -> None:
        copy = state.api
        assert copy is not None
        directory = self.store_dir / volume
        if state.written != copy.fingerprint:
            directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            for key, value in copy.data.items():
                if key.startswith(".") or "/" in key:
                    continue  # the API server allows neither; a leading dot would hide it from list_keys
                write_atomic(directory / key, value)
            for key in set(list_keys(directory)) - set(copy.data):
                (directory / key).unlink(missing_ok=True)
            state.written = copy.fingerprint
        self._save(volume, state)

    def _save(self, volume: str, state: _Volume) -> None:
        copy = state.api
        record = {"name": state.name, "resourceVersion": copy.resource_version if copy else None,
                  "fingerprint": state.written, "superseded": list(state.superseded)}
        write_atomic(self.store_dir / f"{volume}.json", json.dumps(record, sort_keys=True).encode())

    def _restore(self, volume: str, state: _Volume) -> None:
        """The copy an earlier agent process kept (the config volume outlives the agent container)."""
        try:
            record = json.loads((self.store_dir / f"{volume}.json").read_bytes())
            directory = self.store_dir / volume
            data = {key: (directory / key).read_bytes() for key in list_keys(directory)}
        except (OSError, ValueError):
            return
        if record.get("name") != state.name or record.get("fingerprint") != data_fingerprint(data):
            # Another Secret now (a new pod spec would be a new pod; be safe anyway), or a torn store.
            shutil.rmtree(self.store_dir / volume, ignore_errors=True)
            return
        fingerprint = record["fingerprint"]
        state.api = SecretCopy(volume=volume, name=state.name, resource_version=str(record.get("resourceVersion")),
                               data=data, fingerprint=fingerprint)
        state.written = fingerprint
        state.superseded = dict.fromkeys(f for f in record.get("superseded") or [] if isinstance(f, str))
        log.info("kept API copy of a Secret", extra={"fields": {"volume": volume, "secret": state.name,
                                                                "resource_version": state.api.resource_version}})


__all__ = ["ApiSecrets", "STORE_NAME", "mount_fingerprint"]
