"""berth_operator.engine.status: the conditions, their reasons and transition times, and the /status merge patch."""

import pytest

from berth_operator.engine.status import (
    DeploymentState,
    Finding,
    Observation,
    conditions,
    degraded_changed,
    merge_conditions,
    operator_status,
    selector,
    status_patch,
    url,
)

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"
READY_DEPLOYMENT = DeploymentState(wanted=2, replicas=2, ready=2, updated=2, current=True)


def by_type(conds):
    return {ctype: (status, reason) for ctype, (status, reason, _) in conds.items()}


def test_all_ready_is_available():
    obs = Observation(generation=3, deployment=READY_DEPLOYMENT, agents={"a": {"observedGeneration": 3}})
    assert by_type(conditions(obs)) == {
        "Ready": ("True", "Available"),
        "Progressing": ("False", "Available"),
        "Degraded": ("False", "AsExpected"),
    }


def test_invalid_spec_blocks_everything_and_names_the_field():
    message = "spec.config.storage: set exactly one storage backend"
    obs = Observation(generation=2, findings=(Finding("InvalidSpec", message),), deployment=READY_DEPLOYMENT)
    conds = conditions(obs)
    assert conds["Degraded"] == ("True", "InvalidSpec", message)
    assert conds["Ready"][:2] == ("False", "InvalidSpec")
    assert conds["Progressing"][:2] == ("False", "InvalidSpec")


@pytest.mark.parametrize(
    "reason",
    ["WaitingForPVC", "WaitingForBucketAccess", "WaitingForBucket"],
)
def test_waiting_for_storage_is_progressing(reason):
    obs = Observation(generation=1, findings=(Finding(reason, "claim x is Pending"),), deployment=READY_DEPLOYMENT)
    conds = conditions(obs)
    assert conds["Progressing"][:2] == ("True", reason)
    assert conds["Ready"][:2] == ("False", reason)
    assert conds["Degraded"][:2] == ("False", "AsExpected")


def test_pods_not_ready_is_waiting_for_pods():
    obs = Observation(generation=1, deployment=DeploymentState(wanted=3, replicas=3, ready=1, updated=3))
    conds = conditions(obs)
    assert conds["Progressing"][:2] == ("True", "WaitingForPods")
    assert "1 of 3" in conds["Progressing"][2]
    assert conds["Ready"][:2] == ("False", "WaitingForPods")


def test_deployment_not_observed_yet_is_waiting_for_pods():
    obs = Observation(generation=1, deployment=DeploymentState(wanted=1, replicas=1, ready=1, updated=1, current=False))
    assert conditions(obs)["Progressing"][:2] == ("True", "WaitingForPods")
    assert conditions(Observation(generation=1))["Ready"][:2] == ("False", "WaitingForPods")


def test_missing_secret_is_degraded_and_named_as_why_not_ready():
    missing = Finding("MissingSecret", "Secret creds (spec.config.storage.auth.htpasswd.secret.name) not found")
    obs = Observation(generation=1, findings=(missing,), deployment=DeploymentState(wanted=1, replicas=1))
    conds = conditions(obs)
    assert conds["Degraded"] == ("True", "MissingSecret", missing.message)
    assert conds["Ready"][:2] == ("False", "MissingSecret")
    assert conds["Progressing"][:2] == ("True", "WaitingForPods")


def test_replicas_capped_is_degraded_but_ready():
    capped = Finding("ReplicasCapped", "spec.replicas: 3 needs ReadWriteMany storage")
    obs = Observation(generation=1, findings=(capped,), deployment=DeploymentState(1, 1, 1, 1))
    conds = conditions(obs)
    assert conds["Degraded"][:2] == ("True", "ReplicasCapped")
    assert conds["Ready"][:2] == ("True", "Available")


def test_degraded_precedence_and_joined_messages():
    obs = Observation(
        generation=1,
        findings=(Finding("ReplicasCapped", "capped"), Finding("MissingSecret", "no secret")),
        deployment=READY_DEPLOYMENT,
    )
    status, reason, message = conditions(obs)["Degraded"]
    assert (status, reason) == ("True", "MissingSecret")
    assert "capped" in message and "no secret" in message


def test_agents_behind_or_failing():
    behind = Observation(generation=4, deployment=READY_DEPLOYMENT, agents={"p1": {"observedGeneration": 3}})
    assert conditions(behind)["Ready"][:2] == ("False", "WaitingForAgents")
    failing = Observation(
        generation=4, deployment=READY_DEPLOYMENT, agents={"p1": {"observedGeneration": 3, "error": "bad regex"}}
    )
    conds = conditions(failing)
    assert conds["Degraded"][:2] == ("True", "AgentFailed")
    assert "p1: bad regex" in conds["Degraded"][2]
    assert conds["Ready"][:2] == ("False", "AgentFailed")


def test_scaled_to_zero():
    obs = Observation(generation=1, deployment=DeploymentState(wanted=0))
    assert conditions(obs)["Ready"][:2] == ("False", "ScaledToZero")


def test_unknown_reason_refused():
    with pytest.raises(ValueError):
        Finding("Whatever", "x")


def test_transition_time_moves_only_when_status_flips():
    ready = conditions(Observation(generation=1, deployment=READY_DEPLOYMENT))
    first = merge_conditions(ready, [], generation=1, now=T0)
    assert [c["type"] for c in first] == ["Ready", "Progressing", "Degraded"]
    assert all(c["lastTransitionTime"] == T0 for c in first)
    # Same statuses, new generation and message: times kept.
    again = merge_conditions(ready, first, generation=2, now=T1)
    assert all(c["lastTransitionTime"] == T0 for c in again)
    assert all(c["observedGeneration"] == 2 for c in again)
    # Ready flips: only Ready (and Progressing, which flips too) move.
    waiting = conditions(Observation(generation=2, deployment=DeploymentState(2, 2, 1, 2)))
    flipped = {c["type"]: c for c in merge_conditions(waiting, again, generation=2, now=T1)}
    assert flipped["Ready"]["lastTransitionTime"] == T1
    assert flipped["Progressing"]["lastTransitionTime"] == T1
    assert flipped["Degraded"]["lastTransitionTime"] == T0


def test_url_and_selector():
    assert url("reg", "ns", 5000, tls=False) == "http://reg.ns.svc:5000"
    assert url("reg", "ns", 443, tls=True) == "https://reg.ns.svc:443"
    assert selector({"b": "2", "a": "1"}) == "a=1,b=2"


def test_operator_status_and_patch_only_when_changed():
    obs = Observation(generation=1, deployment=READY_DEPLOYMENT)
    wanted = operator_status(obs, None, now=T0, url="http://r.n.svc:5000", selector="a=1", storage="inmemory")
    assert wanted["replicas"] == 2 and wanted["readyReplicas"] == 2 and wanted["observedGeneration"] == 1
    live = dict(wanted, agents={"p1": {"configHash": "x"}})
    assert status_patch(live, wanted, live_pods=["p1"]) is None
    # A later refresh at a later time, nothing changed: still no write.
    later = operator_status(obs, live, now=T1, url="http://r.n.svc:5000", selector="a=1", storage="inmemory")
    assert status_patch(live, later, live_pods=["p1"]) is None
    # A gone pod: its key (only) is set to null.
    assert status_patch(live, wanted, live_pods=["p2"]) == {"status": {"agents": {"p1": None}}}
    # Unknown pods: nothing pruned.
    assert status_patch(live, wanted, live_pods=None) is None
    changed = operator_status(
        Observation(generation=2, deployment=READY_DEPLOYMENT), live,
        now=T1, url="u", selector="a=1", storage="inmemory",
    )
    patch = status_patch(live, changed, live_pods=["p1"])["status"]
    assert patch["observedGeneration"] == 2 and patch["url"] == "u" and "agents" not in patch


def test_degraded_changed():
    ok = merge_conditions(conditions(Observation(1, deployment=READY_DEPLOYMENT)), [], generation=1, now=T0)
    bad = merge_conditions(
        conditions(Observation(1, findings=(Finding("InvalidSpec", "spec.x: bad"),))), ok, generation=1, now=T1
    )
    assert degraded_changed(ok, bad)
    assert not degraded_changed(bad, bad)


def test_garbage_collecting_is_progressing_and_leaves_ready_alone():
    gc = Finding("GarbageCollecting", "garbage collection r1 (manual) requested")
    obs = Observation(generation=3, findings=(gc,), deployment=READY_DEPLOYMENT,
                      agents={"a": {"observedGeneration": 3}})
    conds = conditions(obs)
    assert conds["Progressing"] == ("True", "GarbageCollecting", gc.message)
    assert by_type(conds)["Ready"] == ("True", "Available")  # read-only still serves every pull
    # A real wait names Progressing and Ready; the GC message is joined, not lost.
    waiting = Observation(generation=3, findings=(gc,), deployment=DeploymentState(wanted=2, replicas=2, ready=1,
                                                                                    updated=2, current=True))
    conds = conditions(waiting)
    assert conds["Progressing"][1] == "WaitingForPods" and gc.message in conds["Progressing"][2]
    assert conds["Ready"][:2] == ("False", "WaitingForPods") and gc.message not in conds["Ready"][2]


def test_a_serving_pod_with_no_record_has_not_applied_the_current_spec():
    """Ready counts every pod that must serve, not only those that wrote a record: a pod just scaled in is
    ready (its agent's /readyz) a moment before its record lands."""
    obs = Observation(generation=4, deployment=READY_DEPLOYMENT, agents={"a": {"observedGeneration": 4}},
                      serving_pods=("a", "b"))
    conds = conditions(obs)
    assert conds["Ready"][:2] == ("False", "WaitingForAgents")
    assert "b" in conds["Progressing"][2]
    both = Observation(generation=4, deployment=READY_DEPLOYMENT, serving_pods=("a", "b"),
                       agents={"a": {"observedGeneration": 4}, "b": {"observedGeneration": 5}})
    assert conditions(both)["Ready"][:2] == ("True", "Available")
