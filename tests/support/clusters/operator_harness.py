"""The operator for tests and bench, against the test API server (support.clusters.kube): in process
(OperatorHarness: berth_operator.reactor.runner.run, the same code path as `berth-operator`, in a thread), or as a
`berth-operator` process (OperatorProcess: leader election, kill -9)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

import kubernetes.client

from support.clusters.kube import KubeApi
from support.common.polling import wait_for
from support.common.ports import free_port
from support.common.processes import stop_process

AGENT_IMAGE = "ghcr.io/berth-dev/berth:0.1.0"

REGISTRIES_PATH = "berth.dev/v1alpha1/registries"
WRITE_METHODS = ("POST", "PATCH", "PUT", "DELETE")
# Kinds the operator may own, as support.clusters.kube paths (for listing what a Registry owns).
OWNED_PATHS = {
    "ServiceAccount": "v1/serviceaccounts",
    "Role": "rbac.authorization.k8s.io/v1/roles",
    "RoleBinding": "rbac.authorization.k8s.io/v1/rolebindings",
    "Secret": "v1/secrets",
    "Service": "v1/services",
    "PersistentVolumeClaim": "v1/persistentvolumeclaims",
    "BucketClaim": "objectstorage.k8s.io/v1alpha1/bucketclaims",
    "BucketAccess": "objectstorage.k8s.io/v1alpha1/bucketaccesses",
    "Deployment": "apps/v1/deployments",
    "PodDisruptionBudget": "policy/v1/poddisruptionbudgets",
    "Lease": "coordination.k8s.io/v1/leases",
}


def reconciled(api: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The Registry once its status reports the current generation, else None (on either test API server)."""
    reg = api.get(REGISTRIES_PATH, namespace, name)
    if reg is None:
        return None
    status = reg.get("status") or {}
    done = status.get("observedGeneration") == reg["metadata"].get("generation") and status.get("conditions")
    return reg if done else None


class OperatorHarness:
    """Start and stop the operator in process; inspect what it did through the test API server."""

    def __init__(self, api: KubeApi, namespaces: list[str] | None = None, *, refresh_interval: float = 3600.0,
                 leader: Any = None, clock: Any = None):
        self.api = api
        self.clock = clock  # berth_operator.core.clock.UtcClock; None: the wall clock
        self.namespaces = namespaces
        self.refresh_interval = refresh_interval
        self.leader = leader  # berth_operator.reactor.leader.LeaseSettings: stand by until holding the Lease
        self.holder: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._stop: threading.Event | None = None
        self.failure: list[BaseException] = []

    @property
    def ctx(self) -> Any:
        return self.holder["ctx"]

    def start(self) -> OperatorHarness:
        from berth_operator.reactor import runner

        # kopf watches the namespaces it is given only once they exist as objects (it observes Namespaces).
        existing = {ns["metadata"]["name"] for ns in self.api.list("v1/namespaces")}
        for namespace in set(self.namespaces or ()) - existing:
            self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

        configuration = kubernetes.client.Configuration()
        configuration.host = self.api.url
        self._stop, ready = threading.Event(), threading.Event()
        self.holder = {}

        def run() -> None:
            try:
                asyncio.run(runner.run(
                    configuration, agent_image=AGENT_IMAGE, namespaces=self.namespaces or (),
                    clusterwide=not self.namespaces, refresh_interval=self.refresh_interval,
                    stop_flag=self._stop, ready_flag=ready, context=self.holder, leader=self.leader, clock=self.clock,
                ))
            except BaseException as exc:  # handed to the test
                self.failure.append(exc)
                ready.set()

        self._thread = threading.Thread(target=run, name="berth-operator", daemon=True)
        self._thread.start()
        if not ready.wait(30) or self.failure:
            raise RuntimeError("the operator did not start") from (self.failure[0] if self.failure else None)
        return self

    def stop(self) -> None:
        if self._thread is not None and self._stop is not None:
            self._stop.set()
            self._thread.join(30)
            assert not self._thread.is_alive(), "the operator did not stop"
            self._thread = None
        if self.failure:
            raise self.failure[0]

    # ---- inspection

    def registry(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api.get(REGISTRIES_PATH, namespace, name)

    def reconciled(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Registry once its status reports the current generation, else None."""
        return reconciled(self.api, namespace, name)

    def wait_reconciled(self, namespace: str, name: str) -> dict[str, Any]:
        return wait_for(lambda: self.reconciled(namespace, name), f"Registry {namespace}/{name} reconciled")

    def condition(self, namespace: str, name: str, ctype: str) -> dict[str, Any] | None:
        reg = self.registry(namespace, name) or {}
        return next((c for c in (reg.get("status") or {}).get("conditions") or () if c["type"] == ctype), None)

    def owned(self, namespace: str, uid: str) -> dict[tuple[str, str], dict[str, Any]]:
        """(kind, name) -> object, for every object whose ownerReferences name uid."""
        found = {}
        for kind, path in OWNED_PATHS.items():
            for obj in self.api.list(path, namespace):
                if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ()):
                    found[(kind, obj["metadata"]["name"])] = obj
        return found

    def events(self, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.api.list("v1/events", namespace)
                if name is None or (e.get("involvedObject") or {}).get("name") == name]

    def writes_after(self, mark: int) -> list[tuple[str, str]]:
        """Write requests (not Events) served after request number mark."""
        return [(method, path) for method, path in self.api.requests()[mark:]
                if method in WRITE_METHODS and "/events" not in path]


# ---- the operator as a process (`berth-operator`), for what needs a real process: kill -9, two at once

LEASES_PATH = "coordination.k8s.io/v1/leases"
# Short enough for a test, long enough that a starved process on a busy machine still renews in time.
TEST_LEASE = {"namespace": "berth-system", "name": "berth-operator",
              "duration": 6.0, "renew_deadline": 4.0, "retry_period": 1.0}


class OperatorProcess:
    """`berth-operator` started as deploy/ runs it (leader election on), as pod `name`.

    Its kubeconfig's bearer token is `name`, so support.clusters.kube's requests_by_token() tells its requests
    from another instance's.
    """

    def __init__(self, api: KubeApi, name: str, log_dir: Any, namespaces: list[str] | None = None,
                 lease: dict[str, Any] | None = None, kubeconfig: Any = None):
        self.api, self.name, self.namespaces = api, name, namespaces
        # On the real API server (support.clusters.apiserver): a kubeconfig with a real token of the operator's account.
        self.kubeconfig = kubeconfig
        self.lease = {**TEST_LEASE, **(lease or {})}
        self.log_path = log_dir / f"{name}.log"
        self.liveness_port = 0
        self.process: Any = None
        self._log: Any = None

    def start(self) -> OperatorProcess:
        self.liveness_port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "WATCH_NAMESPACE")}
        env.update(KUBECONFIG=str(self.kubeconfig or self.api.kubeconfig_for(self.name)), POD_NAME=self.name,
                   POD_NAMESPACE=self.lease["namespace"], BERTH_AGENT_IMAGE=AGENT_IMAGE)
        scope = [arg for ns in self.namespaces for arg in ("--namespace", ns)] if self.namespaces else ["-A"]
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "berth_operator", *scope, "--metrics-port", "0", "--log-format", "json",
             "--liveness", f"http://127.0.0.1:{self.liveness_port}/healthz",
             "--leader-election-namespace", self.lease["namespace"], "--leader-election-id", self.lease["name"],
             "--lease-duration", str(self.lease["duration"]), "--renew-deadline", str(self.lease["renew_deadline"]),
             "--retry-period", str(self.lease["retry_period"])],
            stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )
        return self

    def kill(self) -> None:
        """kill -9: no release of the Lease, no goodbye."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> int:
        if self.process is None:
            return 0
        return stop_process(self.process, self._log, timeout=30)

    def health(self) -> tuple[int, str] | None:
        """(status, body) of the liveness URL, or None when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=5) as response:
                return response.status, response.read().decode()
        except (urllib.error.URLError, OSError):
            return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def writes(self, mark: int = 0) -> list[tuple[str, str]]:
        """Its writes (not Events, not the Lease) after request number mark."""
        return [(method, path) for token, method, path in self.api.requests_by_token()[mark:]
                if token == self.name and method in WRITE_METHODS and "/events" not in path
                and "/leases" not in path]

    def lease_holder(self) -> str | None:
        lease = self.api.get(LEASES_PATH, self.lease["namespace"], self.lease["name"]) or {}
        return (lease.get("spec") or {}).get("holderIdentity")
