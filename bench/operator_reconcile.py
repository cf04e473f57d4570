"""The operator at N Registries on the real API server tier (kube-apiserver v1.36 + etcd, support.apiserver):
converge, idle, one edit. Prints each figure beside its target (issue 22; docs/benchmarks.md).

    python bench/operator_reconcile.py [--count 100 --count 300 --count 1000] [--idle 130]

Per N, on a fresh API server: the Registries are created first (a quarter each: inmemory, filesystem from a
StorageClass, COSI from classes with 3 replicas, an existing ReadWriteMany claim with 2 replicas), then
`berth-operator` starts as a child process, as deploy/ runs it (leader election on with deploy/'s timings,
deploy/'s ServiceAccount token and RBAC). Figures:
- converge: from the operator's start until every Registry has status.observedGeneration == generation;
- the operator's peak RSS (VmHWM of the child) and its API requests by verb (the API server's audit log,
  filtered to the operator's ServiceAccount);
- idle: the operator's CPU (utime + stime from /proc) over --idle seconds with nothing changing, and the writes
  it made then (Events and its own leader Lease renewals are not counted: the renewal is what election is);
- one edit (spec.replicas 2 -> 3 of one Registry on the existing claim, which changes its Deployment): time
  until the Deployment is written.
No kubelet or controllers run: no pod starts, Registries stay WaitingForPods (a fixed status: no status churn).
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import sys
import tempfile
import threading
import time
from typing import Any

import kubernetes.client
import kubernetes.watch

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.apiserver import KubeApiServer, skip_reason  # noqa: E402
from support.apiserver_identities import OPERATOR_USER, start_operator  # noqa: E402
from support.kube import COSI_CRDS  # noqa: E402
from support.operator_harness import REGISTRIES_PATH  # noqa: E402

NS = "bench"
COSI = "objectstorage.k8s.io/v1alpha1"
SPECS = [
    {"config": {"storage": {"inmemory": {}}}},
    {"config": {"storage": {"filesystem": {"storageClass": "standard"}}}},
    {"replicas": 3, "config": {"storage": {"objectStorage": {"bucketClass": "b", "bucketAccessClass": "a"}}}},
    {"replicas": 2, "config": {"storage": {"filesystem": {"persistentVolumeClaim": "shared"}}}},
]
DEPLOY_LEASE = {"duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}  # deploy/deployment.yaml's
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
TARGETS = {"converge_1000_s": 60.0, "rss_mib": 200.0, "idle_cpu_pct": 2.0, "idle_writes": 0, "edit_s": 1.0,
           "per_registry_growth": 1.5}


def vm_hwm_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def vm_rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def wait(predicate: Any, what: str, timeout: float, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {what}")
        time.sleep(every)


def seed(api: KubeApiServer, count: int) -> None:
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    api.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
                "provisioner": "example.com/none", "allowVolumeExpansion": True})
    api.create({"apiVersion": COSI, "kind": "BucketClass", "metadata": {"name": "b"},
                "driverName": "example.com/none", "deletionPolicy": "Delete"})
    api.create({"apiVersion": COSI, "kind": "BucketAccessClass", "metadata": {"name": "a"},
                "driverName": "example.com/none", "authenticationType": "Key"})
    api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "shared", "namespace": NS},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    # An existing claim is bound (what the PV controller does; there is none here).
    api.patch("v1/persistentvolumeclaims", NS, "shared", {"status": {"phase": "Bound"}}, subresource="status")
    for i in range(count):
        api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                    "metadata": {"name": f"reg-{i:04d}", "namespace": NS}, "spec": SPECS[i % len(SPECS)]})


def all_reconciled(api: KubeApiServer, count: int) -> bool:
    regs = api.list(REGISTRIES_PATH, NS)
    return len(regs) == count and all(
        (r.get("status") or {}).get("observedGeneration") == r["metadata"]["generation"] for r in regs)


class Converged:
    """Whether every Registry has status.observedGeneration == generation, from one watch of the Registries
    (a thread): polling a list of N Registries every second, as the bench did until issue 22's second round
    (docs/benchmarks.md), costs the API server, which the operator shares the 2 cores with, a read and an
    encoding of every Registry each time. A list starts it, and again after any end of the watch."""

    def __init__(self, api: KubeApiServer, count: int):
        self.count, self.seen = count, {}
        self.custom = kubernetes.client.CustomObjectsApi(api.client())
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="bench-converged")
        self.thread.start()

    def _note(self, reg: dict[str, Any]) -> None:
        meta = reg["metadata"]
        self.seen[meta["name"]] = (reg.get("status") or {}).get("observedGeneration") == meta["generation"]

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self._follow()
            except Exception:  # the server went (the end of a measure) or dropped the watch: list again  # noqa: BLE001
                if self.stop.wait(0.5):
                    return

    def _follow(self) -> None:
        group, version, plural = REGISTRIES_PATH.split("/")
        while not self.stop.is_set():
            listed = self.custom.list_namespaced_custom_object(group, version, NS, plural)
            for reg in listed["items"]:
                self._note(reg)
            stream = kubernetes.watch.Watch().stream(
                self.custom.list_namespaced_custom_object, group, version, NS, plural,
                resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=60)
            for event in stream:
                if self.stop.is_set():
                    return
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._note(event["object"])

    def __call__(self) -> bool:
        return len(self.seen) == self.count and all(self.seen.values())


def operator_requests(api: KubeApiServer, since: int) -> list[dict[str, Any]]:
    return api.audit(OPERATOR_USER, since=since)


def by_verb(entries: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(collections.Counter(e["verb"] for e in entries).items()))


def by_resource(entries: list[dict[str, Any]]) -> dict[str, int]:
    """Requests by verb and resource (subresource after a slash): where the per-Registry cost goes."""
    def name(e: dict[str, Any]) -> str:
        ref = e.get("objectRef") or {}
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        return f"{e['verb']} {ref.get('resource')}{sub}"
    return dict(sorted(collections.Counter(map(name, entries)).items(), key=lambda kv: -kv[1]))


def counted_writes(entries: list[dict[str, Any]]) -> list[str]:
    """Writes other than Events and the operator's own leader Lease."""
    found = []
    for e in entries:
        ref = e.get("objectRef") or {}
        if e["verb"] not in WRITE_VERBS or ref.get("resource") == "events":
            continue
        if ref.get("resource") == "leases" and ref.get("namespace") == "berth-system":
            continue
        found.append(f"{e['verb']} {ref.get('resource')} {ref.get('namespace')}/{ref.get('name')}")
    return found


def measure(count: int, idle_seconds: float) -> dict[str, Any]:
    with KubeApiServer(crds=COSI_CRDS) as api, tempfile.TemporaryDirectory(prefix="berth-bench-") as logs:
        seed(api, count)
        converged = Converged(api, count)
        mark = api.audit_mark()
        started = time.monotonic()
        operator, _token = start_operator(api, "bench-operator", pathlib.Path(logs), [NS], **DEPLOY_LEASE)
        try:
            pid = operator.process.pid
            wait(converged, "every Registry reconciled", 900, every=0.2)
            converge_s = time.monotonic() - started
            converged.stop.set()
            assert all_reconciled(api, count), "the watch said converged, the list does not agree"
            converge_cpu = cpu_seconds(pid)
            converge_requests = operator_requests(api, mark)
            peak = vm_hwm_mib(pid)

            time.sleep(10)  # the echoes of its own writes settle
            idle_mark = api.audit_mark()
            cpu_before, t0 = cpu_seconds(pid), time.monotonic()
            time.sleep(idle_seconds)
            idle_cpu = 100 * (cpu_seconds(pid) - cpu_before) / (time.monotonic() - t0)
            idle_entries = operator_requests(api, idle_mark)
            idle_writes = counted_writes(idle_entries)
            idle_rss = vm_rss_mib(pid)

            name = "reg-0003"  # on the existing claim, 2 replicas: 3 change its Deployment
            deployment_path = "apps/v1/deployments"
            before = api.get(deployment_path, NS, name)["metadata"]["generation"]
            edit_started = time.monotonic()
            api.patch(REGISTRIES_PATH, NS, name, {"spec": {"replicas": 3}})
            wait(lambda: api.get(deployment_path, NS, name)["metadata"]["generation"] != before,
                 "the edited Registry's Deployment written", 60, every=0.01)
            edit_s = time.monotonic() - edit_started
            peak = max(peak, vm_hwm_mib(pid))
        finally:
            operator.stop()
            log = operator.log()
        errors = [line for line in log.splitlines() if '"levelname": "ERROR"' in line or "Traceback" in line]
    return {"count": count, "converge_s": converge_s, "converge_cpu_s": converge_cpu, "peak_mib": peak,
            "requests": by_verb(converge_requests), "by_resource": by_resource(converge_requests),
            "idle_cpu_pct": idle_cpu, "idle_s": idle_seconds, "idle_requests": by_verb(idle_entries),
            "idle_writes": idle_writes, "idle_rss_mib": idle_rss, "edit_s": edit_s, "errors": errors[:5]}


def met(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def report(result: dict[str, Any]) -> None:
    n = result["count"]
    print(f"--- N = {n} Registries")
    converge_target = "" if n != 1000 else f" (target < {TARGETS['converge_1000_s']:.0f} s: " \
                                           f"{met(result['converge_s'] < TARGETS['converge_1000_s'])})"
    print(f"converge: {result['converge_s']:.1f} s, {1000 * result['converge_s'] / n:.1f} ms per Registry"
          f"{converge_target}; operator CPU meanwhile {result['converge_cpu_s']:.1f} s, load average "
          f"{os.getloadavg()[0]:.1f} after")
    print(f"operator peak RSS: {result['peak_mib']:.0f} MiB (target <= {TARGETS['rss_mib']:.0f}: "
          f"{met(result['peak_mib'] <= TARGETS['rss_mib'])})")
    total = sum(result["requests"].values())
    print(f"API requests until converged: {total} ({total / n:.1f} per Registry) {result['requests']}")
    print(f"  by verb and resource: {result['by_resource']}")
    print(f"idle {result['idle_s']:.0f} s: CPU {result['idle_cpu_pct']:.2f} % of a core (target <= "
          f"{TARGETS['idle_cpu_pct']:.0f} %: {met(result['idle_cpu_pct'] <= TARGETS['idle_cpu_pct'])}), "
          f"RSS {result['idle_rss_mib']:.0f} MiB, requests {result['idle_requests']}")
    print(f"idle writes (not Events, not the leader Lease): {len(result['idle_writes'])} "
          f"(target 0: {met(not result['idle_writes'])}) {result['idle_writes'][:5]}")
    print(f"one edit (spec.replicas) until its Deployment is written: {result['edit_s']:.2f} s"
          + (f" (target < {TARGETS['edit_s']:.0f} s: {met(result['edit_s'] < TARGETS['edit_s'])})" if n == 1000
             else ""))
    if result["errors"]:
        print(f"operator log errors: {result['errors']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, action="append", help="N (repeat for several; default 100)")
    parser.add_argument("--idle", type=float, default=130.0, help="seconds of nothing changing")
    args = parser.parse_args()
    if (reason := skip_reason()) is not None:
        raise SystemExit(reason)
    results = []
    for count in args.count or [100]:
        results.append(measure(count, args.idle))
        report(results[-1])
        sys.stdout.flush()
    if len(results) > 1:
        per = [r["converge_s"] / r["count"] for r in results]
        growth = max(per) / min(per)
        print(f"cost per Registry from N={results[0]['count']} to N={results[-1]['count']}: "
              f"{', '.join(f'{1000 * p:.1f} ms' for p in per)}; growth {growth:.2f}x (target <= "
              f"{TARGETS['per_registry_growth']}x: {met(growth <= TARGETS['per_registry_growth'])})")


if __name__ == "__main__":
    main()
