"""The one error type for bad input, shared by the renderer, the mount reader and the agent; and how an
unexpected error is described without its message."""

from __future__ import annotations

import errno
import os
import traceback
from pathlib import Path


class InputError(Exception):
    """Bad input: a field of the Registry or a mounted Secret file that cannot be used.

    `source` names where the problem is: an API field path (``spec.redis.secret``) or a mounted file and
    key, optionally with a JSON path (``cosi/BucketInfo: spec.secretS3.accessKeyID``). `message` says what
    is wrong. Neither ever contains a secret value: callers build messages from names, never from contents.
    """

    def __init__(self, source: str, message: str):
        super().__init__(source, message)
        self.source = source
        self.message = message

    def __str__(self) -> str:
        return f"{self.source}: {self.message}"

    def __repr__(self) -> str:
        return f"InputError({self.source!r}, {self.message!r})"


def describe_internal_error(exc: BaseException) -> str:
    """`internal error OSError ENOSPC writing /etc/berth/config.yml (at write.py:56)`: the type, for an OSError
    the errno name and the file and action (write.py names them), and where it was raised. Never the message,
    which could quote a file."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f"{Path(frame.filename).name}:{frame.lineno}" if frame else "?"
    detail = ""
    if isinstance(exc, OSError) and exc.errno:
        detail = f" {errno.errorcode.get(exc.errno, str(exc.errno))}"
        if exc.filename is not None:
            detail += f" {getattr(exc, 'action', 'on')} {os.fsdecode(exc.filename)}"
    return f"internal error {type(exc).__name__}{detail} (at {where})"


class PreflightError(Exception):
    """A new config that would not work (checked before any restart): the message names the config field and
    never holds a secret."""
