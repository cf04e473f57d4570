"""The one error type for bad input, shared by the renderer, the mount reader and the agent."""

from __future__ import annotations


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


class PreflightError(Exception):
    """A new config that would not work (checked before any restart): the message names the config field and
    never holds a secret."""
