"""The operator in process for tests and bench: berth_operator.runner.run (the same code path as
`berth-operator`) in a thread of this process, against the test API server (support.kube)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes.client

from support.kube import KubeApi

AGENT_IMAGE = "ghcr.io/berth-dev/berth:0.1.0"

REGISTRIES_PATH = "berth.dev/v1alpha1/registries"
WRITE_METHODS = ("POST", "PATCH", "PUT", "DELETE")
# Kinds the operator may own, as support.kube paths (for listing what a Registry owns).
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
}


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll until predicate() is truthy; the timeout only turns a hang into a clear failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class OperatorHarness:
    """Start and stop the operator in process; inspect what it did through the test API server."""

    def __init__(self, api: KubeApi, namespaces: list[str] | None = None, *, refresh_interval: float = 3600.0,
                 clock: Any = None):
        self.api = api
        self.clock = clock  # berth_operator.clock.UtcClock; None: the wall clock
        self.namespaces = namespaces
        self.refresh_interval = refresh_interval
        self.holder: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._stop: threading.Event | None = None
        self.failure: list[BaseException] = []

    @property
    def ctx(self) -> Any:
        return self.holder["ctx"]

    def start(self) -> OperatorHarness:
        from berth_operator import runner

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
                    stop_flag=self._stop, ready_flag=ready, context=self.holder, clock=self.clock,
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
        reg = self.registry(namespace, name)
        if reg is None:
            return None
        status = reg.get("status") or {}
        done = status.get("observedGeneration") == reg["metadata"].get("generation") and status.get("conditions")
        return reg if done else None

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
