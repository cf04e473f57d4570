"""The agent's footprint when nothing changes: resident memory and CPU over an idle minute.

Runs `berth-agent run` as the sidecar runs it (`--registry NS/NAME` against a test API server, kmock with our fixture:
the agent's own API client (kube/client.py), the watch, status reporting) and as examples/local runs it
(`--registry-file`), each beside berth-supervise and the real registry, waits until the first config is applied, then
samples the agent process's VmRSS and its user+system CPU time over SECONDS.

Targets: RSS < 70 MiB, idle CPU < 0.5 % (of one core).

    python bench/agent_idle.py [--seconds 60] [--mode api|file|both]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from agent_common import shm_dir, workdir
from support.clusters.kube import KubeApi
from support.common.polling import wait_for
from support.registries.pod import RegistryPod, filesystem_spec, registry_object
from support.registries.secretdir import write_secret_dir

TICKS = os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def measure(mode: str, seconds: float) -> tuple[float, float, float]:
    with workdir(f"idle-{mode}") as tmp, shm_dir() as shm:
        pod = RegistryPod(Path(tmp) / "pod", config_dir=shm / "config")
        api = KubeApi() if mode == "api" else None
        try:
            write_secret_dir(pod.mounts / "http-secret", {"secret": "idle"})
            spec = filesystem_spec(pod.port, http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s",
                                                   "secret": {"name": "http", "field": "secret"}})
            if api is not None:
                api.__enter__()
                api.create(registry_object(spec))
                # As the operator's pod runs it: the mounted Secret also watched over the API
                # (docs/decisions/0012-secrets-over-the-api.md).
                api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "http", "namespace": "default"},
                            "data": {"secret": "aWRsZQ=="}})
                pod.start_agent(registry="default/reg", kube_host=api.url, extra=["--api-secret", "http-secret=http"])
            else:
                pod.write_registry_file(registry_object(spec))
                pod.start_agent()
            pod.start_supervisor()
            pod.wait_serving()
            wait_for(lambda: pod.health("/readyz") == 200, what="the agent to be ready")
            time.sleep(2.0)  # past start-up work
            pid = pod.agent.pid
            cpu_start, wall_start = cpu_seconds(pid), time.monotonic()
            samples = []
            while time.monotonic() - wall_start < seconds:
                samples.append(rss_bytes(pid))
                time.sleep(1.0)
            cpu = (cpu_seconds(pid) - cpu_start) / (time.monotonic() - wall_start) * 100
            return max(samples) / 2**20, sorted(samples)[len(samples) // 2] / 2**20, cpu
        finally:
            pod.stop()
            if api is not None:
                api.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--mode", choices=("api", "file", "both"), default="both")
    args = parser.parse_args()
    for mode in ("api", "file") if args.mode == "both" else (args.mode,):
        peak, median, cpu = measure(mode, args.seconds)
        label = "sidecar (--registry, kubernetes API)" if mode == "api" else "local (--registry-file)"
        print(f"{label}: RSS median {median:.1f} MiB, peak {peak:.1f} MiB (target < 70 MiB); "
              f"CPU {cpu:.2f} % of one core over {args.seconds:.0f} s idle (target < 0.5 %)")


if __name__ == "__main__":
    main()
