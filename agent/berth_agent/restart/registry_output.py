"""The registry's own words: the last lines it printed, kept by berth-supervise in the state dir.

berth-supervise copies the registry's stdout and stderr, whole lines, redacted, into `registry-output` (and to the
container log); when a registry exits it copies that file to `registry-output.1` and empties it
for the next start. So `.1` holds what the last registry to exit said, `registry-output` what the current one
says. The agent quotes the first error line in its failure message, scrubbed of whatever could be a secret,
and keeps the file bounded (the supervisor empties it only on an exit).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from berth_supervise.protocol import OUTPUT_NAME, PREVIOUS_OUTPUT_NAME

MAX_BYTES = 256 * 1024  # beyond this the agent empties the file: only the last start's lines matter
MAX_LINE = 300
_READ = 64 * 1024  # the first error comes right after the start: the head of the file holds it
_ERROR = re.compile(r"level=(fatal|panic|error)|^panic:|\"level\":\"(fatal|panic|error)\"|\berror\b|\bfatal\b",
                    re.I)
_USERINFO = re.compile(r"([a-z][a-z0-9+.-]*://)[^/@\s]*@", re.I)
_LONG_RUN = re.compile(r"[A-Za-z0-9+/=_-]{24,}")  # base64 or hex: a key, a token, a hash
_KEYVALUE = re.compile(r"((?:password|passwd|secret|token|key|credential)s?[\"']?\s*[:=]\s*)(\S+)", re.I)
_TIMESTAMP = re.compile(r"^time=\"[^\"]*\"\s*")


def scrub(text: str) -> str:
    """`text` without what could be a secret: URL userinfo, values after password=/secret=..., long runs of
    base64 or hex; one line, bounded."""
    text = " ".join(text.split())
    text = _TIMESTAMP.sub("", text)
    text = _USERINFO.sub(r"\1<redacted>@", text)
    text = _KEYVALUE.sub(r"\1<redacted>", text)
    text = _LONG_RUN.sub("<redacted>", text)
    return text[:MAX_LINE]


def first_error(config_dir: Path) -> str | None:
    """The first error line the last registry to exit printed (else the current one), scrubbed; None if none."""
    for name in (PREVIOUS_OUTPUT_NAME, OUTPUT_NAME):
        try:
            with open(Path(config_dir) / name, "rb") as stream:
                head = stream.read(_READ).decode(errors="replace")
        except OSError:
            continue
        for line in head.splitlines():
            if _ERROR.search(line) and "berth-supervise" not in line:
                return scrub(line)
    return None


def with_registry_error(detail: str, config_dir: Path) -> str:
    """`detail` followed by what the registry said, when it said something."""
    said = first_error(config_dir)
    return f"{detail}; the registry said: {said}" if said else detail


def keep_bounded(config_dir: Path, limit: int = MAX_BYTES) -> None:
    """Empty registry-output once it is over `limit` (tee appends, so it carries on at the new end)."""
    path = Path(config_dir) / OUTPUT_NAME
    try:
        if path.stat().st_size > limit:
            os.truncate(path, 0)
    except OSError:
        pass


__all__ = ["first_error", "keep_bounded", "scrub", "with_registry_error"]
