"""Restarts caused by a burst of file events: the same Secret rewritten many times within one second.

A registry pod (agent + berth-supervise + docker-registry) with an http secret Secret dir; within one second the
Secret is swapped SWAPS times as the kubelet's AtomicWriter does (each swap is ~9 inotify events on the watched
directory, docs/upstream.md#watchdog-events; the content changes on every swap). Then the registry's restarts are
counted once everything has settled: the debounce must turn the whole burst into one render and one restart, with the
last content.

Target: exactly 1 restart (the debounce, docs/design.md §4.2).

    python bench/agent_burst.py [--swaps 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

from agent_common import shm_dir, workdir
from support.common.polling import wait_for
from support.registries.pod import RegistryPod, filesystem_spec, registry_object
from support.registries.secretdir import swap_secret_dir, write_secret_dir

SETTLE_SECONDS = 3.0  # longer than the debounce's maximum wait (2 s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--swaps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with workdir("burst") as tmp, shm_dir() as shm:
        root = Path(tmp)
        pod = RegistryPod(root / "pod", config_dir=shm / "config")
        results = []
        try:
            write_secret_dir(pod.mounts / "http-secret", {"secret": "start"})
            pod.write_registry_file(registry_object(filesystem_spec(
                pod.port, http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s",
                                "secret": {"name": "http", "field": "secret"}})))
            pod.start_agent()
            pod.start_supervisor()
            pod.wait_serving()
            for round_ in range(args.rounds):
                starts = pod.registry_starts()
                began = time.monotonic()
                for i in range(args.swaps):
                    swap_secret_dir(pod.mounts / "http-secret", {"secret": f"r{round_}-{i}"})
                    time.sleep(max(0.0, began + (i + 1) / args.swaps - time.monotonic()))  # spread over 1 s
                burst_seconds = time.monotonic() - began
                last = f"r{round_}-{args.swaps - 1}"
                wait_for(lambda last=last: yaml.safe_load(
                    (pod.config_dir / "config.yml").read_text())["http"]["secret"] == last,
                         timeout=30, what="the last value to be applied")
                time.sleep(SETTLE_SECONDS)
                pod.wait_serving()
                results.append((burst_seconds, pod.registry_starts() - starts))
        finally:
            pod.stop()
    for n, (seconds, restarts) in enumerate(results, 1):
        print(f"round {n}: {args.swaps} Secret swaps (~{args.swaps * 9} file events) in {seconds:.2f} s -> "
              f"{restarts} registry restart(s) (target 1)")


if __name__ == "__main__":
    main()
