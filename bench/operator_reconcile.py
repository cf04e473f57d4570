"""Reconcile N Registries (default 200) with the operator against the test API server; print the time taken
and the operator's peak RSS.

    python bench/operator_reconcile.py [--count 200] [--process]

Default: the operator runs in this process (berth_operator.runner.run in a thread, as in the tests), so the
peak RSS printed includes the test API server holding every object; the RSS before the operator started is
printed beside it. --process runs `python -m berth_operator` as a child process instead and reads the
child's own peak RSS (VmHWM) from /proc: the operator alone.

Phases: (1) create N Registries (a mix of the storage modes) with the operator running, until every one
reports status.observedGeneration; (2) restart the operator, until every Registry was resumed, counting
writes (0 expected: idempotence).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.kube import KubeApi  # noqa: E402
from support.operator_harness import REGISTRIES_PATH, WRITE_METHODS, OperatorHarness  # noqa: E402

NS = "bench"
SPECS = [
    {"config": {"storage": {"inmemory": {}}}},
    {"config": {"storage": {"filesystem": {"storageClass": "standard"}}}},
    {"replicas": 3, "config": {"storage": {"objectStorage": {"bucketClass": "b", "bucketAccessClass": "a"}}}},
    {"replicas": 2, "config": {"storage": {"filesystem": {"persistentVolumeClaim": "shared"}}}},
]


def vm_hwm_mb(pid: int | str = "self") -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def all_reconciled(api: KubeApi, count: int) -> bool:
    regs = api.list(REGISTRIES_PATH, NS)
    return len(regs) == count and all(
        (r.get("status") or {}).get("observedGeneration") == r["metadata"]["generation"] for r in regs)


def wait(predicate, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {what}")
        time.sleep(0.1)


def writes(api: KubeApi, mark: int) -> int:
    return sum(1 for method, path in api.requests()[mark:] if method in WRITE_METHODS and "/events" not in path)


class ChildOperator:
    """`python -m berth_operator` against the test API server, as the real process."""

    def __init__(self, api: KubeApi):
        self.api = api
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, KUBECONFIG=str(self.api.kubeconfig), BERTH_AGENT_IMAGE="ghcr.io/berth-dev/berth:bench")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "berth_operator", "-n", NS, "--liveness", "", "--metrics-port", "0",
             "--log-level", "warning"], env=env)

    def peak_mb(self) -> float:
        assert self.proc is not None
        return vm_hwm_mb(self.proc.pid)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--process", action="store_true", help="run the operator as a child process")
    args = parser.parse_args()

    with KubeApi() as api:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "shared", "namespace": NS},
                    "spec": {"accessModes": ["ReadWriteMany"]}})
        before_mb = vm_hwm_mb()
        operator = ChildOperator(api) if args.process else OperatorHarness(api, [NS])
        operator.start()
        if args.process:
            wait(lambda: api.open_watches >= 3, "the child operator's watches")

        started = time.monotonic()
        for i in range(args.count):
            api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                        "metadata": {"name": f"reg-{i:03d}", "namespace": NS}, "spec": SPECS[i % len(SPECS)]})
        wait(lambda: all_reconciled(api, args.count), "the first reconcile of every Registry")
        created_s = time.monotonic() - started
        objects = sum(len(api.list(p, NS)) for p in ("v1/serviceaccounts", "rbac.authorization.k8s.io/v1/roles",
                      "rbac.authorization.k8s.io/v1/rolebindings", "v1/secrets", "v1/services", "apps/v1/deployments",
                      "v1/persistentvolumeclaims", "objectstorage.k8s.io/v1alpha1/bucketclaims",
                      "objectstorage.k8s.io/v1alpha1/bucketaccesses", "policy/v1/poddisruptionbudgets"))
        first_requests = len(api.requests())
        peak_first = operator.peak_mb() if args.process else vm_hwm_mb()
        operator.stop()

        # Restart: every Registry is resumed; nothing should be written.
        mark = len(api.requests())
        operator = ChildOperator(api) if args.process else OperatorHarness(api, [NS])
        started = time.monotonic()
        operator.start()
        if args.process:
            # No writes are expected, so count the GETs of the Deployments the resumes make.
            def resumed() -> bool:
                gets = sum(1 for m, p in api.requests()[mark:] if m == "GET" and "/deployments/" in p)
                return gets >= 2 * args.count  # apply's get and the status read, per Registry
            wait(resumed, "the resume of every Registry")
        else:
            wait(lambda: operator.ctx.completed >= args.count, "the resume of every Registry")
        resumed_s = time.monotonic() - started
        peak = max(peak_first, operator.peak_mb() if args.process else vm_hwm_mb())
        operator.stop()
        written = writes(api, mark)
        resume_requests = len(api.requests()) - mark

    mode = "child process (berth-operator alone)" if args.process else "in process (operator + test API server)"
    print(f"operator: {mode}; {args.count} Registries, {objects} owned objects created")
    print(f"first reconcile of all: {created_s:.2f} s total, {1000 * created_s / args.count:.1f} ms per Registry")
    print(f"restart (resume) of all: {resumed_s:.2f} s total, {1000 * resumed_s / args.count:.1f} ms per Registry, "
          f"{written} writes")
    print(f"API requests: {first_requests} for the first reconciles ({first_requests / args.count:.0f} per Registry, "
          f"watches and Events included), {resume_requests} for the restart")
    if args.process:
        print(f"operator peak RSS (VmHWM of the child): {peak:.0f} MB")
    else:
        print(f"peak RSS (VmHWM of this process): {peak:.0f} MB; before the operator started: {before_mb:.0f} MB")


if __name__ == "__main__":
    main()
