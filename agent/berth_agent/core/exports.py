"""A package's public names, imported on first use (PEP 562): `from berth_agent.gc import GcRunner` works, yet importing
one module of a package does not load the rest (the agent's memory budget, docs/decisions/0037-agent-memory.md)."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if TYPE_CHECKING:  # berth-supervise loads this module too: typing at run time would cost every pod 0.45 MiB
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, whose name -> module (relative: ".run") table is `exports`."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
