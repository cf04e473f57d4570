"""Packages whose `__init__` runs on first use of a name it defines, not when a submodule is imported.

`import aiohttp` runs `aiohttp/__init__.py`, which imports the whole HTTP client: the connector (two TLS contexts
with the system's trust store loaded), the cookie jar, tracing, digest auth (~4 MiB of the agent's resident memory).
The agent uses aiohttp's client only for what a Registry turns on (the outbox's notification endpoints); it serves
its endpoints with the standard library (core/listener.py). `defer("aiohttp")` puts a stand-in for the package into
sys.modules: `import aiohttp` at the top of a module costs nothing, a submodule imports as usual (`from aiohttp import
web` loads `aiohttp.web` and what it imports), and the first name that is not a submodule (`aiohttp.ClientSession`)
runs the real `__init__` in the stand-in itself, so the package is then the same module object, complete. Nothing of
the package is modified.

Called by `berth-agent run` in the agent process only, before anything imports the package (tests/agent/core).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path

_VERSION = re.compile(r'^__version__ = "([^"]+)"', re.M)
# Names of the package's own that other code reads (`from charset_normalizer import __version__` in requests);
# any other dunder is the import system's question, answered without running the package.
_PUBLIC_DUNDERS = ("__all__", "__version__")


class _DeferredPackage(types.ModuleType):
    """A package whose `__init__` runs on first access to a name that is not a submodule."""

    _berth_loaded = False

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr not in _PUBLIC_DUNDERS:
            raise AttributeError(attr)
        if not self._berth_loaded:
            spec = importlib.util.find_spec(f"{self.__name__}.{attr}") if attr not in _PUBLIC_DUNDERS else None
            if spec is not None:  # a submodule: loading it does not need the package's __init__
                return importlib.import_module(f"{self.__name__}.{attr}")
            self._load()
        if attr in self.__dict__:
            return self.__dict__[attr]
        fallback = self.__dict__.get("__getattr__")  # the package's own module __getattr__ (PEP 562), if any
        if fallback is not None:
            return fallback(attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")

    def _load(self) -> None:
        self._berth_loaded = True
        self.__spec__.loader.exec_module(self)


def defer(name: str) -> bool:
    """Make `name` a deferred package; False (and nothing done) if it is imported already or not installed."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or spec.submodule_search_locations is None:
        return False
    module = _DeferredPackage(name)
    module.__spec__ = spec
    module.__file__ = spec.origin
    module.__path__ = list(spec.submodule_search_locations)
    module.__package__ = name
    module.__loader__ = spec.loader
    version = _VERSION.search(Path(spec.origin).read_text(encoding="utf-8"))
    if version:  # read by submodules (`from . import __version__`) before the __init__ runs
        module.__version__ = version.group(1)
    sys.modules[name] = module
    return True


def loaded(name: str) -> bool:
    """Whether the package's own `__init__` has run (not only submodules through the stand-in)."""
    module = sys.modules.get(name)
    return module is not None and (not isinstance(module, _DeferredPackage) or module._berth_loaded)


__all__ = ["defer", "loaded"]
