"""Shared set-up of the agent benchmarks: the same parts as the end-to-end tests (tests/support), on 127.0.0.1.

Each benchmark is a script that prints its figures; none is part of the test suite.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # support.* (the test parts) without installing them
os.environ.pop("AWS_CA_BUNDLE", None)  # the 2.8 registry panics with it set (docs/upstream.md#parts-aws-ca-bundle)


def workdir(name: str) -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix=f"berth-bench-{name}-")


@contextlib.contextmanager
def shm_dir():
    """A directory on /dev/shm for the pod's config volume (a memory-backed emptyDir in the pod), removed after."""
    path = Path(tempfile.mkdtemp(prefix="berth-bench-config-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def nearest_rank(samples: list[float], q: float) -> float:
    """The q-quantile by nearest rank (p99 of 30 samples is the largest: no interpolation flattering it)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary_ms(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return (f"median {statistics.median(ms):.1f} ms, p99 {nearest_rank(ms, 0.99):.1f} ms, "
            f"min {min(ms):.1f} ms, max {max(ms):.1f} ms (n={len(ms)})")


def cold_starts(config: bytes, root: Path, count: int, binary: str | None = None) -> list[float]:
    """exec of the registry (Debian's 2.8, or `binary`) until its first 200 on GET /, `count` times, each on
    `config` moved to a free port: the reference every reload figure is compared with, taken in the same run."""
    import subprocess
    import time

    from berth_agent.restart.endpoint import Endpoint
    from berth_agent.restart.probe import answers
    from support.common.ports import free_port
    from support.registries.registry import REGISTRY_BINARY, registry_env, with_addr

    samples = []
    for i in range(count):
        port = free_port()
        path = root / f"cold-{i}.yml"
        path.write_bytes(with_addr(config, f"127.0.0.1:{port}"))
        endpoint = Endpoint("127.0.0.1", port)
        started = time.perf_counter()
        process = subprocess.Popen([binary or REGISTRY_BINARY, "serve", str(path)], env=registry_env(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while answers(endpoint, timeout=1.0) != 200:
                if process.poll() is not None:
                    raise RuntimeError("the registry exited at start")
                time.sleep(0.001)
            samples.append(time.perf_counter() - started)
        finally:
            process.terminate()
            process.wait(10)
    return samples
