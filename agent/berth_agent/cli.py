"""berth-agent: `render` prints a config once; `run` is the sidecar that keeps the registry configured and serves
/startupz, /readyz, /livez and Prometheus /metrics on --health-addr (default 0.0.0.0:8081)."""

from __future__ import annotations

import argparse
import sys

from .commands import render as render_command
from .commands import run as run_command
from .core.version import berth_version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="berth-agent", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"berth-agent {berth_version()}")
    subcommands = parser.add_subparsers(dest="command", required=True)
    render_command.add_parser(subcommands)
    run_command.add_parser(subcommands)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
