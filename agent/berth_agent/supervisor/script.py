"""supervise.sh, the registry container's command: shipped as package data beside this module (the registry
image does not contain it) and written into the config volume by the agent."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ..core.write import write_atomic
from .files import SUPERVISOR_NAME


def supervisor_script() -> bytes:
    """The supervisor shipped as package data (the registry image does not contain it)."""
    return resources.files(__package__).joinpath(SUPERVISOR_NAME).read_bytes()


def install_supervisor(config_dir: Path) -> Path:
    """Write supervise.sh into the config volume; not secret, but the registry container only needs to read it."""
    target = Path(config_dir) / SUPERVISOR_NAME
    write_atomic(target, supervisor_script(), mode=0o644)
    return target


__all__ = ["install_supervisor", "supervisor_script"]
