"""The endpoints the outbox delivers to, as the agent rendered them into the config dir (render/paths.py
OUTBOX_FILE, written by the applier like every rendered file: the file on disk is what is applied)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, repr=False)
class Endpoint:
    name: str
    url: str
    headers: tuple[tuple[str, str], ...]  # header values (from the notifications Secret): never logged
    timeout: float
    threshold: int
    backoff: float
    ignored_media_types: frozenset[str]
    ignored_actions: frozenset[str]

    def __repr__(self) -> str:
        return f"Endpoint(name={self.name!r}, url={self.url!r}, headers=[{len(self.headers)} hidden])"

    def wants(self, event: dict) -> bool:
        """Distribution's ignore rules: by action, and by the target's media type."""
        target = event.get("target") or {}
        return (event.get("action") not in self.ignored_actions
                and target.get("mediaType") not in self.ignored_media_types)


def read_endpoints(path: Path) -> tuple[Endpoint, ...]:
    """The endpoints in `path`; () when there is none or no file (no notifications configured). Raises ValueError
    on a file that is not the renderer's."""
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise ValueError(f"{path.name}: {os.strerror(exc.errno or 0)}") from None
    try:
        return tuple(Endpoint(
            name=str(e["name"]), url=str(e["url"]),
            headers=tuple((str(k), str(v)) for k, values in sorted(e.get("headers", {}).items()) for v in values),
            timeout=float(e["timeout"]) or 1.0, threshold=max(1, int(e["threshold"])), backoff=float(e["backoff"]),
            ignored_media_types=frozenset(e.get("ignoredMediaTypes", ())),
            ignored_actions=frozenset(e.get("ignoredActions", ())),
        ) for e in document["endpoints"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ValueError(f"{path.name} is not the outbox's endpoint list") from None


def file_state(path: Path) -> tuple[int, int, int] | None:
    """What tells a rewritten file from the one read before (the applier replaces it whole)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


__all__ = ["Endpoint", "file_state", "read_endpoints"]
