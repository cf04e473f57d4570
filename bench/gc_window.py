"""Garbage collection on a filesystem registry of about 1,000 blobs, about half of them unreferenced (issue 12).

The store (tests/support/gc_store.py): IMAGES images of LAYERS random layers of LAYER_SIZE bytes, each with its
own config and manifest (LAYERS + 2 blobs each: 125 x 8 = 1,000 by default), pushed through the registry's API
over 10 repositories; then the manifests of every second image are deleted (63 images, 504 blobs unreferenced).

`--mode command`: the command alone. For each Distribution (Debian's 2.8; 3.1.1 when BERTH_REGISTRY3_BIN names
it), the store is built once, then ROUNDS times: a fresh copy of it, `registry garbage-collect --dry-run` and
then `registry garbage-collect`, each timed from exec to exit (what the runner waits for while every replica is
read-only). Each run is checked: the blobs it deletes are exactly the unreferenced ones, and the bytes freed on
disk are theirs.

    python bench/gc_window.py [--mode command] [--rounds 3] [--images 125] [--layers 6] [--layer-size 4096]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import yaml
from agent_common import summary_ms, workdir

from berth_agent import gc_report
from support import gc_store
from support.ports import free_port
from support.registry import REGISTRY3_BINARY, REGISTRY_BINARY, registry_env, running_registry


def registry_config(root: Path) -> bytes:
    return yaml.safe_dump({
        "version": 0.1, "log": {"level": "info"}, "http": {"addr": f"127.0.0.1:{free_port()}"},
        "storage": {"filesystem": {"rootdirectory": str(root)}, "delete": {"enabled": True}},
    }).encode()


def build_store(args, binary: str, root: Path, work: Path) -> tuple[gc_store.Store, float]:
    """The store on disk under root, through a writable registry that is stopped again; and the seconds it took."""
    started = time.perf_counter()
    with running_registry(registry_config(root), work, binary=binary) as registry:
        store = gc_store.fill(registry.url, images=args.images, layers=args.layers, layer_size=args.layer_size)
        store.delete_every_second(registry.url)
    if gc_store.blob_files(root) != store.blobs_total:
        raise AssertionError(f"{gc_store.blob_files(root)} blobs on disk, {store.blobs_total} pushed")
    return store, time.perf_counter() - started


def garbage_collect(binary: str, root: Path, *flags: str) -> tuple[gc_report.GcReport, float]:
    config = root.parent / "gc-config.yml"
    config.write_bytes(registry_config(root))
    started = time.perf_counter()
    result = subprocess.run([binary, "garbage-collect", *flags, str(config)], capture_output=True, text=True,
                            env=registry_env(), timeout=600)
    seconds = time.perf_counter() - started
    report = gc_report.parse(result.stdout + result.stderr, dry_run="--dry-run" in flags, exit_code=result.returncode)
    if not report.succeeded:
        raise AssertionError(f"garbage-collect {' '.join(flags)} exited {result.returncode}: {result.stderr[-500:]}")
    return report, seconds


def command_alone(args, name: str, binary: str, base: Path) -> None:
    store, build_seconds = build_store(args, binary, base / "store", base / "build")
    eligible = store.eligible_blobs
    print(f"{name}: store of {store.blobs_total} blobs in {len(store.images)} images ({len(eligible)} blobs "
          f"unreferenced, {store.eligible_bytes / 2**20:.1f} MiB), built through the API in {build_seconds:.1f} s")
    dry_runs, runs, freed = [], [], []
    for round_no in range(args.rounds):
        root = base / f"round-{round_no}" / "store"
        shutil.copytree(base / "store", root)
        dry, seconds = garbage_collect(binary, root, "--dry-run")
        if set(dry.blobs_eligible) != eligible or gc_store.blob_files(root) != store.blobs_total:
            raise AssertionError("the dry run found other blobs than the unreferenced ones, or deleted some")
        dry_runs.append(seconds)
        before = gc_report.blob_bytes(root)
        report, seconds = garbage_collect(binary, root)
        if report.blobs_deleted != len(eligible) or gc_store.blob_files(root) != store.blobs_total - len(eligible):
            raise AssertionError(f"deleted {report.blobs_deleted} blobs, {len(eligible)} were unreferenced")
        runs.append(seconds)
        freed.append(gc_report.bytes_freed(before, gc_report.blob_bytes(root)))
        shutil.rmtree(root.parent)
    if set(freed) != {store.eligible_bytes}:
        raise AssertionError(f"freed {freed} bytes, the unreferenced blobs hold {store.eligible_bytes}")
    print(f"{name}: garbage-collect --dry-run: {summary_ms(dry_runs)}")
    print(f"{name}: garbage-collect: {summary_ms(runs)}; deleted {len(eligible)} blobs, "
          f"freed {store.eligible_bytes} bytes each run")
    return statistics.median(runs)


def distributions(args) -> list[tuple[str, str]]:
    found = [("registry 2.8", REGISTRY_BINARY)]
    if REGISTRY3_BINARY and os.path.exists(REGISTRY3_BINARY) and not args.no_v3:
        found.append(("registry 3.1.1", REGISTRY3_BINARY))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["command"], default="command")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=125)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--layer-size", type=int, default=4096)
    parser.add_argument("--no-v3", action="store_true", help="only Debian's 2.8, even with BERTH_REGISTRY3_BIN")
    args = parser.parse_args()
    with workdir("gc-window") as tmp:
        for name, binary in distributions(args):
            command_alone(args, name, binary, Path(tmp) / name.replace(" ", "-"))


if __name__ == "__main__":
    main()
