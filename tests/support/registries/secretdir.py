"""Secret volumes laid out on disk exactly as the kubelet's AtomicWriter writes them
(docs/upstream.md#k8s-atomic-writer).

    DIR/..2026_11_29_15_20_01.000000001/KEY   the payload
    DIR/..data -> ..2026_11_29_15_20_01.000000001
    DIR/KEY -> ..data/KEY

An update writes a new timestamped directory, points `..data_tmp` at it, renames `..data_tmp` over `..data`
(the one atomic step), adds and removes the per-key links, then deletes the old directory. Unchanged payloads
are not rewritten (swap_secret_dir returns False).
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path

DATA_LINK = "..data"
DATA_TMP_LINK = "..data_tmp"
_sequence = itertools.count(1)

SecretData = Mapping[str, bytes | str]


def _timestamped_name() -> str:
    # The kubelet names the directory by wall-clock time; a counter keeps two swaps in one tick distinct.
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    return f"..{stamp}.{os.getpid() % 1000:03d}{next(_sequence):06d}"


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def _write_payload(directory: Path, data: SecretData, mode: int) -> str:
    name = _timestamped_name()
    payload = directory / name
    payload.mkdir(mode=0o755)
    for key, value in data.items():
        if "/" in key or key.startswith(".."):
            raise ValueError(f"invalid Secret key {key!r}")
        path = payload / key
        path.write_bytes(_as_bytes(value))
        path.chmod(mode)
    return name


def current_data(directory: Path) -> dict[str, bytes]:
    """The payload the volume shows now, read through the links."""
    directory = Path(directory)
    return {
        entry.name: entry.read_bytes()
        for entry in sorted(directory.iterdir())
        if not entry.name.startswith("..") and entry.exists()
    }


def write_secret_dir(directory: Path, data: SecretData, *, mode: int = 0o644) -> Path:
    """Create the volume at `directory` (which must not exist or be empty) with `data` as its payload."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty; use swap_secret_dir to update it")
    name = _write_payload(directory, data, mode)
    os.symlink(name, directory / DATA_TMP_LINK)
    os.rename(directory / DATA_TMP_LINK, directory / DATA_LINK)
    for key in data:
        os.symlink(f"{DATA_LINK}/{key}", directory / key)
    return directory


def swap_secret_dir(directory: Path, data: SecretData, *, mode: int = 0o644) -> bool:
    """Replace the payload atomically as the kubelet does; False (and nothing touched) when it is unchanged."""
    directory = Path(directory)
    new = {key: _as_bytes(value) for key, value in data.items()}
    if current_data(directory) == new:
        return False
    old_name = os.readlink(directory / DATA_LINK)
    old_keys = {entry.name for entry in directory.iterdir() if not entry.name.startswith("..")}
    name = _write_payload(directory, new, mode)
    tmp = directory / DATA_TMP_LINK
    if tmp.is_symlink():
        tmp.unlink()
    os.symlink(name, tmp)
    os.rename(tmp, directory / DATA_LINK)  # the atomic switch
    for key in new:
        if key not in old_keys:
            os.symlink(f"{DATA_LINK}/{key}", directory / key)
    for key in old_keys - set(new):
        (directory / key).unlink()
    shutil.rmtree(directory / old_name)
    return True


def swap_payload(directory: Path, keys: list[str], fill: Callable[[Path], None]) -> Path:
    """Swap in a payload the kubelet would never write, as the kubelet swaps (new directory, `..data` rename,
    per-key links): `fill(payload_dir)` makes each of `keys` there, as a symlink, a FIFO, a device... Returns
    the new payload directory."""
    directory = Path(directory)
    old_name = os.readlink(directory / DATA_LINK)
    old_keys = {entry.name for entry in directory.iterdir() if not entry.name.startswith("..")}
    name = _timestamped_name()
    payload = directory / name
    payload.mkdir(mode=0o755)
    fill(payload)
    tmp = directory / DATA_TMP_LINK
    if tmp.is_symlink():
        tmp.unlink()
    os.symlink(name, tmp)
    os.rename(tmp, directory / DATA_LINK)
    for key in keys:
        if key not in old_keys:
            os.symlink(f"{DATA_LINK}/{key}", directory / key)
    for key in old_keys - set(keys):
        (directory / key).unlink()
    shutil.rmtree(directory / old_name)
    return payload


def write_mounts(root: Path, sources: Mapping[str, SecretData]) -> Path:
    """A whole mount root: one AtomicWriter volume per source (cosi, htpasswd, http-secret, redis, tls)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for source, data in sources.items():
        write_secret_dir(root / source, data)
    return root
