"""What holds the operator's memory, sampled while bench/operator_reconcile.py runs it (`--probe-memory DIR`: the
bench puts this directory first on the operator's PYTHONPATH and names DIR in BERTH_BENCH_PROBE_DIR).

Every BERTH_BENCH_PROBE_SECONDS (default 5) a thread of the operator process appends one JSON line to
DIR/<pid>.jsonl: VmRSS and VmHWM (MiB), threads, objects the garbage collector tracks (and the most common types),
asyncio tasks by name, and, from the operator's own objects: the caches' objects and stored bytes per kind, the
Registry bodies kept (count, bytes), the wakes pending and the reconciles queued for a worker. Only in a process
whose command line names berth_operator; nothing is changed in the operator. Sampling walks gc.get_objects(): a
few tens of ms at 1000 Registries, so the figures of a probed run are not the timing figures.
"""

from __future__ import annotations

import os
import threading
import time

DIR = os.environ.get("BERTH_BENCH_PROBE_DIR")


def _status() -> dict:
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = int(line.split()[1]) // 1024
    return found


def _sample() -> dict:
    import asyncio
    import collections
    import gc

    objects = gc.get_objects()
    types = collections.Counter(type(o).__name__ for o in objects)
    found: dict = {}
    for obj in objects:
        cls = type(obj)
        module = cls.__dict__.get("__module__")  # a str on classes (a descriptor on some metaclasses' instances)
        if not isinstance(module, str) or not module.startswith("berth_operator"):
            continue
        if cls.__name__ == "Caches":
            sizes: collections.Counter = collections.Counter()
            counts: collections.Counter = collections.Counter()
            for key, stored in list(obj._store.items()):
                sizes[key[1]] += len(stored)
                counts[key[1]] += 1
            found["classes" if not obj.owners else "caches"] = {k: [counts[k], sizes[k] // 1024] for k in counts}
        elif cls.__name__ == "Context":
            bodies = list(obj.seen.bodies.values())
            found["bodies"] = [len(bodies), sum(map(len, bodies)) // 1024]
            found["waking"] = len(obj.wakes.waking)
            found["queued_for_a_worker"] = obj.workers.executor._work_queue.qsize()
    del objects
    tasks = list(asyncio.tasks._all_tasks)
    names = collections.Counter(t.get_name().split("-")[0] for t in tasks)
    return {"at": round(time.time(), 1), **_status(), "threads": threading.active_count(),
            "gc_objects": sum(types.values()), "types": types.most_common(8), "tasks": len(tasks),
            "task_names": names.most_common(6), **found}


def _loop() -> None:
    import json

    every = float(os.environ.get("BERTH_BENCH_PROBE_SECONDS", "5"))
    path = os.path.join(DIR or ".", f"{os.getpid()}.jsonl")
    while True:
        time.sleep(every)
        try:
            line = json.dumps(_sample(), default=str)
        except Exception as exc:  # a sample that raced a change: say so, try again next time  # noqa: BLE001
            line = json.dumps({"at": round(time.time(), 1), "error": repr(exc)})
        with open(path, "a") as out:
            out.write(line + "\n")


if DIR and b"berth_operator" in open("/proc/self/cmdline", "rb").read():
    threading.Thread(target=_loop, daemon=True, name="berth-bench-probe").start()
