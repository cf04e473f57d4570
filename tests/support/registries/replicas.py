"""Two (or more) registry pods of one Registry on this machine, taking turns through its reload Lease.

Each pod (support.registries.pod.RegistryPod: agent subprocess + berth-supervise + registry) listens on its own loopback
address (127.0.0.2, 127.0.0.3, ...: no setup needed) on the same port, as pods on their own IPs do; they share
the data directory (a ReadWriteMany claim) and the http secret (the operator's generated Secret) and watch
one Registry (replicas: N) on the test API server. The reload and GC Leases come from the operator's own
builder (`create_registry`, also for a single pod that takes part in garbage collection).

    with running_replicas(root, kube_api, spec) as pods:     # {"pod-a": RegistryPod, "pod-b": ...}
        balancer = Balancer(backends(pods)).start()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from berth_api import Registry
from berth_operator.builders import lease as lease_builder
from support.registries.pod import RegistryPod, registry_object
from support.registries.secretdir import write_secret_dir
from support.traffic.balancer import Backend

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


def create_registry(kube_api: Any, spec: dict[str, Any], *, count: int = 1, name: str = "reg",
                    namespace: str = "default") -> dict[str, Any]:
    """Create the Registry (replicas: count) and what the operator creates for its agents to take: the reload
    Lease and the GC Lease (builders.lease). Returns the Registry as created."""
    created = kube_api.create(registry_object({**spec, "replicas": count}, name=name, namespace=namespace))
    reg = Registry.model_validate(created)
    for build in (lease_builder.build, lease_builder.build_gc):
        kube_api.create(build(reg, None))
    return created


@contextlib.contextmanager
def running_replicas(root: Path, kube_api: Any, spec: dict[str, Any], *, count: int = 2,
                     leave_seconds: float = 0.3, extra: list[str] = (), binary: str | None = None,
                     mounts: Mapping[str, Mapping[str, str]] = {}) -> Iterator[dict[str, RegistryPod]]:
    """`count` pods "pod-a", "pod-b", ... on 127.0.0.2, 127.0.0.3, ...; `binary`: the pods' registry binary
    (default the real one; each pod's berth-supervise holds its socket for a 3.x binary), `mounts`: more Secret
    volumes each pod gets (e.g. a COSI `cosi/` dir)."""
    port = int(str(spec["http"]["addr"]).rpartition(":")[2])
    create_registry(kube_api, spec, count=count)
    pods: dict[str, RegistryPod] = {}
    for index in range(count):
        pod = RegistryPod(Path(root) / f"pod-{index}", port=port, host=HOSTS[index], data_dir=Path(root) / "data",
                          **({"binary": binary} if binary else {}))
        write_secret_dir(pod.mounts / "http-secret", {"secret": "generated-by-the-operator"})
        for directory, data in mounts.items():
            write_secret_dir(pod.mounts / directory, dict(data))
        pods[f"pod-{'abc'[index]}"] = pod
    try:
        for name, pod in pods.items():
            pod.start_agent(registry="default/reg", kube_host=kube_api.url, pod_name=name,
                            extra=["--listen-host", pod.listen_host, "--leave-seconds", str(leave_seconds), *extra])
            pod.start_supervisor()
        for pod in pods.values():
            pod.wait_serving()
        yield pods
    finally:
        for pod in pods.values():
            pod.stop()


def backends(pods: dict[str, RegistryPod]) -> list[Backend]:
    """Balancer backends: each pod's registry, ready while its agent's /readyz answers 200."""
    return [Backend(name, pod.listen_host, pod.port, f"http://127.0.0.1:{pod.health_port}/readyz")
            for name, pod in pods.items()]
