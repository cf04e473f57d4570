"""Reading one key of a Secret mounted as a volume (files may be kubelet AtomicWriter symlinks).

Errors name the source directory and key, and the spec field that asked for it; never the value.
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError


def read_key(mount_root: Path, source: str, key: str, *, why: str) -> bytes:
    """The bytes of one key of one mounted Secret. `why` names the spec field that asks for it."""
    directory = mount_root / source
    where = f"{source}/{key}"
    if key.startswith("..") or "/" in key:
        raise InputError(where, f"is not a usable Secret key (asked for by {why})")
    if not directory.is_dir():
        raise InputError(where, f"the Secret volume {source}/ is not mounted (asked for by {why})")
    path = directory / key
    if not path.exists():
        present = ", ".join(list_keys(directory)) or "none"
        raise InputError(where, f"key {key!r} is missing from the Secret mounted at {source}/ "
                         f"(asked for by {why}; keys present: {present})")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(where, f"cannot be read: {exc.strerror or type(exc).__name__}") from None
    if not data.strip():
        raise InputError(where, f"is empty (asked for by {why})")
    return data


def read_text(mount_root: Path, source: str, key: str, *, why: str) -> str:
    """A key's value as text with surrounding whitespace removed (`kubectl create secret --from-file` keeps
    a trailing newline)."""
    data = read_key(mount_root, source, key, why=why)
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InputError(f"{source}/{key}", "is not UTF-8 text") from None


def list_keys(directory: Path) -> list[str]:
    """The visible keys of a mounted Secret (AtomicWriter's `..data` and `..<timestamp>` entries excluded)."""
    try:
        return sorted(entry.name for entry in directory.iterdir() if not entry.name.startswith(".."))
    except OSError:
        return []
