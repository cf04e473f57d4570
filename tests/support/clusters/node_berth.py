"""Berth on the test node (support.clusters.node): installed as install.md says, `kubectl apply -k crds` then
`kubectl apply -k deploy` with the image set (and uninstalled with `kubectl delete -k` of the same overlay);
Registries made and watched, their pods' processes seen from the host.

The install happens once per run in effect: `kubectl apply` of the same objects is idempotent, so each xdist
worker that needs it applies and waits; the first does the work.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import yaml

from support.clusters.apiserver import ApiError
from support.clusters.node import Node
from support.common import polling
from support.registries.registry import http_get

REPO = pathlib.Path(__file__).resolve().parents[3]
REGISTRIES = "berth.dev/v1alpha1/registries"
OPERATOR_NAMESPACE = "berth-system"
OPERATOR_LEASE = "berth-operator"  # deploy/base/deployment.yaml's comment; berth_operator.leader holds it
OPERATOR_SELECTOR = "app.kubernetes.io/name=berth-operator"
DEPLOY_IMAGE = "ghcr.io/berth-dev/berth"  # the name deploy/base/kustomization.yaml sets


def wait_for(predicate: Callable[[], Any], what: str, timeout: float, node: Node | None = None,
             interval: float = 0.5) -> Any:
    """support.common.polling.wait_for at the node tier's pace, with the node's last logs in the failure."""
    return polling.wait_for(predicate, what if node is None else lambda: f"{what}\n{node.logs()[-6000:]}", timeout,
                            interval)


def berth_overlay(node: Node) -> pathlib.Path:
    """An overlay of deploy/ that only sets the image (the same objects every time)."""
    name, _, tag = node.images["berth"].rpartition(":")
    overlay = pathlib.Path(node.state.root) / "berth-overlay"
    overlay.mkdir(exist_ok=True)
    written = overlay / f".kustomization.{os.getpid()}"
    written.write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(REPO / "deploy", overlay)],  # kustomize refuses an absolute base
        "images": [{"name": DEPLOY_IMAGE, "newName": name, "newTag": tag}],
    }))
    written.replace(overlay / "kustomization.yaml")  # whole: another worker's kubectl may be reading it
    return overlay


def install_berth(node: Node) -> str:
    """The install as docs/guide/install.md gives it: the CRD (`kubectl apply -k crds`), then the operator
    (`kubectl apply -k` of berth_overlay); returns the image it set."""
    node.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "crds"))
    node.kubectl("wait", "--for=condition=Established", "crd/registries.berth.dev", "--timeout=60s")
    node.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(berth_overlay(node)))
    wait_for(lambda: deployment_available(node, OPERATOR_NAMESPACE, "berth-operator", 2),
             "the operator's 2 pods Ready", 180, node)
    return node.images["berth"]


def uninstall_berth(node: Node, command: str = "kubectl delete -k deploy") -> float:
    """The uninstall install.md gives (`command`, deploy/ made this overlay), waited out until the operator's
    namespace is gone; returns its seconds."""
    began = time.monotonic()
    args = command.split()
    assert args[:3] == ["kubectl", "delete", "-k"] and args[3].rstrip("/") == "deploy", command
    node.kubectl(*args[1:3], str(berth_overlay(node)), *args[4:], "--wait=true", timeout=300)
    wait_for(lambda: node.api.get("v1/namespaces", None, OPERATOR_NAMESPACE) is None,
             f"the namespace {OPERATOR_NAMESPACE} gone", 240, node)
    return time.monotonic() - began


def deployment_available(node: Node, namespace: str, name: str, replicas: int) -> bool:
    deployment = node.api.get("apps/v1/deployments", namespace, name) or {}
    status = deployment.get("status") or {}
    return (status.get("readyReplicas") == replicas and status.get("updatedReplicas") == replicas
            and status.get("replicas") == replicas)


def operator_pods(node: Node) -> list[dict[str, Any]] | None:
    """The operator's 2 pods once both are Ready and none is stopping (tests/node/test_leader_handover.py deletes
    the leader while other cases run: they wait for the Deployment's steady state), else None."""
    found = [pod for pod in pods(node, OPERATOR_NAMESPACE, OPERATOR_SELECTOR)
             if not pod["metadata"].get("deletionTimestamp")]
    return found if len(found) == 2 and all(ready(pod) for pod in found) else None


def lease_holder(node: Node) -> str | None:
    lease = node.api.get("coordination.k8s.io/v1/leases", OPERATOR_NAMESPACE, OPERATOR_LEASE) or {}
    return (lease.get("spec") or {}).get("holderIdentity") or None


def pods(node: Node, namespace: str, selector: str) -> list[dict[str, Any]]:
    return node.api.request("GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": selector})["items"]


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def registry_pods(node: Node, namespace: str, name: str) -> list[dict[str, Any]]:
    found = pods(node, namespace, f"app.kubernetes.io/instance={name},app.kubernetes.io/name=registry")
    return [pod for pod in found if not pod["metadata"].get("deletionTimestamp")]


def registry(node: Node, namespace: str, name: str) -> dict[str, Any]:
    return node.api.get(REGISTRIES, namespace, name) or {}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def registry_ready(node: Node, namespace: str, name: str, replicas: int = 1) -> bool:
    obj = registry(node, namespace, name)
    current = [pod for pod in registry_pods(node, namespace, name) if ready(pod)]
    return (condition(obj, "Ready").get("status") == "True"
            and condition(obj, "Ready").get("observedGeneration") == obj["metadata"]["generation"]
            and len(current) == replicas)


def create_registry(node: Node, namespace: str, name: str, spec: dict[str, Any], replicas: int = 1) -> dict:
    node.api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                     "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    wait_for(lambda: registry_ready(node, namespace, name, replicas), f"Registry {namespace}/{name} Ready", 180, node)
    # kube-proxy programs a new Service's rules on its next sync, after the pods are Ready: until then the
    # ClusterIP refuses or is unreachable. The tests measure what comes after, so wait for any HTTP answer.
    url = service_url(node, namespace, name)
    wait_for(lambda: _answers(f"{url}/v2/"), f"the Service {namespace}/{name} answering", 60, node, interval=0.2)
    return registry(node, namespace, name)


def _answers(url: str) -> bool:
    try:
        http_get(url, timeout=2)
        return True
    except OSError:  # URLError is one: refused, unreachable, timed out
        return False


def applied_generation(node: Node, namespace: str, name: str) -> dict[str, int | None]:
    """Pod name -> the generation its agent reports applied (status.agents)."""
    agents = (registry(node, namespace, name).get("status") or {}).get("agents") or {}
    return {pod: record.get("observedGeneration") for pod, record in agents.items()}


def service_url(node: Node, namespace: str, name: str) -> str:
    """The Registry's Service through its ClusterIP, from the host (kube-proxy's rules, as a node reaches it)."""
    service = node.api.get("v1/services", namespace, name)
    assert service is not None, f"no Service {namespace}/{name}"
    return f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"


def filesystem_claim(node: Node, namespace: str, name: str, access_mode: str = "ReadWriteMany") -> pathlib.Path:
    """A claim (ReadWriteMany unless told) bound to a hostPath volume of its own (no provisioner on a bare node):
    the registry's data as every replica on this node sees it, readable from the host."""
    path = pathlib.Path(tempfile.mkdtemp(prefix=f"berth-pv-{namespace}-", dir=node.state.root))
    os.chown(path, 65532, 65532)  # hostPath gets no fsGroup: the registry (65532) owns its data
    volume = f"{namespace}-{name}"
    node.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
                     "spec": {"capacity": {"storage": "1Gi"}, "accessModes": [access_mode],
                              "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                              "hostPath": {"path": str(path), "type": "Directory"},
                              "claimRef": {"namespace": namespace, "name": name}}})
    node.api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": name, "namespace": namespace},
                     "spec": {"accessModes": [access_mode], "storageClassName": "", "volumeName": volume,
                              "resources": {"requests": {"storage": "1Gi"}}}})
    wait_for(lambda: ((node.api.get("v1/persistentvolumeclaims", namespace, name) or {}).get("status") or {})
             .get("phase") == "Bound", f"claim {namespace}/{name} Bound", 60, node)
    return path


# ------------------------------------------------------------------------- processes, from the host

def container_pid(node: Node, pod: dict[str, Any], container: str) -> int:
    """The host PID of a container's first process (its containerd task)."""
    statuses = [*(pod["status"].get("initContainerStatuses") or ()), *(pod["status"].get("containerStatuses") or ())]
    container_id = next(s["containerID"] for s in statuses if s["name"] == container).removeprefix("containerd://")
    out = subprocess.run(["ctr", "--address", node.state.containerd_socket, "-n", "k8s.io", "tasks", "ls"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"no containerd task for {container} of {pod['metadata']['name']}")


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(proc.name))
    return children


def registry_pids(node: Node, pod: dict[str, Any]) -> list[int]:
    """Host PIDs of the registry processes (`registry serve`) in the pod's registry container, serving or
    draining: the descendants of its first process whose program is /bin/registry."""
    children, found, pending = _children(), [], [container_pid(node, pod, "registry")]
    while pending:
        pid = pending.pop()
        pending += children.get(pid, [])
        try:
            argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and pathlib.Path(argv[0].decode()).name == "registry" and b"serve" in argv:
            found.append(pid)
    return sorted(found)


def restart_counts(pod: dict[str, Any]) -> dict[str, int]:
    statuses = [*(pod["status"].get("initContainerStatuses") or ()), *(pod["status"].get("containerStatuses") or ())]
    return {s["name"]: s["restartCount"] for s in statuses}


def json_patch_spec(node: Node, namespace: str, name: str, patch: dict[str, Any]) -> int:
    """A merge patch of the Registry; returns its new generation."""
    return node.api.patch(REGISTRIES, namespace, name, patch)["metadata"]["generation"]


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[-4000:]


def get_status(url: str, *, auth: tuple[str, str] | None = None, method: str = "GET") -> int:
    """The status of one request, retrying a refused connection for up to 10 s (one replica's listener changing
    hands across a reload, as every one-replica test retries); any HTTP answer counts."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return http_get(url, auth=auth, method=method).status
        except urllib.error.URLError as error:
            if not isinstance(error.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# ------------------------------------------------------------------- the registry's own metrics

def get_text(url: str) -> tuple[int, str]:
    """GET, retrying a refused connection for up to 10 s (one replica's listener changing hands, as every
    one-replica test retries); any answer counts."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.URLError as error:
            if not isinstance(error.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def base_gets(metrics: str) -> float:
    """registry_http_requests_total of the /v2/ base handler, summed over its labels."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("registry_http_requests_total{") and 'handler="base"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


_shared_turns = 0  # this process's shared turns held now (a module fixture's, then its tests')


@contextlib.contextmanager
def node_turn_lock(node: Node, *, exclusive: bool) -> Iterator[None]:
    """The node's turn: shared by every test and by each worker's install of Berth, held alone by a test marked
    node_exclusive, once the others that run have finished.

    Writer first: an exclusive test closes a turnstile while it waits, so no new shared turn starts meanwhile (with
    flock alone the upgrade waited 6 min of a CI run behind the other workers' stream of shared tests). A process that
    holds a shared turn already (pod_fit's mirror, for its module) takes another without the turnstile: waiting there
    would be waiting on itself."""
    global _shared_turns
    root = pathlib.Path(node.state.root)
    with open(root / "node-turn.lock", "a") as lock:
        if exclusive or _shared_turns == 0:
            with open(root / "node-turnstile.lock", "a") as turnstile:
                fcntl.flock(turnstile, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        else:
            fcntl.flock(lock, fcntl.LOCK_SH)
        _shared_turns += 0 if exclusive else 1
        try:
            yield
        finally:
            _shared_turns -= 0 if exclusive else 1
            fcntl.flock(lock, fcntl.LOCK_UN)


def create_once(node: Node, obj: dict[str, Any]) -> None:
    try:
        node.api.create(obj)
    except ApiError as error:
        if error.status != 409:  # made already (by an earlier test, or an earlier run on this node)
            raise


def storage_class_volume(node: Node, namespace: str, claim: str, storage_class: str, size: str) -> None:
    """The StorageClass (no provisioner, as local volumes have) and a hostPath volume of `size`, bound ahead to the
    claim Berth makes, as a provisioner would make one."""
    create_once(node, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": storage_class},
                       "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"})
    path = pathlib.Path(tempfile.mkdtemp(prefix=f"berth-pv-{namespace}-", dir=node.state.root))
    os.chown(path, 65532, 65532)  # hostPath gets no fsGroup: the registry (65532) owns its data
    node.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-{claim}"},
                     "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                              "persistentVolumeReclaimPolicy": "Retain", "storageClassName": storage_class,
                              "hostPath": {"path": str(path), "type": "Directory"},
                              "claimRef": {"namespace": namespace, "name": claim}}})
