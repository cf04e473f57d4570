"""A pull-through cache (docs/design.md §4.6): cold pull through the cache, warm pull from it, and a direct pull from
the upstream, in MiB/s in the same run; and a credential change until the registry serves with the new password.

One pod in file mode (`berth-agent run --registry-file`, berth-supervise, the real registry) as a proxy of a token
upstream on 127.0.0.1 (tests/support/registries/upstream.py: a real registry behind the one-port front that serves
/token
and forwards /v2/, and labels each token with the password that got it). Each round pushes a fresh image of
`--layers` random layers of `--layer-mib` MiB to the upstream, then GETs every layer blob: directly from the
upstream (with a token, through the same front the cache uses), through the cache (cold: a miss each), and from
the cache again (warm). Then `--changes` credential changes: the upstream accepts a new password, the mounted
`proxy/` Secret volume is swapped to it as the kubelet does (..data rename), and the clock runs from the rename
until the upstream sees the first blob fetch made with a token of the new password (a client pulls a blob not
cached yet, over and over, meanwhile). Beside it, the registry's own cold start on the same config.

    python bench/proxy_pull.py [--rounds 3] [--layers 4] [--layer-mib 16] [--changes 10] [--distribution 2|3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request
from pathlib import Path

from agent_common import cold_starts, shm_dir, summary_ms, workdir
from support.registries.pod import RegistryPod, filesystem_spec, registry_object
from support.registries.registry import REGISTRY3_BINARY, make_oci_image, push_image
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.registries.supervisor import REGISTRY_BIN
from support.registries.upstream import token_for, token_upstream

USER = "mirror"


def get(url: str, token: str | None = None) -> bytes:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.read()


def timed_pull(urls: list[str], blobs: list[bytes], token: str | None = None) -> float:
    """MiB/s of GETting every URL in turn (each read back and compared)."""
    started = time.perf_counter()
    for url, blob in zip(urls, blobs):
        assert get(url, token) == blob, url
    return sum(len(b) for b in blobs) / (1024 * 1024) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--layer-mib", type=int, default=16)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--distribution", choices=("2", "3"), default="2")
    args = parser.parse_args()
    binary = REGISTRY_BIN if args.distribution == "2" else REGISTRY3_BINARY
    if not binary:
        raise SystemExit("--distribution 3 needs BERTH_REGISTRY3_BIN (docs/upstream.md#parts-registry3)")
    passwords = [f"password-{i}" for i in range(args.changes + 1)]
    with workdir("proxy") as tmp, shm_dir() as shm, \
            token_upstream(Path(tmp) / "upstream", {USER: {passwords[0]}}, binary=binary) as upstream:
        root = Path(tmp)
        pod = RegistryPod(root / "pod", config_dir=shm / "config", binary=binary)
        try:
            write_secret_dir(pod.mounts / "proxy", {"username": USER, "password": passwords[0]})
            spec = filesystem_spec(pod.port, major=args.distribution,
                                   http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s"})
            spec["config"]["log"]["level"] = "error"
            spec["config"]["proxy"] = {"remoteURL": upstream.url, "credentials": {"secretName": "upstream"}}
            pod.write_registry_file(registry_object(spec))
            pod.start_agent(extra=["--log-level", "info", "--upstream-interval", "3600"])
            pod.start_supervisor()
            pod.wait_serving()

            speeds: dict[str, list[float]] = {"direct": [], "cold": [], "warm": []}
            for index in range(args.rounds):
                repo = f"bench/round{index}"
                image = make_oci_image(root / f"image-{index}", layers=args.layers,
                                       layer_size=args.layer_mib * 1024 * 1024)
                push_image(image, upstream.registry, f"{repo}:1", creds=(USER, passwords[0]))
                digests = image.layer_digests
                blobs = [image.blobs[d] for d in digests]
                token = token_for(upstream, USER, passwords[0], f"repository:{repo}:pull")
                speeds["direct"].append(timed_pull([f"{upstream.url}/v2/{repo}/blobs/{d}" for d in digests],
                                                   blobs, token))
                through = [f"{pod.url}/v2/{repo}/blobs/{d}" for d in digests]
                speeds["cold"].append(timed_pull(through, blobs))
                time.sleep(1.0)  # 2.8 stores a miss from a second upstream GET in the background: let it land
                speeds["warm"].append(timed_pull(through, blobs))

            # Credential changes: small uncached blobs to pull through while the clock runs.
            many = make_oci_image(root / "many", layers=400, layer_size=4096)
            push_image(many, upstream.registry, "bench/many:1", creds=(USER, passwords[0]))
            fresh = iter(many.layer_digests)
            changes = []
            for index in range(1, args.changes + 1):
                new = passwords[index]
                upstream.front.passwords[USER].add(new)
                started = time.perf_counter()
                swap_secret_dir(pod.mounts / "proxy", {"username": USER, "password": new})
                while not any(e.password == new and "/blobs/" in e.path for e in upstream.front.after(0)):
                    try:
                        get(f"{pod.url}/v2/bench/many/blobs/{next(fresh)}")
                    except OSError:
                        time.sleep(0.001)  # the overlapped restart's few ms without a listener
                changes.append(time.perf_counter() - started)
                upstream.front.passwords[USER].discard(passwords[index - 1])
                time.sleep(0.3)
            cold = cold_starts((pod.config_dir / "config.yml").read_bytes(), root, 10, binary=binary)
            restarts = pod.actions("restarted")
        finally:
            pod.stop()

    size = args.layers * args.layer_mib
    print(f"Distribution {args.distribution}: {args.rounds} rounds of {args.layers} x {args.layer_mib} MiB layers "
          f"({size} MiB a round), MiB/s median (min-max):")
    for name, label in (("direct", "direct pull from the upstream (token, same front)"),
                        ("cold", "cold pull through the cache (every blob a miss)"),
                        ("warm", "warm pull from the cache")):
        values = speeds[name]
        print(f"  {label}: {statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
    print(f"registry cold start (exec -> first 200 on GET /, proxy config): {summary_ms(cold)}")
    print(f"credential change to serving (proxy/ ..data rename -> first blob fetched with the new password): "
          f"{summary_ms(changes)}")
    print(f"restarts {len(restarts)} of {args.changes} changes")


if __name__ == "__main__":
    main()
