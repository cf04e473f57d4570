"""leader.py against the test API server: who takes the Lease when, the fence on writes, release, and a
leader that cannot renew stopping (the process test is tests/apiserver/test_leader_election.py). Each elector gets its
own clock, so expiry is checked without waiting."""

from __future__ import annotations

import asyncio

import kubernetes.client
import pytest

from berth_operator.kube.client import Kube, NotLeader
from berth_operator.reactor.leader import LeaderElector, LeaseSettings
from berth_operator.reactor.runner import LeadershipLost
from support.clusters.operator_harness import LEASES_PATH, REGISTRIES_PATH, OperatorHarness, wait_for

NS = "berth-system"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def kube(api, **options) -> Kube:
    configuration = kubernetes.client.Configuration()
    configuration.host = api.url
    return Kube(configuration, **options)


def elector(api, identity: str) -> tuple[LeaderElector, Clock]:
    clock = Clock()
    settings = LeaseSettings(namespace=NS, identity=identity, lease_duration=15, renew_deadline=10, retry_period=2)
    return LeaderElector(kube(api), settings, clock=clock), clock


def secret(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"}}


def spec(api) -> dict:
    return api.get(LEASES_PATH, NS, "berth-operator")["spec"]


def test_one_holder_and_takeover_only_after_the_lease_expired_on_the_standbys_clock(kube_api):
    a, a_clock = elector(kube_api, "a")
    b, b_clock = elector(kube_api, "b")
    assert a.try_acquire_or_renew() and a.leading()
    assert spec(kube_api)["holderIdentity"] == "a" and spec(kube_api)["leaseTransitions"] == 0
    assert not b.try_acquire_or_renew() and not b.leading()

    a_clock.now += 2
    assert a.try_acquire_or_renew()  # renewed: the record changed, so b's wait starts again
    b_clock.now += 14
    assert not b.try_acquire_or_renew()
    b_clock.now += 14  # 14 s since b saw the renewal: not yet
    assert not b.try_acquire_or_renew()
    b_clock.now += 1.5  # 15.5 s since b saw the last record
    assert b.try_acquire_or_renew() and b.leading()
    assert spec(kube_api)["holderIdentity"] == "b" and spec(kube_api)["leaseTransitions"] == 1

    # The old leader learns it at its next attempt and stops at once.
    assert not a.try_acquire_or_renew() and not a.leading()


def test_a_leader_that_has_not_renewed_within_the_deadline_may_not_write(kube_api):
    a, clock = elector(kube_api, "a")
    guarded = kube(kube_api, may_write=a.may_write)
    assert a.try_acquire_or_renew()
    guarded.create(secret("written"))
    clock.now += 10.5
    assert not a.leading()
    before = len(kube_api.requests())
    with pytest.raises(NotLeader):
        guarded.create(secret("refused"))
    assert len(kube_api.requests()) == before, "the refused write must not reach the API server"
    assert guarded.get("v1", "Secret", "default", "anything") is None  # reads are not fenced


def stand_by(candidate: LeaderElector, clock: Clock, seconds: float = 4) -> None:
    """Read the Lease (held by another) every retry period for `seconds`: a standby, not a newcomer."""
    for _ in range(int(seconds / 2) + 1):
        assert not candidate.try_acquire_or_renew()
        clock.now += 2
    clock.now -= 2


def test_release_hands_over_without_waiting(kube_api):
    a, _ = elector(kube_api, "a")
    b, b_clock = elector(kube_api, "b")
    assert a.try_acquire_or_renew()
    stand_by(b, b_clock)
    a.release()
    assert not a.leading() and not spec(kube_api).get("holderIdentity")
    assert b.try_acquire_or_renew()  # same instant on b's clock: no expiry wait after a release


def test_a_released_lease_goes_to_the_standby_before_a_process_that_has_just_started(kube_api):
    """A rollout deletes the leader: it releases, and the pod made in its place starts beside the standby. The
    standby, which saw the Lease held, takes it at its next read; the newcomer, whose first read finds it released,
    leaves it two retry periods (the node test once saw the newcomer take it first). A newcomer alone takes it then."""
    a, _ = elector(kube_api, "a")
    standby, standby_clock = elector(kube_api, "standby")
    newcomer, newcomer_clock = elector(kube_api, "newcomer")
    assert a.try_acquire_or_renew()
    stand_by(standby, standby_clock)
    a.release()
    assert not newcomer.try_acquire_or_renew() and not newcomer.leading()  # first read: released, not taken
    newcomer_clock.now += 3.9
    assert not newcomer.try_acquire_or_renew()
    assert standby.try_acquire_or_renew() and standby.leading()
    assert spec(kube_api)["holderIdentity"] == "standby"
    newcomer_clock.now += 10
    assert not newcomer.try_acquire_or_renew()  # held now: it stands by

    standby.release()
    alone, alone_clock = elector(kube_api, "alone")
    assert not alone.try_acquire_or_renew()
    alone_clock.now += 4  # two retry periods: nobody else came, so it takes it
    assert alone.try_acquire_or_renew() and spec(kube_api)["holderIdentity"] == "alone"


def test_a_newcomer_that_saw_the_leaders_last_moments_still_leaves_a_released_lease_to_the_standby(kube_api):
    """The replacement pod read the Lease once while the leader still held it (its SIGTERM came late), then found
    it released: one glimpse of a holder does not make it a standby. The standby, there for longer, takes it."""
    a, _ = elector(kube_api, "a")
    standby, standby_clock = elector(kube_api, "standby")
    newcomer, newcomer_clock = elector(kube_api, "newcomer")
    assert a.try_acquire_or_renew()
    stand_by(standby, standby_clock, 10)
    assert not newcomer.try_acquire_or_renew()  # held: it stands by
    a.release()
    newcomer_clock.now += 2
    assert not newcomer.try_acquire_or_renew()  # released, but it stood by only 2 s: it leaves it
    newcomer_clock.now += 1.9
    assert not newcomer.try_acquire_or_renew()
    standby_clock.now += 2
    assert standby.try_acquire_or_renew() and spec(kube_api)["holderIdentity"] == "standby"


def test_a_standby_of_long_standing_takes_a_released_lease_at_its_first_read(kube_api):
    a, _ = elector(kube_api, "a")
    b, b_clock = elector(kube_api, "b")
    assert a.try_acquire_or_renew()
    stand_by(b, b_clock, 4)
    a.release()
    b_clock.now += 0.1
    assert b.try_acquire_or_renew()


def test_settings_must_leave_room_between_renewal_and_expiry():
    with pytest.raises(ValueError):
        LeaseSettings(namespace=NS, identity="x", lease_duration=10, renew_deadline=10, retry_period=2)


def test_an_operator_that_cannot_renew_stops_acting(kube_api):
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lost"}})
    lease = LeaseSettings(namespace=NS, identity="solo", lease_duration=3, renew_deadline=2, retry_period=0.2)
    harness = OperatorHarness(kube_api, ["lost"], leader=lease).start()
    try:
        kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                         "metadata": {"name": "before", "namespace": "lost"},
                         "spec": {"config": {"storage": {"inmemory": {}}}}})
        harness.wait_reconciled("lost", "before")
        # The API server refuses every renewal from now on.
        kube_api.fail_next(1_000_000, status=500, verb="patch", plural="leases")
        wait_for(lambda: harness.failure, "the operator to give up", timeout=60)
        assert isinstance(harness.failure[0], LeadershipLost)
        kube_api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                         "metadata": {"name": "after", "namespace": "lost"},
                         "spec": {"config": {"storage": {"inmemory": {}}}}})
        mark = len(kube_api.requests())
        wait_for(lambda: not harness._thread.is_alive(), "the operator thread to end", timeout=30)
        assert harness.writes_after(mark) == []
        assert not (kube_api.get(REGISTRIES_PATH, "lost", "after").get("status"))
    finally:
        harness.failure.clear()
        harness.stop()


def test_a_missing_leader_election_namespace_is_said_once_with_what_to_do(kube_api, caplog):
    """`berth-operator -n NS` on a cluster without berth-system: the Lease create answers 404 (the namespace
    does not exist; the test server is told to answer so, as a real one does). One clear error line naming the
    namespace and the three ways out, not `HTTP 404` every retry period; it still stands by and takes the Lease
    once the create goes through."""
    settings = LeaseSettings(namespace=NS, identity="a", lease_duration=0.4, renew_deadline=0.2, retry_period=0.02)
    a = LeaderElector(kube(kube_api), settings)
    kube_api.fail_next(10, status=404, verb="create", plural="leases")
    caplog.set_level("INFO", logger="berth.operator.leader")
    asyncio.run(asyncio.wait_for(a.acquire(), 10))
    assert a.leading()
    problems = [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    assert len(problems) == 1, [r.getMessage() for r in problems]
    message = problems[0].getMessage()
    assert problems[0].levelname == "ERROR"
    assert f"the namespace {NS!r} does not exist" in message
    for remedy in ("kubectl apply -k deploy", "--leader-election-namespace", "--no-leader-elect"):
        assert remedy in message
    assert "HTTP 404" not in message
    assert any("can be read and written again" in r.getMessage() for r in caplog.records)


def test_the_leaders_renewal_is_one_request_and_a_foreign_write_sends_it_back_to_reading(kube_api):
    """client-go's fast path: the leader renews the Lease as its last write left it (a PATCH guarded by that
    resourceVersion), with no GET first; under a loaded API server each request saved keeps the renewal further
    from the renew deadline. A write by anyone else fails that guard, and the next attempt reads the Lease."""
    a, clock = elector(kube_api, "a")
    assert a.try_acquire_or_renew()
    mark = len(kube_api.requests())
    clock.now += 2
    assert a.try_acquire_or_renew()
    assert [method for method, _ in kube_api.requests()[mark:]] == ["PATCH"]
    kube_api.patch(LEASES_PATH, NS, "berth-operator", {"spec": {"holderIdentity": "b"}})  # b took it (by hand)
    mark = len(kube_api.requests())
    clock.now += 2
    assert not a.try_acquire_or_renew()  # held by b now, and not expired on a's clock
    assert [method for method, _ in kube_api.requests()[mark:]] == ["PATCH", "GET"]
    assert not a.leading()
