"""kube-controller-manager and kube-scheduler v1.36 beside a real API server (support.clusters.apiserver), as a cluster
runs them: Deployments make ReplicaSets and Pods, the garbage collector deletes what lost its owner, a deleted
namespace is emptied and goes, each namespace gets its `default` ServiceAccount, the scheduler binds pods to
nodes (with no node, pods stay Pending with PodScheduled=False: what a busy cluster sends watches).

    def test_something(kube_control_plane):  # fixtures registered in tests/conftest.py
        namespace = kube_control_plane.namespace()  # a fresh one, its default ServiceAccount made
        kube_control_plane.api.create({...})

No kubelet here (a node of its own is a tier above this one). The binaries are the `*.xz` beside the API server's
(`$BERTH_KUBE_APISERVER_XZ`'s directory, else that of `DEFAULT_XZ`), decompressed once into the same cache and
checked against that directory's SHA256SUMS; what the node's parts are: docs/upstream.md#parts-real-node.
Each component runs as its token user of the API server (support.clusters.apiserver.COMPONENT_USERS); the controller
manager gives each controller its own ServiceAccount credentials and signs their tokens with the API server's
key. Both bind 127.0.0.1 free ports; their logs are in `root` until close().
"""

from __future__ import annotations

import contextlib
import pathlib
import secrets
import shutil
import ssl
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

import pytest

from support.clusters.apiserver import KubeApiServer, apiserver_xz, unpack_cached
from support.clusters.apiserver import skip_reason as apiserver_skip_reason
from support.common.polling import wait_for
from support.common.ports import free_port
from support.common.processes import stop_process

VERSION = "v1.36.1"
CONTROLLER_MANAGER, SCHEDULER = "kube-controller-manager", "kube-scheduler"


def component_xz(name: str) -> pathlib.Path | None:
    xz = apiserver_xz()
    path = xz.parent / f"{name}-{VERSION}.xz" if xz else None
    return path if path is not None and path.is_file() else None


def skip_reason() -> str | None:
    """Why this tier cannot run here, or None."""
    if (reason := apiserver_skip_reason()) is not None:
        return reason
    for name in (CONTROLLER_MANAGER, SCHEDULER):
        if component_xz(name) is None:
            return f"no {name}-{VERSION}.xz beside {apiserver_xz()} (../shared/k8s has them)"
    return None


def _expected_sha256(xz: pathlib.Path, name: str) -> str:
    for line in (xz.parent / "SHA256SUMS").read_text().splitlines():
        digest, _, listed = line.partition("  ")
        if listed.strip() == name:
            return digest
    raise RuntimeError(f"{xz.parent / 'SHA256SUMS'} does not list {name}")


def cached_component(name: str) -> pathlib.Path:
    """The decompressed binary (support.clusters.apiserver.unpack_cached), checked against the SHA256SUMS
    beside it."""
    xz = component_xz(name)
    assert xz is not None, skip_reason()
    return unpack_cached(xz, name, _expected_sha256(xz, name))


class ControlPlane:
    """The controller manager and the scheduler against `api` (started and stopped by the caller)."""

    def __init__(self, api: KubeApiServer, *, controllers: str = "*"):
        self.api = api
        self.controllers = controllers
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="berth-control-plane-"))
        self.ports: dict[str, int] = {}
        self.processes: dict[str, subprocess.Popen] = {}
        self._logs: list[IO[bytes]] = []

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def start(self) -> None:
        api = self.api
        for name in (CONTROLLER_MANAGER, SCHEDULER):
            self.ports[name] = free_port()
        self._spawn(CONTROLLER_MANAGER, [
            f"--controllers={self.controllers}", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={api.service_account_key_file}",
            f"--root-ca-file={api.ca_file}",  # the serving cert pods' ServiceAccount tokens come with
        ])
        self._spawn(SCHEDULER, [])
        for name in self.processes:
            self._wait(lambda name=name: self._healthy(name), f"{name} /healthz", 90)

    def _spawn(self, name: str, args: list[str]) -> None:
        user = f"system:{name}"
        kubeconfig = self.api.kubeconfig_for(self.api.component_tokens[user], name=name)
        certs = self.root / f"{name}-certs"
        certs.mkdir(mode=0o700)
        log = (self.root / f"{name}.log").open("ab")
        self._logs.append(log)
        self.processes[name] = subprocess.Popen(
            # No delegated authentication: only /healthz is read, which is always allowed.
            [str(cached_component(name)), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
             "--bind-address=127.0.0.1", f"--secure-port={self.ports[name]}", f"--cert-dir={certs}", *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def _healthy(self, name: str) -> bool:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # its own self-signed serving cert; /healthz is all that is read
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.ports[name]}/healthz", timeout=2,
                                        context=context) as response:
                return response.status == 200
        except OSError:
            return False

    def _wait(self, predicate: Any, what: str, timeout: float) -> None:
        def ready() -> Any:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{what}: {name} exited {process.returncode}\n{self.logs()}")
            return predicate()

        wait_for(ready, lambda: f"{what}\n{self.logs()}", timeout, 0.1)

    def namespace(self, name: str | None = None, timeout: float = 60) -> str:
        """A new namespace, once the controller manager has made its `default` ServiceAccount (pods name it)."""
        name = name or f"t-{secrets.token_hex(4)}"
        self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self._wait(lambda: self.api.get("v1/serviceaccounts", name, "default") is not None,
                   f"ServiceAccount {name}/default", timeout)
        return name

    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.root.glob("*.log"))

    def close(self) -> None:
        for process, log in zip(self.processes.values(), self._logs, strict=False):
            stop_process(process, log, timeout=15)
        self.processes.clear()
        self._logs.clear()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running_cluster(**api_args: Any) -> Iterator[ControlPlane]:
    """A fresh API server (and etcd) with the controller manager and the scheduler; all stopped on exit."""
    with KubeApiServer(**api_args) as api, ControlPlane(api) as plane:
        yield plane


@pytest.fixture(scope="session")
def kube_control_plane() -> Iterator[ControlPlane]:
    """An API server of its own with the controller manager and the scheduler (one per xdist worker, started by
    the first test that asks): `kube_apiserver` stays a bare API server, on which nothing is collected."""
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    with running_cluster() as plane:
        yield plane


@pytest.fixture
def control_plane_namespace(kube_control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace on kube_control_plane with its default ServiceAccount; deleted afterwards (the namespace
    controller empties it)."""
    name = kube_control_plane.namespace()
    yield name
    kube_control_plane.api.delete("v1/namespaces", None, name)
