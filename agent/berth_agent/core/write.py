"""Atomic writes into the config volume: the registry only ever sees a whole old file or a whole new one.

Temp file in the same directory (so rename(2) stays on one file system and is atomic), fsync the data, rename
over the target, fsync the directory so the rename itself survives a crash. Files hold secrets (S3 keys,
the http secret, the htpasswd hashes, the TLS key): mode 0600 from the moment they exist.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path

SECRET_MODE = 0o600
DIR_MODE = 0o700
LOCAL_HTTP_SECRET_NAME = "http-secret"  # beside config.yml: the agent's own secret when none is mounted


def write_atomic(path: Path, data: bytes, *, mode: int = SECRET_MODE) -> bool:
    """Write data to path atomically; False (and no write) when the file already holds exactly that data.

    Skipping unchanged files keeps the htpasswd file's mtime still, which is what the registry watches
    (docs/upstream.md#dist-htpasswd-live). An OSError (a full or read-only volume) names `path` and the action
    `writing`, never the temp file, so the pipeline can report `ENOSPC writing /etc/berth/config.yml`.
    """
    path = Path(path)
    try:
        return _write_atomic(path, data, mode)
    except OSError as exc:
        raise name_os_error(exc, "writing", path) from None


def name_os_error(exc: OSError, action: str, path: Path) -> OSError:
    """Mark exc with the file it is about and what was being done to it (paths only, never contents)."""
    exc.filename, exc.filename2 = str(path), None
    exc.action = action  # type: ignore[attr-defined]  read by errors.describe_internal_error
    return exc


def _write_atomic(path: Path, data: bytes, mode: int) -> bool:
    try:
        if path.read_bytes() == data and (path.stat().st_mode & 0o777) == mode:
            return False
    except (FileNotFoundError, NotADirectoryError):
        pass
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        os.replace(temp_name, path)
    except BaseException:
        try:
            os.unlink(temp_name)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)
    return True


def fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_tree(root: Path, files: Mapping[str, bytes], *, mode: int = SECRET_MODE) -> list[str]:
    """Write each relative path under root atomically; returns the paths whose content changed."""
    changed = []
    for relative, data in files.items():
        target = safe_join(root, relative)
        if write_atomic(target, data, mode=mode):
            changed.append(relative)
    return changed


def remove_stale(root: Path, keep: set[str], managed: set[str]) -> list[str]:
    """Delete files we wrote before (managed) that the new render no longer has (e.g. TLS turned off)."""
    removed = []
    for relative in sorted(managed - keep):
        target = safe_join(root, relative)
        try:
            target.unlink()
            removed.append(relative)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise name_os_error(exc, "removing", target) from None
    return removed


def safe_join(root: Path, relative: str) -> Path:
    """root/relative, refusing absolute paths and '..' so a render can never write outside the config dir."""
    candidate = Path(relative)
    if candidate.is_absolute() or ".." in candidate.parts or not candidate.parts:
        raise ValueError(f"refusing to write outside the config directory: {relative!r}")
    return Path(root) / candidate


def local_http_secret(config_dir: Path) -> str:
    """The http.secret to render when no http-secret/ is mounted (outside Kubernetes): made once, kept.

    Without one each registry process makes up its own, and an upload started before a reload fails after it
    (`blob upload invalid: invalid secret`, docs/upstream.md#dist-http-secret). Kept mode 0600 beside config.yml, so
    an agent restart renders the same value and leaves the running registry alone.
    """
    path = Path(config_dir) / LOCAL_HTTP_SECRET_NAME
    try:
        value = path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        value = ""
    if not value:
        value = secrets.token_urlsafe(32)
        write_atomic(path, (value + "\n").encode())
    elif path.stat().st_mode & 0o077:
        os.chmod(path, SECRET_MODE)  # someone loosened it: a signing key stays ours alone
    return value
