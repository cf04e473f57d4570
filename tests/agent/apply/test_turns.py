"""The reload Lease and the replica turn against the test API server (one restart at a time)."""

from __future__ import annotations

import threading

import pytest

from berth_agent.apply.turns import ReplicaTurn
from berth_agent.core.health import Health
from berth_agent.kube.lease import LeaseError, ReloadLease
from berth_api.leases import reload_lease_name as lease_name

LEASES = "coordination.k8s.io/v1/leases"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lease_object(kube_api):
    return kube_api.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"name": lease_name("reg"), "namespace": "default"}, "spec": {}})


def _lease(kube_api, holder: str, clock=None) -> ReloadLease:
    options = {"clock": clock} if clock else {}
    return ReloadLease(kube_api.agent_client(), "default", lease_name("reg"), holder, **options)


def test_one_holder_at_a_time_and_release_hands_it_on(kube_api, lease_object):
    a, b = _lease(kube_api, "pod-a"), _lease(kube_api, "pod-b")
    assert a.try_acquire(30) == (True, None)
    assert b.try_acquire(30) == (False, "pod-a")
    spec = kube_api.get(LEASES, "default", "reg-reload")["spec"]
    assert spec["holderIdentity"] == "pod-a" and spec["leaseDurationSeconds"] == 30
    assert spec["renewTime"].endswith("Z") and spec["leaseTransitions"] == 1
    a.release()
    assert "holderIdentity" not in kube_api.get(LEASES, "default", "reg-reload")["spec"]
    assert b.try_acquire(30) == (True, None)


def test_a_holder_that_let_it_expire_is_taken_over_on_our_clock(kube_api, lease_object):
    clock = Clock()
    _lease(kube_api, "pod-dead").try_acquire(2)
    waiter = _lease(kube_api, "pod-b", clock)
    assert waiter.try_acquire(30) == (False, "pod-dead")  # first seen now: its bound starts now for us
    clock.now += 1.5
    assert waiter.try_acquire(30) == (False, "pod-dead")
    clock.now += 1.0  # 2.5 s without a change > leaseDurationSeconds 2
    assert waiter.try_acquire(30) == (True, None)
    spec = kube_api.get(LEASES, "default", "reg-reload")["spec"]
    assert spec["holderIdentity"] == "pod-b" and spec["leaseTransitions"] == 2


def test_of_two_racing_writers_one_gets_a_conflict(kube_api, lease_object):
    a, b = _lease(kube_api, "pod-a"), _lease(kube_api, "pod-b")
    stale = a.read()  # b writes between a's read and a's write: a's update carries a stale resourceVersion
    assert b.try_acquire(30) == (True, None)
    stale["spec"] = {"holderIdentity": "pod-a"}
    with pytest.raises(LeaseError) as raised:
        a._call("PUT", stale)
    assert raised.value.args[1] == 409
    assert kube_api.get(LEASES, "default", "reg-reload")["spec"]["holderIdentity"] == "pod-b"


def test_a_turn_waits_out_of_readiness_then_comes_back(kube_api, lease_object):
    health = Health()
    health.mark_config_written()
    other = _lease(kube_api, "pod-a")
    assert other.try_acquire(30)[0]
    messages: list[str | None] = []
    turn = ReplicaTurn(_lease(kube_api, "pod-b"), health, leave_seconds=0.05, on_wait=messages.append)
    stop = threading.Event()
    releaser = threading.Timer(0.5, other.release)
    releaser.start()
    timings = turn.begin(stop, hold_seconds=10)
    releaser.join()
    assert not timings.stopped and timings.lease_wait > 0 and timings.drain_wait >= 0.05
    assert not health.ready_ok()  # out of the Service while it restarts
    assert messages[0].startswith("waiting for its turn to reload: pod pod-a holds Lease reg-reload")
    assert messages[-1] is None
    assert kube_api.get(LEASES, "default", "reg-reload")["spec"]["holderIdentity"] == "pod-b"
    turn.end(stop)
    assert health.ready_ok()
    assert "holderIdentity" not in kube_api.get(LEASES, "default", "reg-reload")["spec"]


def test_a_missing_lease_does_not_block_reloads_for_ever(kube_api):
    health = Health()
    health.mark_config_written()
    turn = ReplicaTurn(_lease(kube_api, "pod-b"), health, leave_seconds=0.0)
    timings = turn.begin(threading.Event(), hold_seconds=0.3)  # no Lease (404): alone after the bound
    assert not timings.stopped and timings.lease_wait >= 0.3
    turn.end(threading.Event())
    assert health.ready_ok()
