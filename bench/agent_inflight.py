"""Failed and refused requests across reloads under a continuous pull load, with a slow upload in flight.

One registry pod (`--replicas 1`: agent in file mode, clients straight to the registry) or two
(`--replicas 2` or 3: agents on the kmock API server taking turns through the Registry's reload Lease, clients
through tests/support/traffic/balancer.py, which sends new connections only to pods whose /readyz is 200, as a
Service's endpoints do). Filesystem storage (shared by the two pods), drainTimeout 30s. PULLERS threads GET a
1 MiB blob without pause while the Registry is edited RELOADS times (spec.config.log.level toggled; each
edit restarts every registry), waiting for every pod to apply an edit before the next. A slow chunked upload
(UPLOAD_SECONDS per upload, started again when one ends) is always in flight, so every reload overlaps one:
the old registry drains it while its successor serves (docs/decisions/0008-overlapped-restart-for-2-8.md).

A request that never reached a registry is retried by the client and counted: a refused connection, or a
reset before any response byte (the old listener's accept queue). With 2 replicas the clients never retry:
the balancer turns a refused backend into a reset and counts it. Any other outcome than 200 with the right
bytes is a failed request. Beside it, in the same run, the registry's cold start (exec to the first 200).

Targets: no-listener window per reload median <= cold start + 20 ms; 0 failed; 0 refused with 2.

    python bench/agent_inflight.py [--reloads 20] [--pullers 2] [--replicas 1|2|3] [--leave-seconds 0.3]
                                   [--upload-seconds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path

from agent_common import cold_starts, nearest_rank, shm_dir, summary_ms, workdir
from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import RegistryPod, filesystem_spec, registry_object
from support.registries.registry import make_oci_image, push_image
from support.registries.supervisor import minimal_config
from support.traffic.balancer import Balancer
from support.traffic.pull_loop import PullLoop
from support.traffic.upload import ConnectProbe, SlowUpload


class Uploads(threading.Thread):
    """One slow upload after the other, so one is always in flight."""

    def __init__(self, url: str, seconds: float):
        super().__init__(daemon=True)
        self.url, self.seconds = url, seconds
        self.done: list[SlowUpload] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            upload = SlowUpload(self.url, "bench/slow", os.urandom(256 * 1024), seconds=self.seconds).start()
            upload.join(120)
            upload.ok = upload.error is None and upload.read_back() == upload.data
            self.done.append(upload)

    def stop(self) -> list[SlowUpload]:
        self._stop_event.set()
        self.join(120)
        return self.done


def spec_for(port: int, level: str) -> dict:
    spec = filesystem_spec(port, http={"addr": f"127.0.0.1:{port}", "drainTimeout": "30s"})
    spec["config"]["log"]["level"] = level
    return spec


def run_one(args, root: Path, shm: Path) -> dict:
    pod = RegistryPod(root / "pod", config_dir=shm / "config")
    try:
        pod.write_registry_file(registry_object(spec_for(pod.port, "info")))
        pod.start_agent(extra=["--log-level", "info"])
        pod.start_supervisor()
        pod.wait_serving()
        return load_and_edit(args, root, {"pod-0": pod}, pod.url,
                             edit=lambda level: pod.write_registry_file(registry_object(spec_for(pod.port, level))),
                             probe=ConnectProbe("127.0.0.1", pod.port))
    finally:
        pod.stop()


def run_many(args, root: Path) -> dict:
    from support.clusters.kube import KubeApi
    from support.registries.replicas import backends, running_replicas

    with KubeApi() as api:
        port = free_port()
        with running_replicas(root / "pods", api, spec_for(port, "info"), count=args.replicas,
                              leave_seconds=args.leave_seconds) as pods:
            balancer = Balancer(backends(pods), check_interval=0.05).start()
            try:
                def edit(level: str) -> None:
                    api.patch("berth.dev/v1alpha1/registries", "default", "reg",
                              {"spec": {"config": {"log": {"level": level}}}})

                figures = load_and_edit(args, root, pods, balancer.url, edit=edit, probe=None)
            finally:
                stats = balancer.stop()
            figures["balancer"] = stats
            return figures


def load_and_edit(args, root: Path, pods: dict[str, RegistryPod], url: str, *, edit, probe) -> dict:
    image = make_oci_image(root / "image", layer_size=1024 * 1024)
    push_image(image, url.split("://", 1)[1], "bench/app:1")
    layer = image.layer_digests[0]
    retry = 5.0 if len(pods) == 1 else 0.0  # behind the balancer a refused connection is a failure
    loops = [PullLoop(f"{url}/v2/bench/app/blobs/{layer}", image.blobs[layer], retry_seconds=retry)
             for _ in range(args.pullers)]
    for loop in loops:
        loop.start()
    uploads = Uploads(url, args.upload_seconds)
    uploads.start()
    if probe is not None:
        probe.start()
    time.sleep(0.5)
    level = "info"
    swaps = []
    try:
        for _ in range(args.reloads):
            level = "warn" if level == "info" else "info"
            before = {name: len(pod.actions("restarted")) for name, pod in pods.items()}
            started = time.perf_counter()
            edit(level)
            for name, pod in pods.items():
                wait_for(lambda pod=pod, name=name, before=before: len(pod.actions("restarted")) > before[name],
                         timeout=60,
                         what=f"{name} to restart")
            swaps.append(time.perf_counter() - started)
            time.sleep(0.3)  # keep pulling on the new processes before the next edit
    finally:
        windows = probe.stop() if probe is not None else []
        stats = [loop.stop() for loop in loops]
        done = uploads.stop()
    restarts = [line for pod in pods.values() for line in pod.actions("restarted")]
    return {"stats": stats, "uploads": done, "restarts": restarts, "windows": windows, "swaps": swaps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--pullers", type=int, default=2)
    parser.add_argument("--replicas", type=int, choices=(1, 2, 3), default=1)
    parser.add_argument("--leave-seconds", type=float, default=0.3,
                        help="the agents' --leave-seconds with replicas (the pod uses 5; 0.3 > the balancer's 0.05 s)")
    parser.add_argument("--upload-seconds", type=float, default=3.0)
    parser.add_argument("--cold-starts", type=int, default=20)
    args = parser.parse_args()
    with workdir("inflight") as tmp, shm_dir() as shm:
        root = Path(tmp)
        figures = run_one(args, root, shm) if args.replicas == 1 else run_many(args, root)
        cold = cold_starts(minimal_config(root / "cold-data", free_port()), root, args.cold_starts)

    stats, restarts = figures["stats"], figures["restarts"]
    requests = sum(s.requests for s in stats)
    failures = [f for s in stats for f in s.failures]
    refused = sum(s.refused_retries for s in stats)
    resets = sum(s.reset_retries for s in stats)
    uploads = figures["uploads"]
    print(f"replicas: {args.replicas}")
    print(f"reloads: {len(restarts) // args.replicas} (edits every registry restarted for; target {args.reloads})")
    print(f"pull requests: {requests} by {args.pullers} clients, {sum(s.successes for s in stats)} ok")
    print(f"failed requests: {len(failures)} (target 0){': ' + '; '.join(failures[:5]) if failures else ''}")
    print(f"retried by the client, never reached a registry: {refused} refused connections, {resets} resets")
    if "balancer" in figures:
        b = figures["balancer"]
        print(f"balancer: {b.connections} connections, {b.refused} refused by a backend, {b.no_backend} with no "
              f"ready backend (target 0), fewest ready pods {b.min_ready}")
    print(f"uploads: {sum(1 for u in uploads if u.ok)} of {len(uploads)} completed and read back")
    print(f"registry cold start (exec -> first 200 on GET /, filesystem): {summary_ms(cold)}")
    handed = [r for r in restarts if r.get("handed_over")]
    gaps = [r["no_listener_seconds"] for r in handed if r.get("no_listener_seconds") is not None]
    print(f"restarts handed over to a successor while the old one drained: {len(handed)} of {len(restarts)}")
    if gaps:
        print(f"no-listener window (agent: old listener gone -> new one listening): {summary_ms(gaps)}")
    if figures["windows"]:
        probed = [end - start for start, end in figures["windows"]]
        print(f"no-listener window (client: TCP connects every 2 ms, refused stretch): {summary_ms(probed)}")
        print(f"  median over cold start: {(statistics.median(probed) - statistics.median(cold)) * 1000:+.1f} ms "
              f"(target <= +20 ms); p99 {nearest_rank(probed, 0.99) * 1000:.1f} ms")
    print(f"edit -> every registry restarted (as logged): {summary_ms(figures['swaps'])}")
    waits = [r.get("lease_wait_seconds", 0.0) for r in restarts]
    if args.replicas > 1:
        print(f"lease wait per restart: {summary_ms(waits)}")


if __name__ == "__main__":
    main()
