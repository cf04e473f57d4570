"""What holds the agent's memory (bench/agent_memory.py): loaded from the agent's PYTHONPATH when
BERTH_MEMORY_PROBE names a report file. Not part of the agent; the benchmark's plain RSS run does not load it.

- Every module's import is timed in resident memory: the RSS its loader's create and exec add, less what the
  imports inside them add (a meta path finder wrapping each loader), summed by top-level package.
- With BERTH_MEMORY_TRACE=1, tracemalloc (one frame) from the first import on: the top allocation sites. It
  inflates the RSS; the benchmark reads the RSS from a run without the probe.
- When the file `<report>.request` appears, a daemon thread writes `<report>` (JSON): RSS, the imports by package
  and by module, the threads (Python's by name and the process's tasks), the top sites, the modules loaded.
"""

from __future__ import annotations

import collections
import importlib.abc
import json
import os
import sys
import threading
import time

_REPORT = os.environ.get("BERTH_MEMORY_PROBE")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


_cost: collections.Counter = collections.Counter()
_stack: list[int] = []


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, name):
        self._inner, self._name = inner, name

    def create_module(self, spec):
        return self._measured(lambda: self._inner.create_module(spec))

    def exec_module(self, module):
        return self._measured(lambda: self._inner.exec_module(module))

    def _measured(self, call):
        _stack.append(0)
        before = _rss()
        try:
            return call()
        finally:
            total = _rss() - before
            nested = _stack.pop()
            _cost[self._name] += total - nested
            if _stack:
                _stack[-1] += total

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _Loader) and hasattr(spec.loader,
                                                                                               "exec_module"):
                    spec.loader = _Loader(spec.loader, name)
                return spec
        return None


def _report() -> dict:
    by_package: collections.Counter = collections.Counter()
    for name, cost in _cost.items():
        by_package[name.partition(".")[0]] += cost
    tasks = os.listdir("/proc/self/task")
    names = []
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    report = {
        "rss": _rss(),
        "imports_by_package": by_package.most_common(),
        "imports_by_module": _cost.most_common(60),
        "threads": sorted(t.name for t in threading.enumerate() if t.name != "berth-memory-probe"),
        "tasks": len(tasks) - 1,  # less the probe's own thread
        "task_names": sorted(names),
        "modules": sorted(sys.modules),
    }
    import tracemalloc

    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        stats = snapshot.statistics("lineno")
        report["traced"] = sum(s.size for s in stats)
        report["top_sites"] = [(str(s.traceback[0]), s.size, s.count) for s in stats[:25]]
        by_file: collections.Counter = collections.Counter()
        for s in stats:
            by_file[_package_of(s.traceback[0].filename)] += s.size
        report["traced_by_package"] = by_file.most_common(25)
    return report


def _package_of(filename: str) -> str:
    parts = filename.split(os.sep)
    for marker in ("site-packages", "agent", "lib"):
        if marker in parts:
            rest = parts[len(parts) - parts[::-1].index(marker):]
            if rest:
                name = rest[0]
                if name.startswith("python3"):
                    rest = rest[1:] or [name]
                    name = rest[0]
                return name.removesuffix(".py")
    return filename


def _serve() -> None:
    request = _REPORT + ".request"
    while True:
        if os.path.exists(request):
            with open(request) as f:
                asked = f.read().strip()
            os.unlink(request)
            if asked == "trim":  # what glibc would give back: freed heap the agent no longer uses
                import ctypes
                import gc

                gc.collect()
                ctypes.CDLL(None).malloc_trim(0)
            data = json.dumps(_report())
            with open(_REPORT + ".tmp", "w") as f:
                f.write(data)
            os.replace(_REPORT + ".tmp", _REPORT)
        time.sleep(0.1)


if _REPORT:
    if os.environ.get("BERTH_MEMORY_TRACE") == "1":
        import tracemalloc

        tracemalloc.start(1)
    sys.meta_path.insert(0, _Finder())
    threading.Thread(target=_serve, name="berth-memory-probe", daemon=True).start()
