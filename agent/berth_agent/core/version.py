"""The installed Berth's version, as `berth-agent --version` prints it."""

from __future__ import annotations


def berth_version() -> str:
    """The version of the installed distribution "berth"; "unknown" in a source tree that is not installed."""
    import importlib.metadata  # only here: it pulls in email, zipfile and csv

    try:
        return importlib.metadata.version("berth")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


__all__ = ["berth_version"]
