"""API-to-serving latency: a COSI key rotation made through the API server only, until the registry serves on it.

The agent runs in API mode (`--registry`, `--api-secret cosi=NAME`) against the test API server (kmock,
tests/support/clusters/kube.py) on 127.0.0.1, on S3 (moto, IAM enforced). For each of N rotations: create a new access
key, write it into the COSI Secret through the API (a merge patch; the mounted volume is left as it was, as during the
kubelet's 60-90 s sync, docs/upstream.md#k8s-secret-refresh), and time from sending the patch until a NEW registry
process serves the config and answers GET / with 200; then delete the old key. Beside it, in the same run and on the
same S3, the registry's own cold start (exec until its first 200), as in agent_swap_latency.py.

Target (docs/decisions/0012-secrets-over-the-api.md): median <= cold start median + 150 ms.

    python bench/agent_api_secret_latency.py [--rotations 30]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import time
from pathlib import Path

from agent_common import cold_starts, nearest_rank, shm_dir, summary_ms, workdir
from agent_swap_latency import BUCKET, Mark, cosi, spec, wait_drained, wait_new_registry
from berth_agent.restart.endpoint import Endpoint
from support.clouds.s3 import running_moto
from support.clusters.kube import KubeApi
from support.registries.pod import RegistryPod, registry_object
from support.registries.secretdir import write_secret_dir

SECRET = "registry-creds"


def api_data(data: dict[str, str]) -> dict[str, str]:
    return {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rotations", type=int, default=30)
    args = parser.parse_args()
    with workdir("api-secret") as tmp, shm_dir() as shm, running_moto(Path(tmp) / "moto") as moto, \
            KubeApi() as api:
        root = Path(tmp)
        key = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        pod = RegistryPod(root / "pod", config_dir=shm / "config")
        try:
            write_secret_dir(pod.mounts / "cosi", cosi(moto.endpoint, key))
            api.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": SECRET, "namespace": "default"},
                        "data": api_data(cosi(moto.endpoint, key))})
            api.create(registry_object(spec(pod.port)))
            pod.start_agent(registry="default/reg", kube_host=api.url,
                            extra=["--api-secret", f"cosi={SECRET}", "--log-level", "info"])
            pod.start_supervisor()
            pod.wait_serving()
            config_path = pod.config_dir / "config.yml"
            endpoint = Endpoint("127.0.0.1", pod.port)

            rotations = []
            for _ in range(args.rotations):
                new_key = moto.create_access_key("registry")
                mark = Mark(config_path, pod.supervisor.log_path)
                started = time.perf_counter()
                api.patch("v1/secrets", "default", SECRET, {"data": api_data(cosi(moto.endpoint, new_key))})
                wait_new_registry(config_path, endpoint, mark)
                rotations.append(time.perf_counter() - started)
                wait_drained(mark.before)
                moto.delete_access_key("registry", key.access_key_id)
                key = new_key
                time.sleep(0.2)  # let the moto and registry logs settle between samples

            cold = cold_starts(config_path.read_bytes(), root, args.rotations)
            restarts = pod.actions("restarted")
            via_api = pod.metric("secret_changes_applied_total", 'path="api"')
        finally:
            pod.stop()

    median, cold_median = statistics.median(rotations), statistics.median(cold)
    print(f"registry cold start (exec -> first 200 on GET /, s3 driver on moto): {summary_ms(cold)}")
    print(f"api-to-serving (Secret patched through the API -> new registry answers 200): {summary_ms(rotations)}")
    print(f"median overhead over cold start: {(median - cold_median) * 1000:.1f} ms "
          f"(target <= 150 ms: {'met' if median <= cold_median + 0.150 else 'MISSED'})")
    print(f"p99 {nearest_rank(rotations, 0.99) * 1000:.1f} ms; restarts {len(restarts)}, "
          f"applied via the API path {via_api:g} of {args.rotations}")
    if restarts:
        for line in restarts[:3]:
            print("    sample step timings (s):", line["timings"])
        print(f"inside the agent, render+preflight+write+restart: {summary_ms([r['seconds'] for r in restarts])}")


if __name__ == "__main__":
    main()
