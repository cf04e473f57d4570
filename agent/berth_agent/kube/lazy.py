"""Load the official kubernetes client without importing all ~870 of its modules.

`import kubernetes` executes package initialisers that import every API class and every model (about 55 MiB
of resident memory here, most of the agent's budget of 70 MiB). The agent uses two API classes and a handful
of models. `install()` puts lazy stand-ins for the packages `kubernetes`, `kubernetes.client`,
`kubernetes.client.api` and `kubernetes.client.models` into sys.modules: each resolves a name on first use
from the import table of the real `__init__.py` (read as text, not executed), so the client behaves the
same and only what is touched gets loaded. The kubernetes client itself is not modified.

`kubernetes.config` is lazy too: its `__init__` imports `kube_config`, which loads requests, requests-oauthlib,
oauthlib and charset-normalizer (~150 modules, ~6 MiB) for kubeconfig files; a pod's agent only runs
`load_incluster_config`. A function the `__init__` defines itself (`load_config`) runs the real `__init__` first.
The client's REST layer imports one function of requests (`requests.utils.should_bypass_proxies`): requests and
the character detection it imports (charset-normalizer, ~2.5 MiB, used only to guess a response's encoding) are
deferred packages (core/deferred.py), so that import loads `requests.utils` and what it needs, not the package.

Called by `berth-agent run` in the agent process only, before anything imports kubernetes.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path

from ..core.deferred import defer

LAZY_PACKAGES = ("kubernetes", "kubernetes.client", "kubernetes.client.api", "kubernetes.client.models",
                 "kubernetes.config")
# `from kubernetes.x import Name` and `from .x import (A, B,\n C)`: a package's import table.
_FROM_IMPORT = re.compile(r"^from (kubernetes[\w.]*|\.[\w.]*) import (\([^)]*\)|[\w, ]+?)\s*$", re.M)
# Imported by the client's modules for one function (requests) or not at all (charset_normalizer, by requests).
DEFERRED_PACKAGES = ("requests", "charset_normalizer")
_DEFINED = re.compile(r"^def (\w+)\(", re.M)
_VERSION = re.compile(r'^__version__ = "([^"]+)"', re.M)


class _LazyPackage(types.ModuleType):
    """A package whose attributes are imported on first access (PEP 562 style, as a module subclass)."""

    def __init__(self, name: str, init_source: str):
        super().__init__(name)
        self._defined = set(_DEFINED.findall(init_source))

    def _lazy_table(self) -> dict[str, str]:
        """Name -> the module it comes from, read from the real `__init__.py` when asked: a name is resolved once
        (then set on the package), and kept tables of the client's ~840 names cost 0.3 MiB for a handful used."""
        source = Path(self.__file__).read_text(encoding="utf-8")
        return {attr.strip(): _absolute(module, self.__name__)
                for module, attrs in _FROM_IMPORT.findall(source)
                for attr in attrs.strip("()").split(",") if attr.strip() and module != "."}

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in self._defined:  # defined by the __init__ itself: run it, in this module
            self.__spec__.loader.exec_module(self)
            return self.__dict__[attr]
        module_name = self._lazy_table().get(attr)
        if module_name is None:
            try:  # a submodule or subpackage (kubernetes.config, kubernetes.client.rest, ...)
                value = importlib.import_module(f"{self.__name__}.{attr}")
            except ModuleNotFoundError:
                raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}") from None
        else:
            value = getattr(importlib.import_module(module_name), attr)
        setattr(self, attr, value)
        return value

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._lazy_table()))


def _absolute(module: str, package: str) -> str:
    """`.x` in `package` as `package.x` (`from . import x` names submodules: not in the table)."""
    return package + module if module.startswith(".") else module


def install() -> bool:
    """Make later `import kubernetes...` lazy; False (and nothing done) if kubernetes is already imported."""
    if any(name in sys.modules for name in LAZY_PACKAGES):
        return False
    for name in DEFERRED_PACKAGES:
        defer(name)
    for name in LAZY_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or spec.submodule_search_locations is None:
            raise ImportError(f"cannot find the package {name}")
        source = Path(spec.origin).read_text(encoding="utf-8")
        module = _LazyPackage(name, source)
        module.__spec__ = spec
        module.__file__ = spec.origin
        module.__path__ = list(spec.submodule_search_locations)
        module.__package__ = name
        module.__loader__ = spec.loader
        version = _VERSION.search(source)
        if version:
            module.__version__ = version.group(1)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    return True


__all__ = ["install"]
