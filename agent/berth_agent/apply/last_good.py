"""The last config verified good: a copy of it (config.yml and the files beside it) on the config volume.

Written after a registry was seen answering on that config, read by a new agent process (after a crash or a
kill -9 of the agent) that finds config.yml on disk not served: that is the config to roll back to. Layout:
`last-good/<identity>/` holds the files, `last-good/marker.json` names the identity (Rendered.identity) and
each file's sha256 and is replaced last (atomically), so a marker never names a half-written copy. Mode 0600 like
every file here: the copy holds the same secrets as config.yml.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from berth_supervise.protocol import CONFIG_NAME

from ..core.write import write_atomic, write_tree
from ..render.config import Rendered

GOOD_DIR = "last-good"
MARKER_NAME = "marker.json"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_good(config_dir: Path, rendered: Rendered) -> None:
    """Record `rendered` as the last config verified good (no-op when it already is)."""
    root = Path(config_dir) / GOOD_DIR
    marker = {"identity": rendered.identity,
              "files": {name: _sha(data) for name, data in sorted({CONFIG_NAME: rendered.config,
                                                                   **rendered.files}.items())}}
    try:
        if json.loads((root / MARKER_NAME).read_text()) == marker:
            return
    except (OSError, ValueError):
        pass
    copy = root / rendered.identity
    write_tree(copy, {CONFIG_NAME: rendered.config, **rendered.files})
    write_atomic(root / MARKER_NAME, json.dumps(marker, sort_keys=True).encode())
    for entry in root.iterdir():  # older copies: the marker no longer names them
        if entry.is_dir() and entry.name != rendered.identity:
            shutil.rmtree(entry, ignore_errors=True)


def load_good(config_dir: Path) -> Rendered | None:
    """The last config verified good, or None (no marker, or a copy that does not match it)."""
    root = Path(config_dir) / GOOD_DIR
    try:
        marker = json.loads((root / MARKER_NAME).read_text())
        identity, files = str(marker["identity"]), dict(marker["files"])
        copy = root / identity
        data = {name: (copy / name).read_bytes() for name in files}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if any(_sha(data[name]) != digest for name, digest in files.items()) or CONFIG_NAME not in data:
        return None
    good = Rendered(config=data.pop(CONFIG_NAME), files=data)
    return good if good.identity == identity else None


__all__ = ["GOOD_DIR", "load_good", "save_good"]
