"""One leader (issue 7, part 2): two `berth-operator` processes against the test API server, as deploy/
runs two replicas. Only the holder of the Lease writes; kill -9 it, and the standby takes the Lease once it
has expired, then does what was missed meanwhile, and nothing twice.

Each process's kubeconfig carries its own bearer token, so every request is attributed to its sender.
How fast the standby takes over is a figure of bench/operator_failover.py (no timed assertions here);
this test checks the order of events, from the Lease's own timestamps.
"""

from __future__ import annotations

import collections
import datetime
import json

from support.operator_harness import LEASES_PATH, REGISTRIES_PATH, TEST_LEASE, OperatorProcess, wait_for

NS = "ha"


def registry(name: str) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
            "spec": {"config": {"storage": {"inmemory": {}}}}}


def reconciled(kube_api, name: str) -> bool:
    reg = kube_api.get(REGISTRIES_PATH, NS, name) or {}
    status = reg.get("status") or {}
    return bool(status.get("conditions")) and status.get("observedGeneration") == reg["metadata"]["generation"]


def lease(kube_api) -> dict:
    return kube_api.get(LEASES_PATH, TEST_LEASE["namespace"], TEST_LEASE["name"]) or {}


def micro_time(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ")


def test_one_leader_writes_and_the_standby_takes_over_after_kill_9(kube_api, tmp_path):
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for name in ("r1", "r2"):
        kube_api.create(registry(name))
    first = OperatorProcess(kube_api, "operator-a", tmp_path).start()
    second = OperatorProcess(kube_api, "operator-b", tmp_path).start()
    processes = {p.name: p for p in (first, second)}
    try:
        holder = wait_for(lambda: lease(kube_api).get("spec", {}).get("holderIdentity"), "a leader", timeout=60)
        leader = processes[holder]
        standby = next(p for p in processes.values() if p is not leader)
        wait_for(lambda: reconciled(kube_api, "r1") and reconciled(kube_api, "r2"), "r1 and r2 reconciled", 60)
        kube_api.create(registry("r3"))
        wait_for(lambda: reconciled(kube_api, "r3"), "r3 reconciled", 60)

        # Both are alive and healthy (both pods Ready, so the budget counts both); only the leader writes.
        wait_for(standby.health, "the standby's health endpoint")
        assert standby.health() == (200, json.dumps({"leader": False}))
        assert leader.health() is not None and leader.health()[0] == 200
        assert standby.process.poll() is None and leader.process.poll() is None
        assert leader.writes(), "the leader wrote nothing"
        assert standby.writes() == [], "the standby wrote"
        standby_events = [(m, path) for token, m, path in kube_api.requests_by_token()
                          if token == standby.name and m != "GET" and "/events" in path]
        assert standby_events == [], "the standby posted Events"

        # kill -9 the leader. While nobody leads, a Registry is created and another edited.
        leader.kill()
        last_renewal = lease(kube_api)["spec"]
        mark = len(kube_api.requests())
        kube_api.create(registry("r4"))
        kube_api.patch(REGISTRIES_PATH, NS, "r1", {"spec": {"config": {"log": {"level": "debug"}}}})

        wait_for(lambda: lease(kube_api).get("spec", {}).get("holderIdentity") == standby.name,
                 "the standby to take the Lease", timeout=60)
        wait_for(lambda: reconciled(kube_api, "r4") and reconciled(kube_api, "r1"), "r4 and r1 reconciled", 60)
        taken = lease(kube_api)["spec"]
        # It waited out the dead leader's Lease: taken no earlier than lease duration after the last renewal.
        waited = (micro_time(taken["acquireTime"]) - micro_time(last_renewal["renewTime"])).total_seconds()
        assert waited >= TEST_LEASE["duration"] - 0.001, waited
        assert taken["leaseTransitions"] == last_renewal["leaseTransitions"] + 1

        # Nothing missed: r4 got its objects, r1's edit reached its status. Nothing twice: the Registries
        # that did not change (r2, r3) saw no write from the new leader, and every object was created once.
        assert kube_api.get("apps/v1/deployments", NS, "r4") is not None
        new_writes = standby.writes(mark)
        assert new_writes, "the new leader wrote nothing"
        assert not [w for w in new_writes if "/r2" in w[1] or "/r3" in w[1]], new_writes
        def created() -> collections.Counter:
            return collections.Counter((e["involvedObject"]["name"], e["message"])
                                       for e in kube_api.list("v1/events", NS) if e["reason"] == "Created")

        # kopf posts Events from a queue of its own, after the objects and the status: wait for r4's to arrive.
        wait_for(lambda: "r4" in {name for name, _ in created()}, "r4's Created events", 30)
        creates = created()
        assert creates and max(creates.values()) == 1, creates
        assert {name for name, _ in creates} == {"r1", "r2", "r3", "r4"}
        assert standby.process.poll() is None
    finally:
        codes = {p.name: p.stop() for p in processes.values()}
    logs = {name: p.log() for name, p in processes.items()}
    assert codes[standby.name] == 0, logs[standby.name][-3000:]
    assert "Traceback" not in logs[standby.name]


def test_a_stopped_leader_hands_over_at_once(kube_api, tmp_path):
    """SIGTERM (a rollout, a drain): the leader releases the Lease; the standby takes it at its next read."""
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    kube_api.create(registry("r1"))
    # A Lease so long that only a release can explain a takeover before the test's patience runs out.
    long_lease = {"duration": 3600.0, "renew_deadline": 30.0, "retry_period": 0.5}
    first = OperatorProcess(kube_api, "operator-a", tmp_path, lease=long_lease).start()
    wait_for(lambda: first.lease_holder() == "operator-a", "operator-a to lead", timeout=60)
    second = OperatorProcess(kube_api, "operator-b", tmp_path, lease=long_lease).start()
    try:
        wait_for(lambda: reconciled(kube_api, "r1"), "r1 reconciled", 60)
        wait_for(second.health, "the standby's health endpoint")
        assert first.stop() == 0
        wait_for(lambda: second.lease_holder() == "operator-b", "operator-b to take the released Lease", 60)
        kube_api.patch(REGISTRIES_PATH, NS, "r1", {"spec": {"config": {"log": {"level": "debug"}}}})
        wait_for(lambda: reconciled(kube_api, "r1"), "r1 reconciled by the new leader", 60)
    finally:
        first.stop()
        assert second.stop() == 0, second.log()[-3000:]
