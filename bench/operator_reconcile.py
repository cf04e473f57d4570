"""The operator at N Registries on a real control plane (kube-apiserver, etcd, kube-controller-manager and
kube-scheduler v1.36: support.clusters.control_plane): converge, idle, one edit. Prints each figure beside its target
and
fails (exit 1) when the run is not what a user would call converged (docs/benchmarks.md).

    python bench/operator_reconcile.py [--count 100 --count 300 --count 1000] [--idle 130]

Per N, on a fresh control plane: the Registries are created first (a quarter each: inmemory, filesystem from a
StorageClass, COSI from classes with 3 replicas, an existing ReadWriteMany claim bound to a PersistentVolume
with 2 replicas), then `berth-operator` starts as a child process, as deploy/ runs it (leader election on with
deploy/'s timings, deploy/'s ServiceAccount token and RBAC). The controller manager turns each Deployment into
a ReplicaSet and Pods, which stay Pending (no node; the scheduler marks them Unschedulable): their status
updates and the Deployments' reach the operator's watches, as on any cluster.

Converged means what a user counts: every Registry has status.observedGeneration == generation and Degraded
False, or Degraded only because its pods cannot be scheduled (EXPECTED_DEGRADED: there is no node, and the
Registry says so), and every object it owns exists (counted by owner reference, kind by kind). The run
fails at once when a Registry is seen Degraded for any other reason (nothing here should degrade it: a refused
apply is ApplyFailed) or the operator
logs an error line, and after --timeout seconds without convergence. `--refuse-apply RESOURCE` makes the API
server refuse every create or update of that resource in the namespace (a ValidatingAdmissionPolicy): the smoke
test's fault (tests/apiserver/test_bench_operator.py).

Figures: converge time; the operator's peak RSS (VmHWM); its API requests by verb and by verb and resource
(the audit log, filtered to its ServiceAccount); its reconciles by cause (its own log lines); the CPU of the
operator, kube-apiserver, etcd, the controller manager and the scheduler while converging; idle: the operator's
CPU over --idle seconds with nothing changing (once the controllers have made every pod and Deployment status)
and its writes then (Events and its leader Lease renewals not counted); one edit (spec.replicas 2 -> 3 of a
Registry on the existing claim): time until its Deployment is written.
The machine's load average before and after each N.
"""

from __future__ import annotations

import argparse
import collections
import json
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

from support.clusters.apiserver import KubeApiServer  # noqa: E402
from support.clusters.apiserver_identities import OPERATOR_USER, start_operator  # noqa: E402
from support.clusters.control_plane import ControlPlane, running_cluster, skip_reason  # noqa: E402
from support.clusters.kube import COSI_CRDS  # noqa: E402
from support.clusters.operator_harness import REGISTRIES_PATH  # noqa: E402
from support.common.polling import wait_for  # noqa: E402

NS = "bench"
COSI = "objectstorage.k8s.io/v1alpha1"
SPECS = [
    {"config": {"storage": {"inmemory": {}}}},
    {"config": {"storage": {"filesystem": {"storageClass": "standard"}}}},
    {"replicas": 3, "config": {"storage": {"objectStorage": {"bucketClass": "b", "bucketAccessClass": "a"}}}},
    {"replicas": 2, "config": {"storage": {"filesystem": {"persistentVolumeClaim": "shared"}}}},
]
# What each Registry owns, as a user counts it (`kubectl get` by kind): every spec has these ...
OWNED = {"v1/serviceaccounts": 1, "rbac.authorization.k8s.io/v1/roles": 1,
         "rbac.authorization.k8s.io/v1/rolebindings": 1, "v1/secrets": 1,  # the generated HTTP secret
         "v1/services": 2,  # the registry's and the metrics Service
         "apps/v1/deployments": 1, "coordination.k8s.io/v1/leases": 2}  # reload turns and the GC run
# ... and by spec, what its storage and replicas need.
OWNED_BY_SPEC = [{}, {"v1/persistentvolumeclaims": 1},
                 {f"{COSI}/bucketclaims": 1, f"{COSI}/bucketaccesses": 1, "policy/v1/poddisruptionbudgets": 1},
                 {"policy/v1/poddisruptionbudgets": 1}]
DEPLOY_LEASE = {"duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}  # deploy/base/deployment.yaml's
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
TARGETS = {"converge_1000_s": 60.0, "rss_mib": 200.0, "idle_cpu_pct": 2.0, "idle_writes": 0, "edit_s": 1.0,
           "per_registry_growth": 1.5}


class BenchFailed(Exception):
    """The run is not converged as a user counts it: a Degraded Registry, an operator error, a missing object."""


def vm_status_mib(pid: int, key: str) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key}")


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def wait(predicate: Any, what: str, timeout: float, every: float = 0.5) -> None:
    """support.common.polling.wait_for, failing as the benchmark fails (BenchFailed: the run says its Lease story)."""
    try:
        wait_for(predicate, what, timeout, every)
    except AssertionError as timed_out:
        raise BenchFailed(str(timed_out)) from None


# ------------------------------------------------------------------------------------------ the cluster

def seed(plane: ControlPlane, count: int) -> None:
    api = plane.api
    plane.namespace(NS)  # with its default ServiceAccount, as every namespace of a cluster has
    api.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
                "provisioner": "example.com/none", "allowVolumeExpansion": True})
    api.create({"apiVersion": COSI, "kind": "BucketClass", "metadata": {"name": "b"},
                "driverName": "example.com/none", "deletionPolicy": "Delete"})
    api.create({"apiVersion": COSI, "kind": "BucketAccessClass", "metadata": {"name": "a"},
                "driverName": "example.com/none", "authenticationType": "Key"})
    # The existing claim, bound by the PV controller to a volume made for it (no node ever mounts it).
    api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "bench-shared"},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                         "hostPath": {"path": "/nonexistent/berth-bench"},
                         "claimRef": {"namespace": NS, "name": "shared"}}})
    api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "shared", "namespace": NS},
                "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": "bench-shared",
                         "resources": {"requests": {"storage": "1Gi"}}}})
    wait(lambda: (api.get("v1/persistentvolumeclaims", NS, "shared").get("status") or {}).get("phase") == "Bound",
         "the existing claim bound", 60)
    for i in range(count):
        api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                    "metadata": {"name": f"reg-{i:04d}", "namespace": NS}, "spec": SPECS[i % len(SPECS)]})


def refuse_applies(api: KubeApiServer, resource: str) -> None:
    """Every create and update of `resource` in NS refused at admission, with a message naming this bench."""
    name = f"bench-refuses-{resource}"
    group = {"deployments": "apps", "poddisruptionbudgets": "policy"}.get(resource, "")
    api.create({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {"failurePolicy": "Fail",
                         "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["*"],
                                                                 "operations": ["CREATE", "UPDATE"],
                                                                 "resources": [resource]}]},
                         "validations": [{"expression": "false",
                                          "message": f"the benchmark refuses every {resource} write"}]}})
    api.create({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"],
                         "matchResources": {"namespaceSelector": {
                             "matchLabels": {"kubernetes.io/metadata.name": NS}}}}})
    time.sleep(2)  # the policy reaches the API server's admission (it loads policies from a watch)


# ------------------------------------------------------------------------------------ what a user sees

# The one Degraded reason this control plane causes: its pods are Pending for want of a node.
EXPECTED_DEGRADED = "Unschedulable"


def degraded(reg: dict[str, Any]) -> tuple[str, str] | None:
    """Degraded's reason and message, unless it is False or EXPECTED_DEGRADED."""
    for condition in (reg.get("status") or {}).get("conditions") or ():
        if (condition.get("type") == "Degraded" and condition.get("status") == "True"
                and condition.get("reason") != EXPECTED_DEGRADED):
            return condition.get("reason", ""), condition.get("message", "")
    return None


def reconciled(reg: dict[str, Any]) -> bool:
    meta, conditions = reg["metadata"], (reg.get("status") or {}).get("conditions") or ()
    return ((reg.get("status") or {}).get("observedGeneration") == meta["generation"]
            and any(c.get("type") == "Degraded" and (c.get("status") == "False" or c.get("reason") == EXPECTED_DEGRADED)
                    for c in conditions))


class Registries:
    """Each Registry's latest state, from one watch (a thread; a list starts it, and again after any end of the
    watch): whether it is at its generation and not Degraded, and the first Degraded one seen. Polling a list of
    N Registries every second would cost the API server, on the same 2 cores, a read and an encoding of each."""

    def __init__(self, api: KubeApiServer, count: int):
        self.count, self.done, self.first_degraded = count, {}, None
        self.custom = kubernetes.client.CustomObjectsApi(api.client())
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="bench-registries")
        self.thread.start()

    def _note(self, reg: dict[str, Any]) -> None:
        name = reg["metadata"]["name"]
        self.done[name] = reconciled(reg)
        if self.first_degraded is None and (found := degraded(reg)) is not None:
            self.first_degraded = (name, *found)

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

    def converged(self) -> bool:
        return len(self.done) == self.count and all(self.done.values())


def controllers_settled(api: KubeApiServer, count: int) -> bool:
    """Every pod the Deployments want exists and every Deployment's status has caught up with it."""
    wanted = sum(SPECS[i % len(SPECS)].get("replicas", 1) for i in range(count))
    if len(api.list("v1/pods", NS)) != wanted:
        return False
    return all((d.get("status") or {}).get("observedGeneration") == d["metadata"]["generation"]
               and (d.get("status") or {}).get("replicas") == d["spec"]["replicas"]
               for d in api.list("apps/v1/deployments", NS))


def missing_objects(api: KubeApiServer, regs: list[dict[str, Any]]) -> list[str]:
    """What the Registries should own and do not: 'reg-0001: 0 of 1 v1/persistentvolumeclaims', by owner uid (or,
    for a claim retained under the default deletionPolicy, which has no owner, by the instance label)."""
    owned: collections.Counter[tuple[str, str]] = collections.Counter()
    uids = {reg["metadata"]["name"]: reg["metadata"]["uid"] for reg in regs}
    for path in {*OWNED, *(p for extra in OWNED_BY_SPEC for p in extra)}:
        for obj in api.list(path, NS):
            refs = [ref for ref in obj["metadata"].get("ownerReferences") or () if ref.get("kind") == "Registry"]
            if not refs and (name := (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/instance")) in uids:
                refs = [{"uid": uids[name]}]
            for ref in refs:
                owned[(ref["uid"], path)] += 1
    missing = []
    for reg in regs:
        index = int(reg["metadata"]["name"].rsplit("-", 1)[1]) % len(SPECS)
        for path, wanted in {**OWNED, **OWNED_BY_SPEC[index]}.items():
            if (found := owned[(reg["metadata"]["uid"], path)]) < wanted:
                missing.append(f"{reg['metadata']['name']}: {found} of {wanted} {path}")
    return missing


def error_lines(log: str) -> list[str]:
    """The operator's log lines at error level or above (kopf's JSON format names it `severity`: error, fatal),
    and any traceback: each as its message and the exception's last lines."""
    found = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
            severity = str(entry.get("severity", "")).lower()
        except (ValueError, AttributeError):
            entry, severity = {}, ""
        if severity in ("error", "fatal", "critical") or "Traceback" in line:
            if isinstance(entry, dict) and entry.get("message"):
                raised = str(entry.get("exc_info") or "").strip().splitlines()[-3:]
                found.append(" | ".join([str(entry["message"]), *(r.strip() for r in raised)])[:1500])
            else:
                found.append(line[:1500])
    return found


def lease_lines(log: str) -> list[str]:
    """The operator's log lines about its leader Lease (berth.operator.leader's), with their timestamps."""
    found = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = str(entry.get("message", "")) if isinstance(entry, dict) else ""
        if "leader Lease" in message or message.startswith("leading"):
            found.append(f"{entry.get('timestamp', '')} {entry.get('severity', '')} {entry['message']}"[:300])
    return found[-12:]


def reconciles_by_cause(log: str) -> dict[str, int]:
    """The operator's 'reconciled Registry ns/name (cause): writes; ...' lines, by cause and whether it wrote."""
    counts: collections.Counter[str] = collections.Counter()
    for line in log.splitlines():
        try:
            message = json.loads(line).get("message", "")
        except (ValueError, AttributeError):
            continue
        if message.startswith("reconciled Registry ") and "(" in message:
            cause = message.split("(", 1)[1].split(")", 1)[0]
            wrote = "no writes" if "): no writes;" in message else "wrote"
            counts[f"{cause}, {wrote}"] += 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def first_reconciles_done(log: str) -> float | None:
    """Seconds from the operator's first log line to its last first reconcile (cause create or resume)."""
    import datetime

    first = last = None
    for line in log.splitlines():
        try:
            entry = json.loads(line)
            moment = datetime.datetime.fromisoformat(entry["timestamp"]).timestamp()
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        first = moment if first is None else first
        message = entry.get("message", "")
        if message.startswith("reconciled Registry ") and ("(create)" in message or "(resume)" in message):
            last = moment
    return None if first is None or last is None else last - first


# --------------------------------------------------------------------------------------------- requests

def by_verb(entries: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(collections.Counter(e["verb"] for e in entries).items()))


def by_resource(entries: list[dict[str, Any]]) -> dict[str, int]:
    """Requests by verb and resource (subresource after a slash): where the per-Registry cost goes."""
    def name(e: dict[str, Any]) -> str:
        ref = e.get("objectRef") or {}
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        return f"{e['verb']} {ref.get('resource')}{sub}"
    return dict(sorted(collections.Counter(map(name, entries)).items(), key=lambda kv: -kv[1]))


def latencies(entries: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The API server's time per request (received until the response was complete, from the audit log), by verb
    (median and 90th percentile, ms; watches left out), and the requests in flight on average over `seconds`."""
    import datetime

    def moment(value: str) -> float:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()

    by: dict[str, list[float]] = collections.defaultdict(list)
    for e in entries:
        if e["verb"] != "watch" and e.get("stage") == "ResponseComplete":
            by[e["verb"]].append(moment(e["stageTimestamp"]) - moment(e["requestReceivedTimestamp"]))
    every = sorted(t for times in by.values() for t in times)
    figures = {verb: f"{1000 * sorted(t)[len(t) // 2]:.0f}/{1000 * sorted(t)[int(len(t) * 0.9)]:.0f}"
               for verb, t in sorted(by.items())}
    return {"ms_median_p90": figures, "in_flight": sum(every) / seconds if seconds else 0.0}


def refused(entries: list[dict[str, Any]]) -> dict[str, int]:
    """The operator's requests answered 4xx or 5xx, by verb, resource and code (a 404 of a GET is an answer)."""
    found: collections.Counter[str] = collections.Counter()
    for e in entries:
        code = (e.get("responseStatus") or {}).get("code") or 0
        if code >= 400 and not (code == 404 and e["verb"] == "get"):
            found[f"{e['verb']} {(e.get('objectRef') or {}).get('resource')} {code}"] += 1
    return dict(found)


def others_writes(entries: list[dict[str, Any]]) -> dict[str, int]:
    """Writes in NS by everyone but the operator (the controllers, the scheduler), by writer and resource: each
    reaches the operator's watches of Deployments and pods as an event."""
    found: collections.Counter[str] = collections.Counter()
    for e in entries:
        ref = e.get("objectRef") or {}
        user = e["user"]["username"]
        if (e["verb"] in WRITE_VERBS and user != OPERATOR_USER and ref.get("namespace") == NS
                and ref.get("resource") != "events"):
            sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
            found[f"{user.rsplit(':', 1)[-1]} {e['verb']} {ref.get('resource')}{sub}"] += 1
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


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


# ------------------------------------------------------------------------------------------------ a run

def measure(count: int, idle_seconds: float, *, timeout: float, refuse: str | None = None) -> dict[str, Any]:
    load_before = os.getloadavg()
    with running_cluster(crds=COSI_CRDS) as plane, tempfile.TemporaryDirectory(prefix="berth-bench-") as logs:
        api = plane.api
        seed(plane, count)
        if refuse:
            refuse_applies(api, refuse)
        registries = Registries(api, count)
        pids = {**api.pids(), **plane.pids()}
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        mark = api.audit_mark()
        started = time.monotonic()
        operator, _token = start_operator(api, "bench-operator", pathlib.Path(logs), [NS], **DEPLOY_LEASE)
        try:
            pid = operator.process.pid

            def settled() -> bool:
                if registries.first_degraded is not None:
                    name, reason, message = registries.first_degraded
                    raise BenchFailed(f"Registry {name} Degraded {reason}: {message[:300]}")
                if errors := error_lines(operator.log()):
                    raise BenchFailed(f"operator error line: {errors[0]}")
                if operator.process.poll() is not None:
                    raise BenchFailed(f"the operator exited {operator.process.returncode}")
                return registries.converged()

            wait(settled, "every Registry at its generation and not Degraded", timeout, every=0.2)
            converge_s = time.monotonic() - started
            registries.stop.set()
            cpu = {"operator": cpu_seconds(pid),
                   **{name: cpu_seconds(p) - cpu_before[name] for name, p in pids.items()}}
            regs = api.list(REGISTRIES_PATH, NS)
            if not all(map(reconciled, regs)) or len(regs) != count:
                raise BenchFailed("the watch said converged, the list does not agree")
            if missing := missing_objects(api, regs):
                raise BenchFailed(f"{len(missing)} owned objects missing, e.g. {missing[:5]}")
            everyone = api.audit(since=mark)
            converge_requests = [e for e in everyone if e["user"]["username"] == OPERATOR_USER]
            converge_log = operator.log()
            peak = vm_status_mib(pid, "VmHWM")

            # Idle is the operator's with nothing changing: first the controllers finish (at 1000 they create pods
            # for minutes after the operator converged, and each wakes a Registry), then 10 s of echoes settle.
            wait(lambda: controllers_settled(api, count), "the controllers made every pod and Deployment status",
                 timeout, every=2)
            settled_s = time.monotonic() - started  # bench/control_plane_floor.py's second figure
            settled_cpu = {name: cpu_seconds(p) - cpu_before[name] for name, p in pids.items()}
            time.sleep(10)
            idle_mark, idle_log_at = api.audit_mark(), len(operator.log())
            idle_cpu_before, t0 = cpu_seconds(pid), time.monotonic()
            time.sleep(idle_seconds)
            idle_cpu = 100 * (cpu_seconds(pid) - idle_cpu_before) / (time.monotonic() - t0)
            idle_entries = api.audit(OPERATOR_USER, since=idle_mark)
            idle_reconciles = reconciles_by_cause(operator.log()[idle_log_at:])
            idle_rss = vm_status_mib(pid, "VmRSS")

            name = "reg-0003"  # on the existing claim, 2 replicas: 3 change its Deployment
            deployment_path = "apps/v1/deployments"
            before = api.get(deployment_path, NS, name)["metadata"]["generation"]
            edit_started = time.monotonic()
            api.patch(REGISTRIES_PATH, NS, name, {"spec": {"replicas": 3}})
            wait(lambda: api.get(deployment_path, NS, name)["metadata"]["generation"] != before,
                 "the edited Registry's Deployment written", 60, every=0.01)
            edit_s = time.monotonic() - edit_started
            peak = max(peak, vm_status_mib(pid, "VmHWM"))
            if errors := error_lines(operator.log()):
                raise BenchFailed(f"operator error line: {errors[0]}")
            pods = len(api.list("v1/pods", NS))
        except BenchFailed as failure:  # what the operator said of its leader Lease tells a lost Lease's story
            raise BenchFailed(f"{failure}\n  its leader Lease log lines: {lease_lines(operator.log())}") from None
        finally:
            registries.stop.set()
            operator.stop()
    return {"count": count, "converge_s": converge_s, "cpu": cpu, "peak_mib": peak, "pods": pods,
            "settled_s": settled_s, "settled_cpu": settled_cpu,
            "requests": by_verb(converge_requests), "by_resource": by_resource(converge_requests),
            "refused": refused(converge_requests), "latency": latencies(converge_requests, converge_s),
            "others": others_writes(everyone),
            "reconciles": reconciles_by_cause(converge_log), "first_done_s": first_reconciles_done(converge_log),
            "idle_cpu_pct": idle_cpu, "idle_s": idle_seconds, "idle_requests": by_verb(idle_entries),
            "idle_writes": counted_writes(idle_entries), "idle_reconciles": idle_reconciles,
            "idle_rss_mib": idle_rss, "edit_s": edit_s, "load": (load_before, os.getloadavg())}


def met(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def report(result: dict[str, Any]) -> None:
    n = result["count"]
    (before, _, _), (after, _, _) = result["load"]
    print(f"--- N = {n} Registries (load average {before:.1f} before, {after:.1f} after)")
    converge_target = "" if n != 1000 else f" (target < {TARGETS['converge_1000_s']:.0f} s: " \
                                           f"{met(result['converge_s'] < TARGETS['converge_1000_s'])})"
    print(f"converged (every Registry at its generation, none Degraded but for {EXPECTED_DEGRADED}, every owned "
          "object present): "
          f"{result['converge_s']:.1f} s, {1000 * result['converge_s'] / n:.1f} ms per Registry{converge_target}")
    print("CPU while converging: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result["cpu"].items())
          + f"; {result['pods']} pods Pending at the end")
    print(f"controllers quiet (every pod made, every Deployment status caught up): {result['settled_s']:.1f} s after "
          "the operator's start; CPU until then: "
          + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result["settled_cpu"].items()))
    print(f"operator peak RSS: {result['peak_mib']:.0f} MiB (target <= {TARGETS['rss_mib']:.0f}: "
          f"{met(result['peak_mib'] <= TARGETS['rss_mib'])})")
    total = sum(result["requests"].values())
    print(f"API requests until converged: {total} ({total / n:.1f} per Registry) {result['requests']}")
    print(f"  by verb and resource: {result['by_resource']}")
    print(f"  refused: {result['refused'] or 'none'}")
    print(f"  the API server's time per request, median/p90 ms by verb: {result['latency']['ms_median_p90']}; "
          f"{result['latency']['in_flight']:.1f} requests in flight on average")
    print(f"writes by the controllers meanwhile (not Events): {result['others']}")
    reconciles = sum(result["reconciles"].values())
    print(f"reconciles until converged: {reconciles} ({reconciles / n:.2f} per Registry) by cause: "
          f"{result['reconciles']}; the last first reconcile (create) ended {result['first_done_s'] or 0:.1f} s "
          f"after the operator's first log line")
    print(f"idle {result['idle_s']:.0f} s: CPU {result['idle_cpu_pct']:.2f} % of a core (target <= "
          f"{TARGETS['idle_cpu_pct']:.0f} %: {met(result['idle_cpu_pct'] <= TARGETS['idle_cpu_pct'])}), "
          f"RSS {result['idle_rss_mib']:.0f} MiB, requests {result['idle_requests']}, reconciles "
          f"{result['idle_reconciles'] or 'none'}")
    print(f"idle writes (not Events, not the leader Lease): {len(result['idle_writes'])} "
          f"(target 0: {met(not result['idle_writes'])}) {result['idle_writes'][:5]}")
    print(f"one edit (spec.replicas) until its Deployment is written: {result['edit_s']:.2f} s"
          + (f" (target < {TARGETS['edit_s']:.0f} s: {met(result['edit_s'] < TARGETS['edit_s'])})" if n == 1000
             else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, action="append", help="N (repeat for several; default 100)")
    parser.add_argument("--idle", type=float, default=130.0, help="seconds of nothing changing")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to converge before failing")
    parser.add_argument("--probe-memory", metavar="DIR",
                        help="sample what holds the operator's memory into DIR (bench/memory_probe; not for timing)")
    parser.add_argument("--refuse-apply", metavar="RESOURCE",
                        help="the API server refuses every write of this resource (e.g. services): must fail")
    args = parser.parse_args()
    if (reason := skip_reason()) is not None:
        raise SystemExit(reason)
    if args.probe_memory:  # the operator child inherits the environment (bench/memory_probe/sitecustomize.py)
        pathlib.Path(args.probe_memory).mkdir(parents=True, exist_ok=True)
        os.environ["BERTH_BENCH_PROBE_DIR"] = str(pathlib.Path(args.probe_memory).resolve())
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(REPO / "bench" / "memory_probe"), *filter(None, [os.environ.get("PYTHONPATH")])])
    results = []
    for count in args.count or [100]:
        try:
            results.append(measure(count, args.idle, timeout=args.timeout, refuse=args.refuse_apply))
        except BenchFailed as failure:
            print(f"--- N = {count} Registries\nFAILED: {failure}", flush=True)
            raise SystemExit(1) from None
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
