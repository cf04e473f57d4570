"""Token auth trust change to serving: the root certificate bundle swapped until the new registry serves tokens
signed by a key only the new bundle trusts (docs/decisions/0015-pre-flight-before-a-restart.md).

For each of N changes: a fresh CA (made before the clock starts), the `token-bundle/` volume swapped to it as the
kubelet does (..data rename; a ConfigMap volume is written the same way), and the time from the rename until a
token signed by a key of that CA gets 200 from the registry (the old registry answers 401 to it: only the new
process trusts the new bundle). Beside it, in the same run, the registry's own cold start on the same config:
exec until its first 200 on GET /. With `--pullers N` clients pull a blob with tokens from the issuer all the
while and the pull outcomes are printed (refused connections retried, counted and shown).

    python bench/agent_token_rotation.py [--changes 30] [--pullers 1] [--distribution 2|3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.error
from pathlib import Path

from agent_common import cold_starts, nearest_rank, shm_dir, summary_ms, workdir
from support.registries.pod import RegistryPod, filesystem_spec, registry_object
from support.registries.registry import REGISTRY3_BINARY, make_oci_image, push_image
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.registries.supervisor import REGISTRY_BIN
from support.services.token_issuer import TestCA, TokenIssuer, bearer_status, bundle, fetch_token
from support.traffic.pull_loop import PullLoop

SERVICE = "berth-bench-registry"
ALICE = ("alice", "alice-password")
SCOPE = "repository:bench/app:pull"


def status(url: str, token: str) -> int | None:
    """The answer to a token, or None while no registry listens (the few ms of an overlapped restart)."""
    try:
        return bearer_status(url, token, timeout=5)
    except (urllib.error.URLError, ConnectionError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=30)
    parser.add_argument("--pullers", type=int, default=1)
    parser.add_argument("--distribution", choices=("2", "3"), default="2")
    args = parser.parse_args()
    binary = REGISTRY_BIN if args.distribution == "2" else REGISTRY3_BINARY
    if not binary:
        raise SystemExit("--distribution 3 needs BERTH_REGISTRY3_BIN (docs/upstream.md#parts-registry3)")
    cas = [TestCA(f"bench-ca-{i}") for i in range(args.changes + 1)]
    keys = [ca.issue("RS256") for ca in cas]
    with workdir("token") as tmp, shm_dir() as shm, TokenIssuer(keys[0], users=dict([ALICE])) as issuer:
        root = Path(tmp)
        pod = RegistryPod(root / "pod", config_dir=shm / "config", binary=binary)
        loops: list[PullLoop] = []
        try:
            write_secret_dir(pod.mounts / "token-bundle", {"ca.pem": bundle(cas[0])})
            spec = filesystem_spec(pod.port, major=args.distribution,
                                   http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s"})
            spec["config"]["log"]["level"] = "error"
            spec["config"]["auth"] = {"token": {
                "realm": issuer.realm, "service": SERVICE, "issuer": issuer.issuer,
                "rootCertBundle": {"configMap": {"name": "trust", "field": "ca.pem"}}}}
            pod.write_registry_file(registry_object(spec))
            pod.start_agent(extra=["--log-level", "info"])
            pod.start_supervisor()
            pod.wait_serving()
            image = make_oci_image(root / "image", layer_size=256 * 1024)
            push_image(image, pod.host, "bench/app:1", creds=ALICE)
            layer = image.layer_digests[0]
            url = f"{pod.url}/v2/bench/app/blobs/{layer}"
            challenge = {"realm": issuer.realm, "service": SERVICE, "scope": SCOPE}
            loops = [PullLoop(url, image.blobs[layer], authorization=lambda: f"Bearer {fetch_token(challenge, ALICE)}")
                     for _ in range(args.pullers)]
            for loop in loops:
                loop.start()

            changes = []
            for index in range(1, args.changes + 1):
                # Each change adds a new CA beside the issuer's own (cas[0]): the pullers' tokens stay trusted.
                token = issuer.mint(SERVICE, SCOPE, key=keys[index])
                assert bearer_status(url, token) == 401, "the new key is trusted before the change"
                started = time.perf_counter()
                swap_secret_dir(pod.mounts / "token-bundle", {"ca.pem": bundle(cas[0], cas[index])})
                while status(url, token) != 200:
                    time.sleep(0.001)
                changes.append(time.perf_counter() - started)
                time.sleep(0.2)
            stats = [loop.stop() for loop in loops]
            cold = cold_starts((pod.config_dir / "config.yml").read_bytes(), root, args.changes, binary=binary)
            restarts = pod.actions("restarted")
        finally:
            for loop in loops:
                loop.stop()
            pod.stop()

    median, cold_median = statistics.median(changes), statistics.median(cold)
    print(f"Distribution {args.distribution}: registry cold start (exec -> first 200 on GET /, token auth, "
          f"filesystem): {summary_ms(cold)}")
    print(f"bundle change to serving (token-bundle ..data rename -> a token of the new CA gets 200): "
          f"{summary_ms(changes)}")
    p99 = nearest_rank(changes, 0.99)
    print(f"median over cold start: {(median - cold_median) * 1000:.1f} ms; p99 {p99 * 1000:.1f} ms")
    failures = [f for s in stats for f in s.failures]
    print(f"pull load: {args.pullers} clients with tokens, {sum(s.requests for s in stats)} pulls, {len(failures)} "
          f"failed, {sum(s.refused_retries for s in stats)} refused and {sum(s.reset_retries for s in stats)} reset "
          f"connections retried{': ' + '; '.join(failures[:3]) if failures else ''}")
    print(f"restarts {len(restarts)} of {args.changes} changes")


if __name__ == "__main__":
    main()
