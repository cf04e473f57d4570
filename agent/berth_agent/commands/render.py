"""`berth-agent render`: print the config.yml a Registry and its mounted Secrets render to.

Exit 0 with the config on stdout; exit 2 with one line on stderr (naming the field, or the mounted file and
key) for bad input. The error never contains a secret value and is never a stack trace.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from berth_api import Registry, describe_validation_error

from ..core.errors import InputError
from ..mounted.mounts import DEFAULT_MOUNT_ROOT, read_inputs
from ..mounted.registry_yaml import RegistryFileProblem, read_registry_document
from ..render.config import RenderPaths, render

EXIT_BAD_INPUT = 2
RENDER_TIMEOUT_SECONDS = 30  # as the agent's pipeline: bounded inputs read and render in milliseconds


@contextlib.contextmanager
def _time_bound(seconds: int) -> Iterator[None]:
    """SIGALRM after `seconds` ends a read that is stuck (a hung volume) with an InputError (main thread only:
    called in process from another thread, it runs unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(_signum, _frame):
        raise InputError("render", f"reading the inputs and rendering did not finish within {seconds}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render", help="print the registry config.yml for a Registry", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--registry", required=True, type=Path, metavar="FILE", help="Registry manifest (YAML)")
    parser.add_argument("--mounts", type=Path, default=DEFAULT_MOUNT_ROOT, metavar="DIR",
                        help=f"mount root holding cosi/, htpasswd/, http-secret/, redis/, tls/ "
                             f"(default {DEFAULT_MOUNT_ROOT})")
    parser.add_argument("--distribution", choices=("2", "3"), default=None,
                        help="Distribution major version (default: from spec.distribution or the image tag)")
    parser.add_argument("--config-dir", type=Path, default=RenderPaths.config_dir, metavar="DIR",
                        help=f"where the agent writes config.yml, htpasswd and tls/ (default {RenderPaths.config_dir})")
    parser.add_argument("--data-dir", type=Path, default=RenderPaths.data_dir, metavar="DIR",
                        help=f"filesystem storage root (default {RenderPaths.data_dir})")
    parser.set_defaults(func=run)


def load_registry(path: Path) -> Registry:
    """Parse and validate a Registry manifest as the API server would (types exactly, apiVersion and kind);
    raises InputError naming the file or the API field."""
    try:
        document = read_registry_document(path)
    except RegistryFileProblem as exc:
        raise InputError(str(path), str(exc)) from None
    try:
        return Registry.model_validate(document)
    except ValidationError as exc:
        raise InputError(str(path), describe_validation_error(exc)) from None


def run(args: argparse.Namespace) -> int:
    try:
        with _time_bound(RENDER_TIMEOUT_SECONDS):
            registry = load_registry(args.registry)
            name = registry.metadata.get("name")  # messages name the objects Berth made for it
            inputs = read_inputs(registry.spec, args.mounts, registry=name)
            rendered = render(registry.spec, inputs, distribution=args.distribution,
                              paths=RenderPaths(config_dir=args.config_dir, data_dir=args.data_dir), registry=name)
    except InputError as exc:
        message = " ".join(str(exc).split())  # one line, whatever the message held
        print(f"berth-agent render: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.buffer.write(rendered.config)
    sys.stdout.flush()
    return 0
