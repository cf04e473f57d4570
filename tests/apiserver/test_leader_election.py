"""One leader: two `berth-operator` processes against the real API server, as deploy/ runs two
replicas: the same ServiceAccount with deploy/'s RBAC, each with its own token (two pods' projected tokens).
Only the holder of the Lease writes; kill -9 it, and the standby takes the Lease once it has expired, then does
what was missed meanwhile, and nothing twice. The Lease's optimistic concurrency (a stale resourceVersion is
refused) is the real server's.

The audit log tells the two apart by their tokens' ids (support.clusters.apiserver.token_id).
How fast the standby takes over is a figure of bench/operator_failover.py (no timed assertions here);
this test checks the order of events, from the Lease's own timestamps.
"""

from __future__ import annotations

import collections
import datetime
import json
import time

import pytest

from support.clusters.apiserver import token_id
from support.clusters.apiserver_identities import OPERATOR_USER, install_operator_rbac, start_operator
from support.clusters.operator_harness import LEASES_PATH, REGISTRIES_PATH, TEST_LEASE, OperatorProcess
from support.clusters.operator_harness import reconciled as reconciled_registry
from support.common.polling import wait_for

WRITES = ("create", "update", "patch", "delete")


class Cluster:
    """The test's namespace and the operators started in it, each with a token of its own."""

    def __init__(self, api, namespace, log_dir):
        self.api, self.namespace, self.log_dir = api, namespace, log_dir
        self.tokens: dict[str, str] = {}
        self.lease_name = ""

    def operator(self, name: str, **lease) -> OperatorProcess:
        process, self.tokens[name] = start_operator(self.api, name, self.log_dir, [self.namespace], **lease)
        self.lease_name = process.lease["name"]
        return process

    def requests(self, name: str, mark: int = 0) -> list[dict]:
        """Audit entries of operator `name` after audit position `mark`."""
        mine = [token_id(self.tokens[name])]
        return [e for e in self.api.audit(OPERATOR_USER, since=mark)
                if (e["user"].get("extra") or {}).get("authentication.kubernetes.io/credential-id") == mine]

    def writes(self, name: str, mark: int = 0) -> list[tuple[str, str]]:
        """Its writes (not Events, not the leader Lease) after `mark`."""
        return [(e["verb"], e["requestURI"]) for e in self.requests(name, mark)
                if e["verb"] in WRITES and (e.get("objectRef") or {}).get("resource") not in ("events", "leases")]

    def registry(self, name: str) -> dict:
        return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"config": {"storage": {"inmemory": {}}}}}

    def reconciled(self, name: str) -> bool:
        return reconciled_registry(self.api, self.namespace, name) is not None

    def lease_object(self) -> dict:
        return self.api.get(LEASES_PATH, TEST_LEASE["namespace"], self.lease_name) or {}


@pytest.fixture
def cluster(kube_apiserver, apiserver_namespace, tmp_path) -> Cluster:
    return Cluster(kube_apiserver, apiserver_namespace, tmp_path)


def micro_time(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ")


def test_one_leader_writes_and_the_standby_takes_over_after_kill_9(cluster):
    api, ns = cluster.api, cluster.namespace
    for name in ("r1", "r2"):
        api.create(cluster.registry(name))
    first, second = cluster.operator("operator-a"), cluster.operator("operator-b")
    processes = {p.name: p for p in (first, second)}
    try:
        holder = wait_for(lambda: cluster.lease_object().get("spec", {}).get("holderIdentity"), "a leader", 60)
        leader = processes[holder]
        standby = next(p for p in processes.values() if p is not leader)
        wait_for(lambda: cluster.reconciled("r1") and cluster.reconciled("r2"), "r1 and r2 reconciled", 60)
        api.create(cluster.registry("r3"))
        wait_for(lambda: cluster.reconciled("r3"), "r3 reconciled", 60)

        # Both are alive and healthy (both pods Ready, so the budget counts both); only the leader writes.
        wait_for(standby.health, "the standby's health endpoint")
        assert standby.health() == (200, json.dumps({"leader": False}))
        assert leader.health() is not None and leader.health()[0] == 200
        assert standby.process.poll() is None and leader.process.poll() is None
        assert cluster.writes(leader.name), "the leader wrote nothing"
        assert cluster.writes(standby.name) == [], "the standby wrote"
        standby_events = [e["requestURI"] for e in cluster.requests(standby.name)
                          if e["verb"] in WRITES and (e.get("objectRef") or {}).get("resource") == "events"]
        assert standby_events == [], "the standby posted Events"

        # kill -9 the leader. While nobody leads, a Registry is created and another edited.
        leader.kill()
        last_renewal = cluster.lease_object()["spec"]
        mark = api.audit_mark()
        api.create(cluster.registry("r4"))
        api.patch(REGISTRIES_PATH, ns, "r1", {"spec": {"config": {"log": {"level": "debug"}}}})

        wait_for(lambda: cluster.lease_object().get("spec", {}).get("holderIdentity") == standby.name,
                 "the standby to take the Lease", timeout=60)
        wait_for(lambda: cluster.reconciled("r4") and cluster.reconciled("r1"), "r4 and r1 reconciled", 60)
        taken = cluster.lease_object()["spec"]
        # It waited out the dead leader's Lease: taken no earlier than lease duration after the last renewal.
        waited = (micro_time(taken["acquireTime"]) - micro_time(last_renewal["renewTime"])).total_seconds()
        assert waited >= TEST_LEASE["duration"] - 0.001, waited
        assert taken["leaseTransitions"] == last_renewal["leaseTransitions"] + 1

        # Nothing missed: r4 got its objects, r1's edit reached its status. Nothing twice: the Registries
        # that did not change (r2, r3) saw no write from the new leader, and every object was created once.
        assert api.get("apps/v1/deployments", ns, "r4") is not None
        new_writes = cluster.writes(standby.name, mark)
        assert new_writes, "the new leader wrote nothing"
        assert not [w for w in new_writes if "/r2" in w[1] or "/r3" in w[1]], new_writes

        def created() -> collections.Counter:
            return collections.Counter((e["involvedObject"]["name"], e["message"])
                                       for e in api.list("v1/events", ns) if e["reason"] == "Created")

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


def test_a_stopped_leader_hands_over_at_once(cluster):
    """SIGTERM (a rollout, a drain): the leader releases the Lease; the standby takes it at its next read."""
    cluster.api.create(cluster.registry("r1"))
    # A Lease so long that only a release can explain a takeover before the test's patience runs out.
    long_lease = {"duration": 3600.0, "renew_deadline": 30.0, "retry_period": 0.5}
    first = cluster.operator("operator-a", **long_lease)
    wait_for(lambda: first.lease_holder() == "operator-a", "operator-a to lead", timeout=60)
    second = cluster.operator("operator-b", **long_lease)
    try:
        wait_for(lambda: cluster.reconciled("r1"), "r1 reconciled", 60)
        wait_for(second.health, "the standby's health endpoint")
        assert first.stop() == 0
        wait_for(lambda: second.lease_holder() == "operator-b", "operator-b to take the released Lease", 60)
        # Released as the signal came, not once kopf, the caches and the watches had stopped (that took 5 s when
        # kopf's own signal handler ended it): the pod a rollout makes meanwhile must not find the Lease still held.
        # The release itself may end after them: it first waits for a renewal in flight.
        log = first.log()
        assert "released the leader Lease" in log, log
        assert log.index("asked to stop: releasing the leader Lease") < log.index("stopped: kopf, the caches"), log
        cluster.api.patch(REGISTRIES_PATH, cluster.namespace, "r1", {"spec": {"config": {"log": {"level": "debug"}}}})
        wait_for(lambda: cluster.reconciled("r1"), "r1 reconciled by the new leader", 60)
    finally:
        first.stop()
        assert second.stop() == 0, second.log()[-3000:]


@pytest.mark.parametrize("after_leading", [None, 0.0, 0.02, 0.05, 0.1, 0.3])
def test_a_sigterm_at_any_moment_of_the_start_stops_cleanly_and_releases_the_lease(cluster, after_leading):
    """SIGTERM while standing by (None), or `after_leading` seconds after the Lease was taken: in the hand-over to
    kopf (the stand-by's health server closing, the caches starting, kopf's own signal handlers not yet there).
    The clean-clone CI once found a process there killed by the signal (exit -15), its Lease left to expire. Every
    moment: exit 0, and the Lease, once held, released (a standby takes it at once)."""
    long_lease = {"duration": 3600.0, "renew_deadline": 30.0, "retry_period": 0.2}
    if after_leading is None:  # someone else leads: this one stands by
        install_operator_rbac(cluster.api)  # and the operator's namespace, where the Lease is
        cluster.api.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"name": f"berth-operator-{cluster.namespace}",
                                         "namespace": TEST_LEASE["namespace"]},
                            "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600,
                                     "renewTime": datetime.datetime.now(datetime.UTC).strftime(
                                         "%Y-%m-%dT%H:%M:%S.%fZ")}})
    operator = cluster.operator("operator-a", **long_lease)
    try:
        said = "standing by for the leader Lease" if after_leading is None else "leading: holder of the Lease"
        deadline = time.monotonic() + 60
        while said not in operator.log_path.read_text(errors="replace"):
            assert operator.process.poll() is None and time.monotonic() < deadline, operator.log()[-3000:]
            time.sleep(0.002)
        time.sleep(after_leading or 0.3)
        assert operator.stop() == 0, operator.log()[-3000:]
        if after_leading is not None:
            assert cluster.lease_object()["spec"].get("leaseDurationSeconds") == 1, cluster.lease_object()
            assert "released the leader Lease" in operator.log(), operator.log()[-3000:]
        else:
            assert cluster.lease_object()["spec"]["holderIdentity"] == "someone-else"
        assert "Traceback" not in operator.log(), operator.log()[-3000:]
    finally:
        operator.stop()


def test_a_missing_leader_election_namespace_is_said_once_and_the_lease_taken_once_it_exists(
        kube_apiserver, apiserver_namespace, tmp_path):
    """`berth-operator -n NS` on a cluster without its leader-election namespace: the real server
    answers the Lease create 404. One error line names the namespace and the ways out, however many retry
    periods pass; once the namespace is created the operator takes the Lease and acts."""
    missing = f"{apiserver_namespace}-lease"
    operator = OperatorProcess(kube_apiserver, "lonely", tmp_path, namespaces=[apiserver_namespace],
                               lease={"namespace": missing, "name": "berth-operator"},
                               kubeconfig=kube_apiserver.kubeconfig_for(None)).start()
    try:
        def said() -> list[str]:
            return [line for line in operator.log_path.read_text(errors="replace").splitlines()
                    if "does not exist" in line]

        wait_for(said, "the missing namespace to be said", timeout=60)
        time.sleep(operator.lease["retry_period"] * 4)  # four more retry periods: each tries, none says it again
        lines = said()
        assert len(lines) == 1, lines
        record = json.loads(lines[0])
        assert record["severity"] == "error"
        for words in (f"the namespace {missing!r} does not exist", "kubectl apply -k deploy",
                      "--leader-election-namespace", "--no-leader-elect"):
            assert words in record["message"], record["message"]
        assert "HTTP 404" not in operator.log_path.read_text(errors="replace")

        kube_apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": missing}})
        wait_for(lambda: (kube_apiserver.get(LEASES_PATH, missing, "berth-operator") or {}).get("spec", {})
                 .get("holderIdentity") == "lonely", "the Lease taken once the namespace exists", timeout=60)
        kube_apiserver.create(Cluster(kube_apiserver, apiserver_namespace, tmp_path).registry("after"))
        wait_for(lambda: reconciled_registry(kube_apiserver, apiserver_namespace, "after"),
                 "a Registry reconciled by the operator that now leads", timeout=60)
    finally:
        operator.stop()
        if kube_apiserver.get("v1/namespaces", None, missing) is not None:
            kube_apiserver.delete("v1/namespaces", None, missing)
