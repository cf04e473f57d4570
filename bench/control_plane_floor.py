"""The floor under bench/operator_reconcile.py: the same control plane, the same Registries and the same objects,
written without any operator. What this takes is what the cluster itself needs for N Registries on this
machine; the operator's run minus this is the operator's overhead.

    python bench/operator_reconcile.py --count 1000   # the operator's run, for comparison
    python bench/control_plane_floor.py --count 1000 [--workers 16]

Per N, on a fresh control plane (support.clusters.control_plane: kube-apiserver, etcd, kube-controller-manager,
kube-scheduler) seeded as operator_reconcile.py seeds it (its `seed`: the classes, the bound claim, N Registries of
the four specs): each Registry's objects are built by the operator's own builders (builders.build_all, the facts
the operator would look up) and written with a plain client (the operator's raw client as cluster admin, no caches,
no reads): server-side apply for the applied kinds, a create for the create-only ones, in builder order, then one
status patch of the Registry and one Event, as the operator's first reconcile writes them; --workers threads at once
(the operator's RECONCILE_WORKERS). Then the same wait as the operator bench's idle phase: every pod the Deployments
want exists and every Deployment's status caught up (the controllers quiet).

Prints: the time until every object was written and until the controllers were quiet, from the first write; the CPU
of kube-apiserver, etcd, the controller manager and the scheduler meanwhile; the requests written; the machine's
load average before and after.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import secrets
import sys
import time
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from berth_operator.builders import ClusterFacts, build_all  # noqa: E402
from berth_operator.core.kinds import CREATE_ONLY_KINDS  # noqa: E402
from berth_operator.engine.reconcile import parse  # noqa: E402
from berth_operator.kube.client import Kube  # noqa: E402
from berth_operator.reactor.state import RECONCILE_WORKERS  # noqa: E402
from operator_reconcile import NS, SPECS, controllers_settled, cpu_seconds, seed, wait  # noqa: E402
from support.clusters.control_plane import running_cluster, skip_reason  # noqa: E402
from support.clusters.kube import COSI_CRDS  # noqa: E402
from support.clusters.operator_harness import AGENT_IMAGE, REGISTRIES_PATH  # noqa: E402


def facts_for(index: int) -> ClusterFacts:
    """What the operator's look-up finds for the bench's specs: the existing claim is ReadWriteMany."""
    shared = "persistentVolumeClaim" in (SPECS[index % len(SPECS)]["config"]["storage"].get("filesystem") or {})
    return ClusterFacts(agent_image=AGENT_IMAGE, pvc_access_modes=("ReadWriteMany",) if shared else None)


def write_one(kube: Kube, body: dict[str, Any]) -> int:
    """One Registry's objects, its status and an Event, as the operator's first reconcile writes them; the count
    of requests."""
    reg = parse(body)
    index = int(body["metadata"]["name"].rsplit("-", 1)[1])
    sent = 0
    for manifest in build_all(reg, facts_for(index), http_secret_value=secrets.token_urlsafe(32)):
        if manifest["kind"] in CREATE_ONLY_KINDS:
            kube.create(manifest)
        else:
            kube.apply(manifest, force=True)
        sent += 1
    meta = body["metadata"]
    kube.patch("berth.dev/v1alpha1", "Registry", NS, meta["name"], {"status": {
        "observedGeneration": meta["generation"],
        "conditions": [{"type": "Degraded", "status": "False", "reason": "AsExpected", "message": "floor",
                        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}},
        subresource="status")
    kube.create({"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "floor-", "namespace": NS},
                 "involvedObject": {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "namespace": NS,
                                    "name": meta["name"], "uid": meta["uid"]},
                 "reason": "Created", "message": "Created (floor)", "type": "Normal",
                 "source": {"component": "berth-floor"}})
    return sent + 2


def measure(count: int, workers: int, timeout: float) -> dict[str, Any]:
    load_before = os.getloadavg()
    with running_cluster(crds=COSI_CRDS) as plane:
        api = plane.api
        seed(plane, count)
        regs = api.list(REGISTRIES_PATH, NS)
        pids = {**api.pids(), **plane.pids()}
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        configuration = api.configuration()
        configuration.connection_pool_maxsize = workers + 4
        kube = Kube(configuration)
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(workers, "floor") as pool:
            requests = sum(pool.map(lambda body: write_one(kube, body), regs))
        written_s = time.monotonic() - started
        cpu_written = {name: cpu_seconds(p) - cpu_before[name] for name, p in pids.items()}
        wait(lambda: controllers_settled(api, count), "the controllers made every pod and Deployment status",
             timeout, every=2)
        settled_s = time.monotonic() - started
        cpu = {name: cpu_seconds(p) - cpu_before[name] for name, p in pids.items()}
        kube.close()
    return {"count": count, "workers": workers, "written_s": written_s, "settled_s": settled_s,
            "cpu_written": cpu_written, "cpu": cpu, "requests": requests, "load": (load_before, os.getloadavg())}


def report(result: dict[str, Any]) -> None:
    n = result["count"]
    (before, _, _), (after, _, _) = result["load"]
    print(f"--- floor, N = {n} Registries, {result['workers']} writers (load average {before:.1f} before, "
          f"{after:.1f} after)")
    print(f"every object written: {result['written_s']:.1f} s ({result['requests']} requests, "
          f"{result['requests'] / n:.1f} per Registry); CPU meanwhile: "
          + ", ".join(f"{name} {s:.1f} s" for name, s in result["cpu_written"].items()))
    print(f"controllers quiet (every pod made, every Deployment status caught up): {result['settled_s']:.1f} s "
          f"after the first write; CPU until then: "
          + ", ".join(f"{name} {s:.1f} s" for name, s in result["cpu"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, action="append", help="N (repeat for several; default 100)")
    parser.add_argument("--workers", type=int, default=RECONCILE_WORKERS, help="writers at once")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    if (reason := skip_reason()) is not None:
        raise SystemExit(reason)
    for count in args.count or [100]:
        report(measure(count, args.workers, args.timeout))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
