"""Failed requests across reloads under a continuous pull load.

A registry pod (agent + supervise.sh + docker-registry, filesystem storage) serves one pushed image; PULLERS
threads GET a 1 MiB blob and the manifest without pause, while the http secret Secret is swapped RELOADS times
(each swap changes config.yml, so the registry restarts: SIGTERM, drain, new process). A request that never
reached a registry is retried by the client and counted separately: a refused connection (the few
milliseconds with no listener) or a reset before any response byte (connections left in the old listener's
accept queue when the draining registry closes it). Any other outcome than 200 with the right bytes is a
failed request.

Target (issue 3): 0 failed requests.

    python bench/agent_inflight.py [--reloads 20] [--pullers 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from agent_common import shm_dir, summary_ms, workdir

from support.pod import RegistryPod, filesystem_spec, registry_object
from support.pull_loop import PullLoop
from support.registry import make_oci_image, push_image
from support.secretdir import swap_secret_dir, write_secret_dir
from support.supervisor import wait_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--pullers", type=int, default=2)
    args = parser.parse_args()
    with workdir("inflight") as tmp, shm_dir() as shm:
        root = Path(tmp)
        pod = RegistryPod(root / "pod", config_dir=shm / "config")
        loops: list[PullLoop] = []
        try:
            write_secret_dir(pod.mounts / "http-secret", {"secret": "secret-0"})
            spec = filesystem_spec(pod.port, http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s",
                                                   "secret": {"name": "http", "field": "secret"}})
            spec["config"]["log"]["level"] = "error"
            pod.write_registry_file(registry_object(spec))
            pod.start_agent(extra=["--log-level", "info"])
            pod.start_supervisor()
            pod.wait_serving()
            image = make_oci_image(root / "image", layer_size=1024 * 1024)
            push_image(image, pod.host, "bench/app:1")
            layer = image.layer_digests[0]
            config_digest = next(d for d in image.blobs if d not in image.layer_digests and d != image.manifest_digest)
            targets = [(f"{pod.url}/v2/bench/app/blobs/{layer}", image.blobs[layer]),
                       (f"{pod.url}/v2/bench/app/blobs/{config_digest}", image.blobs[config_digest])]
            loops = [PullLoop(*targets[i % len(targets)]) for i in range(args.pullers)]
            for loop in loops:
                loop.start()
            time.sleep(0.5)

            for i in range(1, args.reloads + 1):
                before = len(pod.actions("restarted"))
                swap_secret_dir(pod.mounts / "http-secret", {"secret": f"secret-{i}"})
                wait_for(lambda: len(pod.actions("restarted")) > before, timeout=30, what="a restart")
                time.sleep(0.3)  # keep pulling on the new process before the next reload
            stats = [loop.stop() for loop in loops]
            restarts = pod.actions("restarted")
        finally:
            for loop in loops:
                loop.stop()
            pod.stop()

    requests = sum(s.requests for s in stats)
    failures = [f for s in stats for f in s.failures]
    retries = sum(s.refused_retries for s in stats)
    resets = sum(s.reset_retries for s in stats)
    print(f"reloads: {len(restarts)} (registry restarts that came up healthy; target {args.reloads})")
    print(f"pull requests: {requests} by {args.pullers} clients, {sum(s.successes for s in stats)} ok")
    print(f"failed requests: {len(failures)} (target 0){': ' + '; '.join(failures[:5]) if failures else ''}")
    print(f"retried, never reached a registry: {retries} refused connections (no listener between two registry "
          f"processes), {resets} resets before any response (old listener's accept queue)")
    print(f"restart (SIGTERM -> new registry answers): {summary_ms([r['restart_seconds'] for r in restarts])}")


if __name__ == "__main__":
    main()
