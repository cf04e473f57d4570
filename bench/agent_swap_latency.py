"""Swap-to-serving latency: a COSI key rotation on S3 (moto, IAM enforced) until the registry serves again.

For each of N swaps: create a new access key, swap the COSI Secret dir to it as the kubelet does (..data rename),
and time from the rename until a NEW registry process serves the config and answers GET / with 200; then
delete the old key. Beside it, in the same run and on the same S3, the registry's own cold start: exec of
`docker-registry serve` until its first 200 on GET /.

With `--pullers N` (default 2) N clients pull a 1 MiB blob (through the registry from S3) without pause all the while,
so every swap restarts a registry with pulls in flight: the old process drains them while its successor starts
(overlapped restart, docs/decisions/0008-overlapped-restart-for-2-8.md), and the pull loop counts what clients would
see.

Targets: median <= cold start median + 150 ms, p99 < 1 s; under the pull load, median <= cold start + 100 ms.

With `--swap http-secret` the same is measured without S3 and without the pre-flight: filesystem storage, and
each swap replaces the mounted http secret (which changes config.yml, so the registry restarts).

    python bench/agent_swap_latency.py [--swaps 30] [--pullers 2] [--swap cosi|http-secret]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from agent_common import cold_starts, nearest_rank, shm_dir, summary_ms, workdir
from berth_agent.restart.endpoint import Endpoint
from berth_agent.restart.probe import answers
from berth_agent.restart.procfs import find_registry_processes
from support.clouds.s3 import REGION, running_moto
from support.registries.pod import RegistryPod, filesystem_spec, registry_object
from support.registries.registry import make_oci_image, push_image
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.traffic.pull_loop import PullLoop

BUCKET = "registry-data"


def cosi(endpoint: str, key) -> dict[str, str]:
    return {"BucketInfo": json.dumps({"metadata": {"name": "bc-bench"}, "spec": {
        "bucketName": BUCKET, "authenticationType": "Key", "protocols": ["S3"],
        "secretS3": {"endpoint": endpoint, "region": REGION, "accessKeyID": key.access_key_id,
                     "accessSecretKey": key.secret_access_key}}})}


def spec(port: int) -> dict:
    return {"image": "docker.io/library/registry:2", "distribution": "2",
            "config": {"log": {"level": "error"}, "storage": {
                "objectStorage": {"bucketClaim": "data", "bucketAccess": "access"}, "redirect": {"disabled": True}}},
            "http": {"addr": f"127.0.0.1:{port}", "drainTimeout": "5s"}}


class Mark:
    """What runs, and where the supervisor's log ends, just BEFORE a change is made. Taken after the change,
    a restart quicker than the benchmark's own next step (a busy machine) fell before the log offset and was
    never seen: "the registry did not come back" while it had."""

    def __init__(self, config_path: Path, supervisor_log: Path | None = None) -> None:
        self.before = set(find_registry_processes(config_path))  # the serving one, and any still draining
        self.supervisor_log = supervisor_log
        self.log_offset = supervisor_log.stat().st_size if supervisor_log is not None else 0


def wait_new_registry(config_path: Path, endpoint: Endpoint, mark: Mark, timeout: float = 30.0) -> int:
    """Until a registry started after `mark` answers 200. With the supervisor's log, its "started registry
    (pid N)" lines are followed from the mark (a small read) instead of scanning /proc, which takes tens of ms
    on a busy machine and blurred the figure."""
    known = {p.pid for p in mark.before}
    offset, seen = mark.log_offset, b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if mark.supervisor_log is not None:
            with open(mark.supervisor_log, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            seen += chunk
            fresh = [int(pid) for pid in re.findall(rb"started registry \(pid (\d+)\)", seen) if int(pid) not in known]
        else:
            fresh = [p.pid for p in find_registry_processes(config_path) if p not in mark.before]
        if fresh and answers(endpoint, timeout=1.0) == 200:
            return fresh[-1]
        time.sleep(0.001)
    tail = seen[-1500:].decode(errors="replace") if seen else "(nothing new in the supervisor's log)"
    raise TimeoutError(f"no registry started after the change answered within {timeout:g} s; the supervisor "
                       f"logged since:\n{tail}")


def wait_drained(before: set, timeout: float = 30.0) -> None:
    """Until the registries of `before` have exited. An old key is revoked only then: a draining registry may
    still read from S3 with it
    (docs/decisions/0001-retirement-bounded-by-drain-timeout.md)."""
    deadline = time.monotonic() + timeout
    while any(p.alive() for p in before) and time.monotonic() < deadline:
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--swaps", type=int, default=30)
    parser.add_argument("--pullers", type=int, default=2)
    parser.add_argument("--swap", choices=("cosi", "http-secret"), default="cosi")
    args = parser.parse_args()
    with workdir("swap") as tmp, shm_dir() as shm, running_moto(Path(tmp) / "moto") as moto:
        root = Path(tmp)
        key = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        pod = RegistryPod(root / "pod", config_dir=shm / "config")
        try:
            if args.swap == "cosi":
                write_secret_dir(pod.mounts / "cosi", cosi(moto.endpoint, key))
                pod.write_registry_file(registry_object(spec(pod.port)))
            else:
                write_secret_dir(pod.mounts / "http-secret", {"secret": "secret-0"})
                pod.write_registry_file(registry_object(filesystem_spec(
                    pod.port, http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s",
                                    "secret": {"name": "http", "field": "secret"}})))
            pod.start_agent(extra=["--log-level", "info"])
            pod.start_supervisor()
            pod.wait_serving()
            config_path = pod.config_dir / "config.yml"
            endpoint = Endpoint("127.0.0.1", pod.port)
            image = make_oci_image(root / "image", layer_size=1024 * 1024)
            push_image(image, pod.host, "bench/app:1")
            layer = image.layer_digests[0]
            loops = [PullLoop(f"{pod.url}/v2/bench/app/blobs/{layer}", image.blobs[layer])
                     for _ in range(args.pullers)]
            for loop in loops:
                loop.start()

            swaps = []
            for index in range(args.swaps):
                if args.swap == "http-secret":
                    mark = Mark(config_path, pod.supervisor.log_path)
                    started = time.perf_counter()
                    swap_secret_dir(pod.mounts / "http-secret", {"secret": f"secret-{index + 1}"})
                    wait_new_registry(config_path, endpoint, mark)
                    swaps.append(time.perf_counter() - started)
                    time.sleep(0.2)
                    continue
                new_key = moto.create_access_key("registry")
                mark = Mark(config_path, pod.supervisor.log_path)
                started = time.perf_counter()
                swap_secret_dir(pod.mounts / "cosi", cosi(moto.endpoint, new_key))
                wait_new_registry(config_path, endpoint, mark)
                swaps.append(time.perf_counter() - started)
                wait_drained(mark.before)
                moto.delete_access_key("registry", key.access_key_id)
                key = new_key
                time.sleep(0.2)  # let the moto and registry logs settle between samples

            stats = [loop.stop() for loop in loops]
            cold = cold_starts(config_path.read_bytes(), root, args.swaps)
            restarts = pod.actions("restarted")
        finally:
            for loop in locals().get("loops", []):
                loop.stop()
            pod.stop()

    median, cold_median = statistics.median(swaps), statistics.median(cold)
    p99 = nearest_rank(swaps, 0.99)
    storage = "s3 driver on moto" if args.swap == "cosi" else "filesystem"
    print(f"registry cold start (exec -> first 200 on GET /, {storage}): {summary_ms(cold)}")
    print(f"swap-to-serving ({args.swap} Secret ..data rename -> new registry answers 200): {summary_ms(swaps)}")
    print(f"median overhead over cold start: {(median - cold_median) * 1000:.1f} ms "
          f"(target <= 150 ms: {'met' if median <= cold_median + 0.150 else 'MISSED'}; under a pull load "
          f"<= 100 ms: {'met' if median <= cold_median + 0.100 else 'MISSED'})")
    if stats:
        failures = [f for s in stats for f in s.failures]
        print(f"pull load: {args.pullers} clients, {sum(s.requests for s in stats)} pulls, {len(failures)} failed, "
              f"{sum(s.refused_retries for s in stats)} refused and {sum(s.reset_retries for s in stats)} reset "
              f"connections retried{': ' + '; '.join(failures[:3]) if failures else ''}")
    closes = [line["listener_close_seconds"] for line in restarts if line.get("listener_close_seconds") is not None]
    if closes:
        print(f"SIGTERM -> old listener closed (agent): {summary_ms(closes)}")
    gaps = [line["no_listener_seconds"] for line in restarts if line.get("no_listener_seconds") is not None]
    if gaps:
        print(f"no-listener window (agent, {len(gaps)} handed over of {len(restarts)}): {summary_ms(gaps)}")
    if restarts:
        apply = [line["seconds"] for line in restarts]
        restart = [line["restart_seconds"] for line in restarts]
        for line in restarts[:3]:
            print("    sample step timings (s):", line["timings"])
        print(f"inside the agent, render+preflight+write+restart: {summary_ms(apply)}; "
              f"of which SIGTERM -> new registry answers: {summary_ms(restart)}")
    print(f"p99 {p99 * 1000:.1f} ms (target < 1000 ms: {'met' if p99 < 1.0 else 'MISSED'})")


if __name__ == "__main__":
    main()
