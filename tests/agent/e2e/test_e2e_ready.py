"""Ready after every kind of edit: the operator, real agents and real registries, waited on as
`kubectl wait --for=condition=Ready` waits (the condition True at the Registry's generation).

The operator runs in process (support.clusters.operator_harness); support.clusters.workload plays the Deployment
controller and
the kubelet with real registry pods on loopback addresses. Each case counts the registry restarts per pod: an
edit the agent does not render (replicas, garbageCollection) restarts nothing, a config edit restarts each pod
once, a pod-template edit (resources) replaces the pods.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from berth_agent.kube.lease import ReloadLease
from berth_api.leases import reload_lease_name
from support.clusters.operator_harness import REGISTRIES_PATH, OperatorHarness
from support.clusters.workload import RegistryWorkload, create_shared_claim, ready_at_generation
from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import filesystem_spec, on_distribution, registry_object
from support.registries.secretdir import swap_secret_dir

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

# A bound for every wait on Ready: a pod start is ~1-3 s, a reload turn 2 x leave + the restart; a loaded
# 2-core run takes several times the idle figures, which are stated beside each case.
READY_TIMEOUT = 90.0
REGISTRY3 = os.environ.get("BERTH_REGISTRY3_BIN")


def _edit(api, patch: dict) -> int:
    """Merge-patch the Registry's spec as `kubectl patch --type merge` does; returns the new generation."""
    return api.patch(REGISTRIES_PATH, "default", "reg", {"spec": patch})["metadata"]["generation"]


def _records(api) -> dict:
    return ((api.get(REGISTRIES_PATH, "default", "reg") or {}).get("status") or {}).get("agents") or {}


@pytest.fixture
def cluster(tmp_path, kube_api):
    """Start the operator and the workload for a Registry made from `spec` (call it with the spec)."""
    started: list = []

    def start(spec: dict, *, replicas: int = 1, leave_seconds: float = 0.3, binary: str | None = None):
        create_shared_claim(kube_api)
        kube_api.create(registry_object({**spec, "replicas": replicas}))
        harness = OperatorHarness(kube_api, ["default"]).start()
        started.append(harness)
        port = int(str(spec["http"]["addr"]).rpartition(":")[2])
        workload = RegistryWorkload(tmp_path / "cluster", kube_api, port=port, leave_seconds=leave_seconds,
                                    binary=binary).__enter__()
        started.append(workload)
        ready_at_generation(kube_api, 1, timeout=READY_TIMEOUT, workload=workload)
        return workload

    yield start
    for part in reversed(started):
        if isinstance(part, RegistryWorkload):
            part.__exit__(None, None, None)
        else:
            part.stop()


def _spec(**overrides) -> dict:
    """A pod's spec: all interfaces, as the operator wants it (each pod's agent puts its own loopback address in
    the render with --listen-host, so each pod's config hash is its own)."""
    port = free_port()
    return filesystem_spec(port, http={"addr": f":{port}", "drainTimeout": "2s"}, **overrides)


def _serves_its_record(pod, record: dict) -> bool:
    return hashlib.sha256((pod.config_dir / "config.yml").read_bytes()).hexdigest() == record.get("configHash")


def test_scaling_2_3_2_ends_ready_with_no_restart(cluster, kube_api):
    """`kubectl scale reg --replicas 3` and back: the new pod starts on the current config, the others report
    the new generation without a restart (idle: Ready about 3 s after each scale)."""
    workload = cluster(_spec(), replicas=2)
    before = set(workload.running())
    gen = _edit(kube_api, {"replicas": 3})
    reg = ready_at_generation(kube_api, gen, timeout=READY_TIMEOUT, workload=workload)
    assert len(workload.running()) == 3
    assert all(rec.get("observedGeneration") == gen for rec in reg["status"]["agents"].values())
    gen = _edit(kube_api, {"replicas": 2})
    ready_at_generation(kube_api, gen, timeout=READY_TIMEOUT, workload=workload)
    wait_for(lambda: len(_records(kube_api)) == 2, "the removed pod's record pruned")
    assert set(workload.running()) == before, "a scale-down removes the pod the scale-up added"
    assert all(count == 0 for count in workload.restarts().values()), workload.restarts()


def test_a_resources_edit_replaces_the_pods_and_ends_ready(cluster, kube_api):
    """`resources` shapes the Deployment only: the pods are replaced (a rolling update), each new one starts on
    the current config, none of them restarts its registry (idle: Ready about 6 s after the edit)."""
    workload = cluster(_spec(), replicas=2)
    before = set(workload.running())
    gen = _edit(kube_api, {"resources": {"limits": {"memory": "512Mi"}}})
    ready_at_generation(kube_api, gen, timeout=READY_TIMEOUT, workload=workload)
    after = set(workload.running())
    assert len(after) == 2 and not after & before, "every pod was replaced"
    assert all(count == 0 for count in workload.restarts().values()), workload.restarts()


def test_garbage_collection_added_changed_and_removed_ends_ready_with_no_restart(cluster, kube_api):
    """`garbageCollection` is the operator's and the runner's, not rendered: each edit is Ready at once."""
    workload = cluster(_spec())
    for patch in ({"garbageCollection": {"schedule": "0 3 * * sun"}},
                  {"garbageCollection": {"schedule": "30 4 * * *", "deleteUntagged": True}},
                  {"garbageCollection": None}):
        gen = _edit(kube_api, patch)
        ready_at_generation(kube_api, gen, timeout=READY_TIMEOUT, workload=workload)
    assert all(count == 0 for count in workload.restarts().values()), workload.restarts()


def test_a_config_edit_restarts_each_pod_once_and_ends_ready(cluster, kube_api):
    workload = cluster(_spec(), replicas=2)
    gen = _edit(kube_api, {"config": {"log": {"level": "debug"}}})
    reg = ready_at_generation(kube_api, gen, timeout=READY_TIMEOUT, workload=workload)
    for name, pod in workload.running().items():
        assert b"level: debug" in (pod.config_dir / "config.yml").read_bytes()
        assert _serves_its_record(pod, reg["status"]["agents"][name])
    assert all(count == 1 for count in workload.restarts().values()), workload.restarts()


def test_a_secret_rotation_restarts_each_pod_once_and_stays_ready_at_the_same_generation(cluster, kube_api):
    """A new http secret on every pod's volume: no generation change, a new config hash in every record."""
    workload = cluster(_spec(), replicas=2)
    gen = kube_api.get(REGISTRIES_PATH, "default", "reg")["metadata"]["generation"]
    old = {name: rec["configHash"] for name, rec in _records(kube_api).items()}
    for pod in workload.running().values():
        swap_secret_dir(pod.mounts / "http-secret", {"secret": "rotated-by-the-test"})
    wait_for(lambda: all(rec.get("configHash") != old[name] for name, rec in _records(kube_api).items()),
             "every pod's record names the rotated config", timeout=READY_TIMEOUT)
    ready_at_generation(kube_api, gen, timeout=READY_TIMEOUT, workload=workload)
    assert all(count == 1 for count in workload.restarts().values()), workload.restarts()


@pytest.mark.parametrize("major", ["2", pytest.param("3", marks=pytest.mark.skipif(
    not REGISTRY3, reason="BERTH_REGISTRY3_BIN names no Distribution 3.x registry binary"))])
def test_an_edit_back_while_a_replica_waits_for_its_turn_ends_ready_at_the_last_generation(cluster, kube_api, major):
    """log.level A -> B -> A while one pod waits for the reload Lease (a rotated Secret on both pods put it in the
    queue behind the other): the waiting pod finds the spec rendering what it then runs, restarts for nothing
    more, and still reports the last generation. Every record reaches it; no pod restarts more often than its
    config changed (the waiter once, for the Secret; the other at most three times: the Secret, B, A)."""
    spec = on_distribution(_spec(), major) if major == "3" else _spec()
    workload = cluster(spec, replicas=2, leave_seconds=1.5, binary=REGISTRY3 if major == "3" else None)
    # On 3.x a sibling's turn lasts a held-socket restart (no pod leaves the Service), too short to edit twice in:
    # the test holds the reload Lease itself, so the wait is a state it releases, not a race it must win.
    holder = (ReloadLease(kube_api.agent_client(), "default", reload_lease_name("reg"), "the-test")
              if major == "3" else None)
    if holder is not None:
        assert holder.try_acquire(60)[0]
    for pod in workload.running().values():
        swap_secret_dir(pod.mounts / "http-secret", {"secret": "rotated-by-the-test"})
    waiter = wait_for(lambda: next((name for name, rec in _records(kube_api).items() if rec.get("waiting")), None),
                      "one pod waiting for its reload turn", timeout=READY_TIMEOUT)
    _edit(kube_api, {"config": {"log": {"level": "debug"}}})
    gen = _edit(kube_api, {"config": {"log": {"level": "info"}}})
    assert _records(kube_api)[waiter].get("waiting"), "both edits landed while the pod waited"
    if holder is not None:
        holder.release()
    reg = ready_at_generation(kube_api, gen, timeout=READY_TIMEOUT, workload=workload)
    assert {rec["observedGeneration"] for rec in reg["status"]["agents"].values()} == {gen}
    for name, pod in workload.running().items():
        assert b"level: info" in (pod.config_dir / "config.yml").read_bytes()
        assert _serves_its_record(pod, reg["status"]["agents"][name])
    restarts = workload.restarts()
    assert restarts[waiter] == 1 and all(count <= 3 for count in restarts.values()), restarts


def test_a_lost_status_write_is_made_again_and_the_record_reaches_the_generation(tmp_path, kube_api):
    """The API refuses the agent's one status patch for a new generation (an edit it does not render): the
    record still reaches that generation, on the agent's retry, with no restart."""
    from support.registries.pod import RegistryPod

    spec = _spec()
    pod = RegistryPod(tmp_path / "pod", port=int(spec["http"]["addr"].rpartition(":")[2]))
    kube_api.create(registry_object(spec))
    try:
        pod.start_agent(registry="default/reg", kube_host=kube_api.url, pod_name="pod-0")
        pod.start_supervisor()
        pod.wait_serving()
        wait_for(lambda: _records(kube_api).get("pod-0", {}).get("observedGeneration") == 1, "the first record")
        kube_api.fail_next(1, status=500, verb="patch", plural="registries")
        gen = _edit(kube_api, {"resources": {"requests": {"cpu": "100m"}}})
        wait_for(lambda: _records(kube_api).get("pod-0", {}).get("observedGeneration") == gen,
                 "the record at the new generation after the refused write", timeout=30)
        assert any(line.get("msg") == "cannot report to the API" for line in pod.agent_lines())
        assert pod.registry_starts() == 1
    finally:
        pod.stop()
