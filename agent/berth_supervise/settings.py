"""berth-supervise's settings, from its environment (the operator's pod template sets them)."""

from __future__ import annotations

import os
from pathlib import Path

from .protocol import DEFAULT_CONFIG, HANDOVER_NAME, handover_path


def berth_version() -> str:
    """The installed Berth's version, for --version."""
    # Imported only here: importlib.metadata pulls in email, zipfile and typing (3 MiB in every registry pod).
    import importlib.metadata

    try:
        return importlib.metadata.version("berth")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"

USAGE = f"""usage: berth-supervise [-h | --help | --version]

The registry container's command: runs `$BERTH_REGISTRY_BIN serve $BERTH_CONFIG` as a child once the config
exists, restarts it when it exits, starts a successor when the agent asks (SIGUSR1 on 2.8, SIGHUP on the held
socket of 3.x), runs garbage-collect on SIGUSR2, and passes SIGTERM and SIGINT on as SIGTERM. It takes no
arguments; it reads its environment:

  BERTH_CONFIG        the registry's config file (default {DEFAULT_CONFIG}); waited for until it exists
  BERTH_REGISTRY_BIN  the registry binary, a path or a name in PATH (default registry)
  BERTH_STATE_DIR     where it writes supervisor.pid, registry-exit, registry-output, registry-metrics and the
                      garbage-collect files (default: the config's directory)
  BERTH_HANDOVER      the file naming the registry to replace (default: {HANDOVER_NAME} beside the config)
  BERTH_LISTEN_ADDR   HOST:PORT or :PORT: on Distribution 3, hold this listening socket for every registry
                      (socket activation); unset, each registry binds http.addr itself
  BERTH_DEBUG_PORTS   loopback ports (space-separated) for each registry's debug listener and metrics;
                      unset, no debug listener
  BERTH_DEBUG_HOST    the debug listeners' address (default 127.0.0.1)

docs/design.md section 4.3 describes it.
"""


class Settings:
    """A plain class, not a dataclass: dataclasses imports inspect, a megabyte and a half of every pod's memory."""

    def __init__(self, *, config: Path, registry_bin: str, handover: Path, state: Path,
                 debug_ports: tuple[int, ...], debug_host: str, listen: str | None) -> None:
        self.config = config  # BERTH_CONFIG
        self.registry_bin = registry_bin  # BERTH_REGISTRY_BIN: a path, or a name looked up in PATH
        self.handover = handover  # BERTH_HANDOVER (default: beside the config)
        self.state = state  # BERTH_STATE_DIR (default: the config's directory)
        self.debug_ports = debug_ports  # BERTH_DEBUG_PORTS: loopback ports for each registry's debug listener
        self.debug_host = debug_host  # BERTH_DEBUG_HOST
        self.listen = listen  # BERTH_LISTEN_ADDR: hold this listening socket for every registry (3.x only)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        config = Path(env.get("BERTH_CONFIG") or DEFAULT_CONFIG)
        ports = tuple(int(word) for word in (env.get("BERTH_DEBUG_PORTS") or "").split() if word.isdigit())
        return cls(
            config=config,
            registry_bin=env.get("BERTH_REGISTRY_BIN") or "registry",
            handover=Path(env.get("BERTH_HANDOVER") or handover_path(config)),
            state=Path(env.get("BERTH_STATE_DIR") or config.parent),
            debug_ports=ports,
            debug_host=env.get("BERTH_DEBUG_HOST") or "127.0.0.1",
            listen=env.get("BERTH_LISTEN_ADDR") or None,
        )


__all__ = ["DEFAULT_CONFIG", "USAGE", "Settings", "berth_version"]
