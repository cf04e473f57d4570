"""Reading one key of a Secret mounted as a volume, confined to that volume and bounded in size.

The kubelet's AtomicWriter lays a Secret out as `key -> ..data/key`, `..data -> ..TIMESTAMP`, and the payload in
`..TIMESTAMP/key` (docs/upstream.md#k8s-atomic-writer). A key is read only if those links resolve, inside the volume
directory, to a regular file no larger than the key's limit (docs/decisions/0013-inputs-confined-bounded-strict.md). A
link that leaves the volume, a FIFO, a device, a socket or a directory is an InputError naming the volume and key. The
links are followed by hand and the file is then opened one component at a time relative to the volume's directory, each
with O_NOFOLLOW, and the last with O_NONBLOCK and checked again with fstat: a swap between the check and the read can
neither lead outside the volume nor block the reader (a FIFO opened non-blocking returns at once, and is then refused).

Errors name the source directory and key, and the spec field that asked for it; never the value, and never a
link's target (it could be any path on the node).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..core.errors import InputError

KiB = 1024
MiB = 1024 * KiB
# Bounds per key (docs/decisions/0013-inputs-confined-bounded-strict.md). The API server refuses a Secret over 1 MiB in
# total, so no key of a real Secret volume is larger than that; the bounds keep a local mount root or a planted file
# from feeding the agent (and the registry's config) anything bigger.
SCALAR_LIMIT = 64 * KiB  # URLs, the http secret, COSI's scalar keys: a few hundred bytes in practice
DOCUMENT_LIMIT = 1 * MiB  # TLS certificate chains and keys, COSI BucketInfo JSON: a Secret's own limit
HTPASSWD_LIMIT = 4 * MiB  # ~60 000 bcrypt entries; larger than a Secret may be, for local runs
TRUST_LIMIT = 4 * MiB  # token auth bundle or JWKS: ~2 000 certificates; a public CA bundle is ~220 KiB

_MAX_LINKS = 8  # links followed per key: AtomicWriter uses two
_RETRIES = 3  # resolve-and-open attempts when a swap replaces the path under the reader
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symbolic link"),
)


class _Moved(Exception):
    """The path changed between resolving and opening it (an AtomicWriter swap): resolve again. Its message
    is what to report when it keeps happening."""


def file_kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def read_key(mount_root: Path, source: str, key: str, *, why: str, limit: int) -> bytes:
    """The bytes of one key of one mounted Secret. `why` names the spec field that asks for it; `limit` is the
    largest size accepted, in bytes."""
    directory = Path(mount_root) / source
    where = f"{source}/{key}"
    if key.startswith("..") or "/" in key or key in ("", "."):
        raise InputError(where, f"is not a usable Secret key (asked for by {why})")
    if not directory.is_dir():
        raise InputError(where, f"the Secret volume {source}/ is not mounted (asked for by {why})")
    for _ in range(_RETRIES):
        try:
            data = _read_confined(directory, source, key, where, why, limit)
            break
        except _Moved as moved:
            problem = str(moved)
    else:
        raise InputError(where, f"{problem} (asked for by {why})")
    if not data.strip():
        raise InputError(where, f"is empty (asked for by {why})")
    return data


def read_text(mount_root: Path, source: str, key: str, *, why: str, limit: int = SCALAR_LIMIT) -> str:
    """A key's value as text with surrounding whitespace removed (`kubectl create secret --from-file` keeps
    a trailing newline)."""
    data = read_key(mount_root, source, key, why=why, limit=limit)
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InputError(f"{source}/{key}", "is not UTF-8 text") from None


def _resolve(volume: str, key: str, source: str, where: str, why: str) -> list[str]:
    """The path of `key` relative to `volume` after following its links, which must all stay inside."""
    pending = [key]
    resolved: list[str] = []
    links = 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            if not resolved:
                raise InputError(where, f"is a link that leaves the Secret volume {source}/ (asked for by {why})")
            resolved.pop()
            continue
        path = os.path.join(volume, *resolved, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            if not resolved and links == 0:
                present = ", ".join(list_keys(Path(volume))) or "none"
                raise InputError(where, f"key {key!r} is missing from the Secret mounted at {source}/ "
                                 f"(asked for by {why}; keys present: {present})") from None
            # A link to nothing, or into a payload directory the kubelet deleted as we read: look again.
            raise _Moved("is a link to a file that does not exist") from None
        except NotADirectoryError:
            raise InputError(where, f"is a link through something that is not a directory (asked for by "
                             f"{why})") from None
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise InputError(where, f"is a chain of more than {_MAX_LINKS} links (asked for by {why})")
            target = os.readlink(path)
            if os.path.isabs(target):
                inside = os.path.relpath(target, volume)
                if inside == ".." or inside.startswith("../") or os.path.isabs(inside):
                    raise InputError(where, f"is a link that leaves the Secret volume {source}/ "
                                     f"(asked for by {why})")
                resolved = []
                target = inside
            pending = target.split("/") + pending
            continue
        if pending and not stat.S_ISDIR(info.st_mode):
            raise InputError(where, f"is a link through something that is not a directory (asked for by {why})")
        resolved.append(name)
    if not resolved:
        raise InputError(where, f"is a link to the Secret volume {source}/ itself (asked for by {why})")
    return resolved


def _read_confined(directory: Path, source: str, key: str, where: str, why: str, limit: int) -> bytes:
    volume = os.path.realpath(directory)
    parts = _resolve(volume, key, source, where, why)
    final = os.lstat(os.path.join(volume, *parts))
    if not stat.S_ISREG(final.st_mode):
        raise InputError(where, f"is {file_kind(final.st_mode)}, not a regular file (asked for by {why})")
    fds: list[int] = []
    try:
        try:
            fds.append(os.open(volume, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            for name in parts[:-1]:
                fds.append(os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                   dir_fd=fds[-1]))
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                         dir_fd=fds[-1])
            fds.append(fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
                # Swapped for a link, a socket or nothing since it was checked: look again.
                raise _Moved(f"changed while it was read ({errno.errorcode.get(exc.errno, exc.errno)})") from None
            raise InputError(where, f"cannot be read: {exc.strerror or type(exc).__name__}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(where, f"is {file_kind(info.st_mode)}, not a regular file (asked for by {why})")
        if info.st_size > limit:
            raise _too_big(where, why, limit)
        return _read_at_most(fd, limit, where, why)
    finally:
        for opened in reversed(fds):
            os.close(opened)


def _read_at_most(fd: int, limit: int, where: str, why: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            chunk = os.read(fd, min(limit + 1 - size, 1 * MiB))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # grew after fstat
                raise _too_big(where, why, limit)
    except OSError as exc:
        raise InputError(where, f"cannot be read: {exc.strerror or type(exc).__name__}") from None
    return b"".join(chunks)


def _too_big(where: str, why: str, limit: int) -> InputError:
    return InputError(where, f"is larger than {_size(limit)}, the limit for this key (asked for by {why}; "
                      "docs/decisions/0013-inputs-confined-bounded-strict.md)")


def _size(limit: int) -> str:
    if limit % MiB == 0:
        return f"{limit // MiB} MiB"
    if limit % KiB == 0:
        return f"{limit // KiB} KiB"
    return f"{limit} bytes"


def list_keys(directory: Path) -> list[str]:
    """The visible keys of a mounted Secret (AtomicWriter's `..data` and `..<timestamp>` entries excluded)."""
    try:
        return sorted(entry.name for entry in directory.iterdir() if not entry.name.startswith(".."))
    except OSError:
        return []


def volume_fingerprint(directory: Path) -> tuple:
    """What a volume holds now, by identity rather than content: the `..data` target and, for every visible
    key, the device, inode, size and mtime of what it leads to. A kubelet swap writes new files in a new
    directory and a local edit changes size or mtime, so a different fingerprint means the inputs moved."""
    entries: list[tuple] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return ("absent",)
    for name in names[:256]:  # a Secret has a few keys; a bound keeps a planted directory from costing much
        path = os.path.join(directory, name)
        try:
            if name.startswith(".."):
                entries.append((name, os.readlink(path)) if os.path.islink(path) else (name,))
                continue
            info = os.stat(path)  # stat only: never opens, so a FIFO cannot block it
            entries.append((name, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_mode))
        except OSError as exc:
            entries.append((name, exc.errno))
    return tuple(entries)
