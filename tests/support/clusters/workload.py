"""The Deployment controller and the kubelet for one Registry's Deployment, played on this machine.

The test API server runs no controllers: a Deployment the operator writes makes no pods. `RegistryWorkload`
does what the cluster would do with it, close enough for what the operator reads back:
- it runs `spec.replicas` registry pods (support.registries.pod.RegistryPod: the real agent, berth-supervise and
registry,
  each on its own loopback address and the same port, sharing one data directory: a ReadWriteMany claim),
  and a Pod object for each in the API, named as its agent reports itself, with the template's labels;
- a changed pod template rolls the pods as a RollingUpdate with maxSurge 1 and maxUnavailable 0 does: one new
  pod, ready, then one old pod stopped and its Pod deleted;
- scaling down stops the newest pods first;
- it writes the Deployment's status (observedGeneration, replicas, updatedReplicas, readyReplicas), a pod
  being ready while its agent's /readyz answers 200, as the pod's readiness probe does.

    harness = OperatorHarness(kube_api, ["default"]).start()
    with RegistryWorkload(tmp_path, kube_api, port=port) as workload:
        ready_at_generation(kube_api, "reg", gen)
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.clusters.operator_harness import REGISTRIES_PATH
from support.common.polling import wait_for
from support.registries.pod import RegistryPod
from support.registries.secretdir import write_secret_dir

DEPLOYMENTS = "apps/v1/deployments"
PODS = "v1/pods"
CLAIMS = "v1/persistentvolumeclaims"
PERIOD = 0.1  # how often the stand-in looks at the Deployment and the pods' readiness


def create_shared_claim(api: Any, name: str = "data", namespace: str = "default") -> None:
    """A Bound ReadWriteMany claim (what `persistentVolumeClaim` names), so replicas are not capped."""
    api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    api.patch(CLAIMS, namespace, name, {"status": {"phase": "Bound", "accessModes": ["ReadWriteMany"],
                                                   "capacity": {"storage": "1Gi"}}}, subresource="status")


@dataclass
class RunningPod:
    name: str
    pod: RegistryPod
    template: str  # the hash of the pod template it was started from
    started: float


class RegistryWorkload:
    def __init__(self, root: Path, api: Any, *, port: int, name: str = "reg", namespace: str = "default",
                 binary: str | None = None, leave_seconds: float = 0.3,
                 mounts: Mapping[str, Mapping[str, str]] | None = None,
                 kubeconfig: Callable[[str], Path] | None = None, api_secrets: bool = False):
        """`kubeconfig` (on the real API server, support.clusters.apiserver): pod name -> a kubeconfig with that pod's
        token, as the kubelet projects one into each pod. `api_secrets`: give each agent the `--api-secret`
        arguments of the template's agent container (its mounted Secrets, also watched over the API)."""
        self.root, self.api, self.port = Path(root), api, port
        self.kubeconfig, self.api_secrets = kubeconfig, api_secrets
        self.name, self.namespace = name, namespace
        self.binary, self.leave_seconds = binary, leave_seconds
        self.mounts = dict(mounts or {})
        self.pods: dict[str, RunningPod] = {}
        self.gone: dict[str, RegistryPod] = {}  # stopped pods, kept for their logs and restart counts
        self.failure: list[BaseException] = []
        self._created = 0
        self._written_status: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)

    def __enter__(self) -> RegistryWorkload:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        for running in list(self.pods.values()):
            running.pod.stop()

    # ---- what a test reads ------------------------------------------------------------------------------------

    def running(self) -> dict[str, RegistryPod]:
        with self._lock:
            return {name: running.pod for name, running in self.pods.items()}

    def restarts(self) -> dict[str, int]:
        """Registry restarts per pod (its supervisor's starts after the first), gone pods included."""
        with self._lock:
            pods = {**self.gone, **{name: running.pod for name, running in self.pods.items()}}
        return {name: max(0, pod.registry_starts() - 1) for name, pod in pods.items()}

    def check(self) -> None:
        if self.failure:
            raise AssertionError("the workload stand-in failed") from self.failure[0]

    # ---- the controller ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.wait(PERIOD):
                deployment = self.api.get(DEPLOYMENTS, self.namespace, self.name)
                if deployment is not None:
                    self._step(deployment)
        except BaseException as exc:  # handed to the test (check)
            self.failure.append(exc)

    def _step(self, deployment: Mapping[str, Any]) -> None:
        spec = deployment.get("spec") or {}
        wanted = int(spec.get("replicas", 1))
        template = hashlib.sha256(json.dumps(spec.get("template"), sort_keys=True).encode()).hexdigest()[:8]
        ready = {name for name, running in self.pods.items() if running.pod.health("/readyz") == 200}
        current = [r for r in self.pods.values() if r.template == template]
        old = [r for r in self.pods.values() if r.template != template]
        if len(current) < wanted and len(self.pods) < wanted + 1:
            self._start(deployment, template)
        elif old and all(r.name in ready for r in current) and len(current) + len(old) > wanted:
            self._stop_pod(min(old, key=lambda r: r.started))  # the oldest of the old replica set
        elif len(current) > wanted:
            self._stop_pod(max(current, key=lambda r: r.started))  # a scale-down deletes the newest first
        else:
            self._write_status(deployment, template, ready)
            return
        ready = {name for name, running in self.pods.items() if running.pod.health("/readyz") == 200}
        self._write_status(deployment, template, ready)

    def _start(self, deployment: Mapping[str, Any], template: str) -> None:
        index = self._created
        self._created += 1
        name = f"{self.name}-{template[:5]}-{index}"
        # Every pod on its own loopback address, never reused in a run (a stopped pod's address is free, but a
        # fresh one keeps the logs unambiguous).
        host = f"127.0.0.{10 + index}"
        pod = RegistryPod(self.root / name, port=self.port, host=host, data_dir=self.root / "data",
                          **({"binary": self.binary} if self.binary else {}))
        write_secret_dir(pod.mounts / "http-secret", {"secret": "generated-by-the-operator"})
        for directory, data in self.mounts.items():
            write_secret_dir(pod.mounts / directory, dict(data))
        pod_template = (deployment.get("spec") or {}).get("template") or {}
        labels = dict((pod_template.get("metadata") or {}).get("labels") or {})
        self.api.create({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
                         "spec": pod_template.get("spec") or {"containers": []}})
        self.api.patch(PODS, self.namespace, name, {"status": {"phase": "Running"}}, subresource="status")
        pod.start_agent(registry=f"{self.namespace}/{self.name}", kube_host=self.api.url, pod_name=name,
                        kubeconfig=self.kubeconfig(name) if self.kubeconfig else None,
                        extra=["--listen-host", host, "--leave-seconds", str(self.leave_seconds),
                               *(api_secret_args(pod_template) if self.api_secrets else ())])
        pod.start_supervisor()
        with self._lock:
            self.pods[name] = RunningPod(name, pod, template, time.monotonic())
        pod.wait_serving()

    def _stop_pod(self, running: RunningPod) -> None:
        # As the kubelet does: the Pod is terminating while its containers stop, then it is gone.
        self.api.patch(PODS, self.namespace, running.name, {"metadata": {"finalizers": ["test/stopping"]}})
        self.api.delete(PODS, self.namespace, running.name)
        running.pod.stop()
        with self._lock:
            del self.pods[running.name]
            self.gone[running.name] = running.pod
        self.api.patch(PODS, self.namespace, running.name, {"metadata": {"finalizers": None}})

    def _write_status(self, deployment: Mapping[str, Any], template: str, ready: set[str]) -> None:
        status = {
            "observedGeneration": (deployment.get("metadata") or {}).get("generation"),
            "replicas": len(self.pods),
            "updatedReplicas": sum(1 for r in self.pods.values() if r.template == template),
            "readyReplicas": len(ready),
            "availableReplicas": len(ready),
        }
        if status != self._written_status:
            self.api.patch(DEPLOYMENTS, self.namespace, self.name, {"status": status}, subresource="status")
            self._written_status = status


def api_secret_args(pod_template: Mapping[str, Any]) -> list[str]:
    """The `--api-secret DIR=SECRET` arguments the operator gave the template's agent container."""
    [agent] = [c for c in (pod_template.get("spec") or {}).get("initContainers") or () if c["name"] == "agent"]
    args = agent.get("args") or []
    return [word for index, word in enumerate(args)
            if word == "--api-secret" or (index and args[index - 1] == "--api-secret")]


def ready_condition(api: Any, name: str = "reg", namespace: str = "default") -> tuple[int, dict[str, Any] | None]:
    reg = api.get(REGISTRIES_PATH, namespace, name) or {}
    conditions = (reg.get("status") or {}).get("conditions") or ()
    return (reg.get("metadata") or {}).get("generation"), next((c for c in conditions if c["type"] == "Ready"), None)


def ready_at_generation(api: Any, generation: int | None = None, *, name: str = "reg", namespace: str = "default",
                        timeout: float = 60.0, workload: RegistryWorkload | None = None) -> dict[str, Any]:
    """Wait as `kubectl wait --for=condition=Ready` does: the Ready condition True, and its observedGeneration
    the Registry's metadata.generation (and `generation`, when given: the edit just made)."""

    def ready() -> dict[str, Any] | None:
        if workload is not None:
            workload.check()
        current, condition = ready_condition(api, name, namespace)
        if condition is None or condition.get("status") != "True":
            return None
        if condition.get("observedGeneration") != current or (generation is not None and current != generation):
            return None
        return api.get(REGISTRIES_PATH, namespace, name)

    try:
        return wait_for(ready, f"Registry {namespace}/{name} Ready at generation {generation}", timeout=timeout)
    except AssertionError as exc:
        reg = api.get(REGISTRIES_PATH, namespace, name) or {}
        status = reg.get("status") or {}
        raise AssertionError(f"{exc}; generation {(reg.get('metadata') or {}).get('generation')}, conditions "
                             f"{status.get('conditions')}, agents {status.get('agents')}") from None
