"""The pipeline's settings (commands/run.py fills them from the agent's flags and environment)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..render.paths import RenderPaths

RETRY_SECONDS = 5.0  # after a transient failure (a key not live yet, a registry that did not come up)
# Reading bounded inputs and rendering takes milliseconds; 30 s means a read is stuck (a hung volume).
RENDER_TIMEOUT_SECONDS = 30.0


@dataclass
class PipelineSettings:
    config_dir: Path = Path("/etc/berth")
    data_dir: Path = Path("/var/lib/registry")
    mount_root: Path = Path("/var/run/berth")
    distribution: str | None = None  # "2" or "3"; default: the spec's (from its image)
    quiet_seconds: float = 0.03
    max_wait_seconds: float = 2.0
    restart_timeout: float | None = None  # default: the drain timeout + 10 s
    retry_seconds: float = RETRY_SECONDS
    preflight: bool = True
    render_timeout: float = RENDER_TIMEOUT_SECONDS
    state_dir: Path | None = None  # berth-supervise's BERTH_STATE_DIR (default: the config dir)
    resync_seconds: float = 60.0  # the mount watcher's resync: the pipeline hears from it at least this often
    listen_host: str | None = None  # replaces the host of http.addr (several local pods on one machine)
    outbox_url: str = RenderPaths.outbox_url  # the notification endpoint config.yml names: the agent's outbox relay
