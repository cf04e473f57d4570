"""berth-crd: prints the Registry CRD generated from the models, or a page built from it (the API reference, the
troubleshooting page), or checks a committed copy. A module of its own: the pages are built from `crd`'s schema, so
the command that prints all three sits above the three, not inside one of them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import crd, reasons, reference


def _version() -> str:
    """The installed Berth's version, as berth-operator and berth-agent print it for --version."""
    import importlib.metadata

    try:
        return importlib.metadata.version("berth")
    except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="berth-crd", description="Print the Registry CRD generated from the models.")
    parser.add_argument("--version", action="version", version=f"berth-crd {_version()}")
    parser.add_argument("--check", metavar="FILE", type=Path, help="exit 1 if FILE differs from the generated text")
    page = parser.add_mutually_exclusive_group()
    page.add_argument("--reference", action="store_true", help="the API reference page (docs/reference/api.md)")
    page.add_argument("--troubleshooting", action="store_true",
                      help="the troubleshooting page (docs/guide/troubleshooting.md)")
    args = parser.parse_args(argv)
    if args.reference:
        render, command = reference.render_reference, reference.REGENERATE_COMMAND
    elif args.troubleshooting:
        render, command = reasons.render_troubleshooting, reasons.REGENERATE_COMMAND
    else:
        render, command = crd.render_crd, crd.REGENERATE_COMMAND
    try:
        text = render()
    except crd.CrdError as exc:
        print(f"berth-crd: {exc}", file=sys.stderr)
        return 1
    if args.check is None:
        sys.stdout.write(text)
        return 0
    try:
        current = args.check.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"berth-crd: {exc}", file=sys.stderr)
        return 1
    if current != text:
        print(f"berth-crd: {args.check} is out of date; regenerate it with `{command}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
