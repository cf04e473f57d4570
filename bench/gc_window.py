"""Garbage collection on a filesystem registry of about 1,000 blobs, about half of them unreferenced
(docs/design.md §4.5).

The store (tests/support/registries/gc_store.py): IMAGES images of LAYERS random layers of LAYER_SIZE bytes, each with
its
own config and manifest (LAYERS + 2 blobs each: 125 x 8 = 1,000 by default), pushed through the registry's API
over 10 repositories; then the manifests of every second image are deleted (63 images, 504 blobs unreferenced).

`--mode command`: the command alone. For each Distribution (Debian's 2.8; 3.1.1 when BERTH_REGISTRY3_BIN names
it), the store is built once, then ROUNDS times: a fresh copy of it, `registry garbage-collect --dry-run` and
then `registry garbage-collect`, each timed from exec to exit (what the runner waits for while every replica is
read-only). Each run is checked: the blobs it deletes are exactly the unreferenced ones, and the bytes freed on
disk are theirs.

`--mode flow`: the real agent flow (docs/design.md §4.5), with 1 and then 2 replicas (`--replicas`), ROUNDS
times each on a fresh copy of the 2.8 store: registry pods as in the end-to-end tests (support.registries.replicas:
agent
subprocess + berth-supervise + Debian's 2.8 on 127.0.0.2, 127.0.0.3, sharing the data directory), a Registry on the
test API server, and a run asked for as the operator asks (its own `gc_schedule.decide` on the run-now
annotation writes status.garbageCollection.request). Measured:
- the read-only window, twice: from the agents' own log lines (`gc writable`, logged once that pod serves
  writable again, with `read_only_seconds` since it first served read-only: first of any pod to last of every
  pod), and as a client sees it (a probe per pod POSTs an upload every 20 ms: first 405 of any pod to the first
  202 after the last 405 of every pod);
- the GC duration (`gc finished`'s seconds: the command, from the runner's start to its exit) and where the
  rest of the window goes (request -> every pod read-only and acknowledged (`gc read-only`), last
  acknowledgement -> `gc started`, command, `gc finished` -> every pod writable);
- pulls of a kept blob through a readiness-aware balancer all along (0 failed is the target).
Each run is checked: lastRun Succeeded, 504 blobs deleted on disk.

    python bench/gc_window.py [--mode command|flow|both] [--rounds 3] [--replicas 1 2] [--leave-seconds 0.3]
                              [--images 125] [--layers 6] [--layer-size 4096] [--no-v3] [--flow-distribution 2|3]

`--flow-distribution 3` (docs/decisions/0007-held-socket-handover.md): the flow's pods run 3.1.1 under berth-supervise,
which holds each pod's listening socket, so no pod leaves its Service for the read-only switch (try it with the pod's
--leave-seconds 5).
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import os
import shutil
import statistics
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import yaml

from agent_common import summary_ms, workdir
from berth_agent.gc import report as gc_report
from support.common.ports import free_port
from support.registries import gc_store
from support.registries.registry import REGISTRY3_BINARY, REGISTRY_BINARY, registry_env, running_registry


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


# ---- the agent flow ------------------------------------------------------------------------------------------

REGISTRIES = "berth.dev/v1alpha1/registries"


class UploadProbe(threading.Thread):
    """POSTs an upload to one pod every `interval` seconds (and cancels it when accepted): 202 writable,
    405 read-only, None no answer. What a client pushing to that pod would have seen, and when."""

    def __init__(self, host: str, port: int, interval: float = 0.02):
        super().__init__(daemon=True)
        self.host, self.port, self.interval = host, port, interval
        self.samples: list[tuple[float, int | None]] = []
        self._stop_event = threading.Event()

    def _post(self) -> int | None:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=5)
        try:
            connection.request("POST", "/v2/bench/probe/blobs/uploads/", body=b"", headers={"Content-Length": "0"})
            response = connection.getresponse()
            response.read()
            location = response.getheader("Location")
            if response.status == 202 and location:
                connection.request("DELETE", urllib.parse.urlsplit(location).path)
                connection.getresponse().read()
            return response.status
        except OSError:
            return None
        finally:
            connection.close()

    def run(self) -> None:
        while not self._stop_event.is_set():
            status = self._post()
            self.samples.append((time.time(), status))
            self._stop_event.wait(self.interval)

    def stop(self) -> list[tuple[float, int | None]]:
        self._stop_event.set()
        self.join(10)
        return self.samples

    def read_only_window(self) -> tuple[float, float] | None:
        """(first 405, first 202 after the last 405), or None if this pod never refused."""
        refused = [at for at, status in self.samples if status == 405]
        if not refused:
            return None
        after = [at for at, status in self.samples if status == 202 and at > refused[-1]]
        return refused[0], (after[0] if after else float("nan"))


def request_run(kube_api) -> dict:
    """Ask for a run as the operator does: its own gc_schedule.decide, given the Registry as stored, the run-now
    annotation a user sets, and now; the request it decides is written to status."""
    from berth_api import GC_REQUEST_ANNOTATION, Registry
    from berth_api.timestamps import format_time
    from berth_operator.engine import gc_schedule

    body = kube_api.get(REGISTRIES, "default", "reg")
    reg = Registry.model_validate({key: body[key] for key in ("apiVersion", "kind", "metadata", "spec")})
    now = datetime.datetime.now(datetime.UTC)
    decision = gc_schedule.decide(reg.spec.garbage_collection, annotations={
        GC_REQUEST_ANNOTATION: format_time(now)}, live=(body.get("status") or {}).get("garbageCollection"),
        now=now)
    kube_api.patch(REGISTRIES, "default", "reg", {"status": {"garbageCollection": decision.status_patch}},
                   subresource="status")
    return decision.pending.model_dump(by_alias=True, mode="json")


def log_time(line: dict) -> float:
    return datetime.datetime.fromisoformat(line["time"].replace("Z", "+00:00")).timestamp()


def flow_round(args, store: gc_store.Store, store_dir: Path, root: Path, replicas: int) -> dict:
    from support.clusters.kube import KubeApi
    from support.common.polling import wait_for
    from support.registries.pod import filesystem_spec
    from support.registries.replicas import backends, running_replicas
    from support.traffic.balancer import Balancer
    from support.traffic.pull_loop import PullLoop

    shutil.copytree(store_dir, root / "data")
    port = free_port()
    spec = filesystem_spec(port, garbageCollection={"readOnlyTimeout": "5m"})
    spec["config"]["storage"]["delete"] = {"enabled": True}
    held = args.flow_distribution == "3"  # 3.1.1 under berth-supervise, each pod's socket held
    if held:
        from support.registries.pod import on_distribution

        spec = on_distribution(spec, "3")
    kept = store.kept[0]
    layer = next(digest for digest, size in kept.blobs.items() if size == args.layer_size)
    hex_digest = layer.split(":", 1)[1]
    layer_bytes = (store_dir / gc_report.BLOBS_DIR / "sha256" / hex_digest[:2] / hex_digest / "data").read_bytes()
    with KubeApi() as api, running_replicas(root, api, spec, count=replicas, leave_seconds=args.leave_seconds,
                                            **({"binary": REGISTRY3_BINARY} if held else {})) as pods:
        balancer = Balancer(backends(pods), check_interval=0.05).start()
        # One pod: straight to it, a connection refused in a handover's few milliseconds retried (and counted),
        # as bench/agent_inflight.py does. Several: through the balancer, never retried.
        url = next(iter(pods.values())).url if replicas == 1 else balancer.url
        puller = PullLoop(f"{url}/v2/{kept.repo}/blobs/{layer}", layer_bytes,
                          retry_seconds=5.0 if replicas == 1 else 0.0)
        probes = {name: UploadProbe(pod.listen_host, pod.port) for name, pod in pods.items()}
        try:
            for probe in probes.values():
                probe.start()
            puller.start()
            time.sleep(0.3)
            requested_at = time.time()
            request = request_run(api)

            def last_run() -> dict | None:
                run = ((api.get(REGISTRIES, "default", "reg").get("status") or {}).get("garbageCollection")
                       or {}).get("lastRun") or {}
                return run if run.get("id") == request["id"] else None

            run = wait_for(last_run, timeout=300, what="lastRun of the request")
            recorded_at = time.time()

            def line(pod, msg: str) -> dict | None:
                found = [entry for entry in pod.actions(msg) if entry.get("request_id") == request["id"]]
                return found[0] if found else None

            for name, pod in pods.items():
                wait_for(lambda pod=pod: line(pod, "gc writable"), timeout=120, what=f"{name} writable again")
            time.sleep(0.2)  # the probes' next samples see every pod writable
        finally:
            for probe in probes.values():
                probe.stop()
            pull_stats = puller.stop()
            balancer_stats = balancer.stop()
        runner = next(pod for pod in pods.values() if line(pod, "gc started"))
        started, finished = line(runner, "gc started"), line(runner, "gc finished")
        read_only = [log_time(line(pod, "gc read-only")) for pod in pods.values()]  # acknowledged
        writable = [log_time(line(pod, "gc writable")) for pod in pods.values()]
        # Each pod's first read-only serve: `gc writable` carries that pod's read-only seconds (its
        # berth_agent_gc_read_only_seconds), which start at the serve, before the acknowledgement.
        serving_read_only = [log_time(line(pod, "gc writable")) - float(line(pod, "gc writable").get(
            "read_only_seconds", log_time(line(pod, "gc writable")) - log_time(line(pod, "gc read-only"))))
            for pod in pods.values()]
        probed = [probe.read_only_window() for probe in probes.values()]
        remaining = gc_store.blob_files(root / "data")
    if run.get("result") != "Succeeded" or run.get("blobsDeleted") != len(store.eligible_blobs) or \
            remaining != store.blobs_total - len(store.eligible_blobs):
        raise AssertionError(f"lastRun {run}, {remaining} blobs left on disk")
    if any(window is None for window in probed):
        raise AssertionError("a pod never refused an upload during the run")
    return {
        "window_logs": max(writable) - min(serving_read_only),
        "window_client": max(end for _, end in probed) - min(start for start, _ in probed),
        "to_read_only": max(read_only) - requested_at,
        "acks_to_start": log_time(started) - max(read_only),
        "command": float(finished["seconds"]),
        "to_writable": max(writable) - log_time(finished),
        "to_recorded": recorded_at - requested_at,
        "pulls": pull_stats, "balancer": balancer_stats,
    }


def flow(args, base: Path) -> None:
    binary = REGISTRY3_BINARY if args.flow_distribution == "3" else REGISTRY_BINARY
    store, build_seconds = build_store(args, binary, base / "store", base / "build")
    name = "3.1.1 on held sockets (berth-supervise)" if args.flow_distribution == "3" else "2.8"
    print(f"flow: store of {store.blobs_total} blobs ({len(store.eligible_blobs)} unreferenced) on registry {name}, "
          f"built in {build_seconds:.1f} s; agents' --leave-seconds {args.leave_seconds:g}")
    for replicas in args.replicas:
        rounds = [flow_round(args, store, base / "store", base / f"flow-{replicas}-{n}", replicas)
                  for n in range(args.rounds)]
        label = f"flow, {replicas} replica{'s' if replicas > 1 else ''}"
        for key, what in (("window_client", "read-only window, as a client sees it (first 405 -> last 202 back)"),
                          ("window_logs", "read-only window, agents' logs (first read-only serve -> last gc writable)"),
                          ("to_read_only", "request written -> every pod read-only and acknowledged"),
                          ("acks_to_start", "last pod read-only -> the command starts"),
                          ("command", "GC duration (the command, gc finished seconds)"),
                          ("to_writable", "command done -> every pod writable again"),
                          ("to_recorded", "request written -> lastRun recorded")):
            print(f"{label}: {what}: {summary_ms([r[key] for r in rounds])}")
        pulls = [r["pulls"] for r in rounds]
        failures = [failure for p in pulls for failure in p.failures]
        clients = "through the balancer" if replicas > 1 else "one client"
        print(f"{label}: pulls of a kept blob during the runs ({clients}"
              f"): {sum(p.requests for p in pulls)}, failed {len(failures)} (target 0)"
              + (f": {'; '.join(failures[:3])}" if failures else "")
              + (f"; retried, never reached a registry: {sum(p.refused_retries for p in pulls)} refused, "
                 f"{sum(p.reset_retries for p in pulls)} reset" if replicas == 1 else
                 f"; refused by a backend (the balancer's count) {sum(r['balancer'].refused for r in rounds)}"))


def distributions(args) -> list[tuple[str, str]]:
    found = [("registry 2.8", REGISTRY_BINARY)]
    if REGISTRY3_BINARY and os.path.exists(REGISTRY3_BINARY) and not args.no_v3:
        found.append(("registry 3.1.1", REGISTRY3_BINARY))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["command", "flow", "both"], default="both")
    parser.add_argument("--replicas", type=int, nargs="+", choices=(1, 2), default=[1, 2])
    parser.add_argument("--leave-seconds", type=float, default=0.3,
                        help="the agents' --leave-seconds (out of the Service before each restart, with replicas); "
                             "the tests' 0.3 by default, the pod's is 5")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=125)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--layer-size", type=int, default=4096)
    parser.add_argument("--no-v3", action="store_true", help="only Debian's 2.8, even with BERTH_REGISTRY3_BIN")
    parser.add_argument("--flow-distribution", choices=["2", "3"], default="2",
                        help="the flow's pods: Debian's 2.8 (overlapped restarts, leaving the Service), or 3.1.1 "
                             "under berth-supervise on held sockets (no leaving; needs BERTH_REGISTRY3_BIN)")
    args = parser.parse_args()
    with workdir("gc-window") as tmp:
        if args.mode in ("command", "both"):
            for name, binary in distributions(args):
                command_alone(args, name, binary, Path(tmp) / name.replace(" ", "-"))
        if args.mode in ("flow", "both"):
            flow(args, Path(tmp) / "flow")


if __name__ == "__main__":
    main()
