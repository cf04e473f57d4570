"""Garbage collection, the operator's half, against the test API server with a clock the test sets: the
schedule fires at its time (no sleeping), the run-now annotation is taken once, a missed schedule runs once, a
run's end is seen, a dead runner's run is marked Interrupted, and GC edits never touch the Deployment.

The runner (the agent's half, docs/design.md §4.5) is played by the test: it writes
status.garbageCollection.active and lastRun as the contract says.
"""

from __future__ import annotations

import datetime
from typing import Any

from berth_api import GC_PROXY_MESSAGE, GC_REQUEST_ANNOTATION, GC_STORAGE_MESSAGE
from support.clusters.operator_harness import REGISTRIES_PATH, wait_for
from support.common.clock import SetClock

NS = "gc"
T0 = datetime.datetime(2026, 11, 30, 2, 59, 30, tzinfo=datetime.UTC)


def registry(name: str, gc: dict[str, Any] | None = None) -> dict[str, Any]:
    """On a claim of its own (an in-memory store cannot be collected: berth_api.GC_STORAGE_MESSAGE)."""
    spec: dict[str, Any] = {"config": {"storage": {"filesystem": {"persistentVolumeClaim": f"{name}-claim"}}}}
    if gc is not None:
        spec["garbageCollection"] = gc
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


def create(kube_api, body: dict[str, Any]) -> None:
    """The Registry and its Bound claim (so the conditions speak of GC, not of storage)."""
    name = body["metadata"]["name"]
    kube_api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": f"{name}-claim", "namespace": NS},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    kube_api.patch("v1/persistentvolumeclaims", NS, f"{name}-claim", {"status": {"phase": "Bound"}},
                   subresource="status")
    kube_api.create(body)


def gc_status(harness, name: str) -> dict[str, Any]:
    return ((harness.registry(NS, name) or {}).get("status") or {}).get("garbageCollection") or {}


def events(harness, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in harness.events(NS, name) if e["reason"] == reason]


def pods_ready(kube_api, name: str) -> None:
    """Play the Deployment controller: every pod ready (so Progressing speaks of GC, not of pods)."""
    generation = kube_api.get("apps/v1/deployments", NS, name)["metadata"]["generation"]
    kube_api.patch("apps/v1/deployments", NS, name, {"status": {
        "observedGeneration": generation, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}},
        subresource="status")


def record_result(kube_api, name: str, request: dict[str, Any], result: str, **counts: Any) -> None:
    """Play the runner: lastRun with the request's id, active cleared."""
    kube_api.patch(REGISTRIES_PATH, NS, name, {"status": {"garbageCollection": {"active": None, "lastRun": {
        "id": request["id"], "trigger": request["trigger"], "dryRun": request["dryRun"],
        "deleteUntagged": request["deleteUntagged"], "result": result, "startedAt": request["requestedAt"],
        "finishedAt": request["requestedAt"], "runner": f"{name}-pod-1", **counts}}}}, subresource="status")


def test_the_schedule_fires_at_its_time_on_the_set_clock(operator_harness, kube_api):
    clock = SetClock(T0)
    harness = operator_harness([NS], clock=clock)
    create(kube_api, registry("nightly", {"schedule": "0 3 * * *", "readOnlyTimeout": "5m"}))
    harness.wait_reconciled(NS, "nightly")
    pods_ready(kube_api, "nightly")
    wait_for(lambda: gc_status(harness, "nightly").get("nextRun") == "2026-11-30T03:00:00Z", "nextRun")
    wait_for(lambda: (harness.condition(NS, "nightly", "Ready") or {}).get("status") == "True", "Ready")
    assert "request" not in gc_status(harness, "nightly")

    clock.set(T0 + datetime.timedelta(seconds=29))  # 02:59:59: not yet
    clock.set(datetime.datetime(2026, 11, 30, 3, 0, tzinfo=datetime.UTC))
    request = wait_for(lambda: gc_status(harness, "nightly").get("request"), "the scheduled request")
    assert request["trigger"] == "schedule" and request["requestedAt"] == "2026-11-30T03:00:00Z"
    assert request["deadline"] == "2026-11-30T03:07:00Z"
    assert gc_status(harness, "nightly")["nextRun"] == "2026-12-01T03:00:00Z"
    progressing = wait_for(lambda: (c := harness.condition(NS, "nightly", "Progressing")) and
                           c["reason"] == "GarbageCollecting" and c, "Progressing GarbageCollecting")
    assert progressing["status"] == "True" and request["id"] in progressing["message"]
    assert harness.condition(NS, "nightly", "Ready")["status"] == "True"
    wait_for(lambda: events(harness, "nightly", "GarbageCollectionRequested"), "the Requested event")

    record_result(kube_api, "nightly", request, "Succeeded", blobsDeleted=12, manifestsDeleted=1, bytesFreed=4096)
    wait_for(lambda: "request" not in gc_status(harness, "nightly"), "the request cleared")
    done = wait_for(lambda: events(harness, "nightly", "GarbageCollectionSucceeded"), "the Succeeded event")
    assert "12 blobs deleted" in done[0]["message"] and done[0]["type"] == "Normal"
    wait_for(lambda: harness.condition(NS, "nightly", "Progressing")["reason"] == "Available", "Progressing done")


def test_the_annotation_runs_once_per_value(operator_harness, kube_api):
    clock = SetClock(T0)
    harness = operator_harness([NS], clock=clock)
    create(kube_api, registry("manual", {"dryRun": True}))
    harness.wait_reconciled(NS, "manual")
    assert gc_status(harness, "manual") == {}

    kube_api.patch(REGISTRIES_PATH, NS, "manual", {"metadata": {"annotations": {
        GC_REQUEST_ANNOTATION: "2026-11-30T02:59:00Z"}}})
    request = wait_for(lambda: gc_status(harness, "manual").get("request"), "the manual request")
    assert request["trigger"] == "manual" and request["dryRun"] is True
    assert gc_status(harness, "manual")["handledRequest"] == "2026-11-30T02:59:00Z"
    record_result(kube_api, "manual", request, "Succeeded", blobsDeleted=0)
    wait_for(lambda: "request" not in gc_status(harness, "manual"), "the request cleared")

    # The same value seen again (a resync, a restart of the operator): no second run.
    harness.stop()
    clock.advance(datetime.timedelta(hours=1))
    harness = operator_harness([NS], clock=clock)
    assert harness.ctx is not None  # started
    wait_for(lambda: harness.ctx.completed >= 1, "the resume reconcile")
    assert "request" not in gc_status(harness, "manual")
    assert len(events(harness, "manual", "GarbageCollectionRequested")) == 1

    # A new value: a new run.
    kube_api.patch(REGISTRIES_PATH, NS, "manual", {"metadata": {"annotations": {
        GC_REQUEST_ANNOTATION: "2026-11-30T04:00:00Z"}}})
    second = wait_for(lambda: gc_status(harness, "manual").get("request"), "the second request")
    assert second["id"] != request["id"]


def test_a_schedule_missed_while_the_operator_was_down_runs_once(operator_harness, kube_api):
    clock = SetClock(T0)
    harness = operator_harness([NS], clock=clock)
    create(kube_api, registry("hourly", {"schedule": "0 * * * *"}))
    wait_for(lambda: gc_status(harness, "hourly").get("nextRun") == "2026-11-30T03:00:00Z", "nextRun")
    harness.stop()

    clock.set(datetime.datetime(2026, 12, 2, 17, 42, tzinfo=datetime.UTC))  # 63 hourly slots missed
    harness = operator_harness([NS], clock=clock)
    request = wait_for(lambda: gc_status(harness, "hourly").get("request"), "the catch-up request")
    assert request["requestedAt"] == "2026-12-02T17:42:00Z"
    assert gc_status(harness, "hourly")["nextRun"] == "2026-12-02T18:00:00Z"
    done = harness.ctx.completed
    pods_ready(kube_api, "hourly")  # one more reconcile at the same time: nothing more is due
    wait_for(lambda: harness.ctx.completed > done, "another reconcile")
    assert gc_status(harness, "hourly")["request"] == request
    assert len(events(harness, "hourly", "GarbageCollectionRequested")) == 1


def test_the_annotation_on_an_in_memory_registry_starts_nothing_and_says_why(operator_harness, kube_api):
    """An in-memory store lives in the registry process: a garbage-collect process would see an empty store of
    its own (and the pods would turn read-only for nothing). The CRD refuses garbageCollection there; the
    annotation gets a Warning naming the reason, once."""
    harness = operator_harness([NS], clock=SetClock(T0))
    body = registry("volatile")
    body["spec"]["config"]["storage"] = {"inmemory": {}}
    kube_api.create(body)
    harness.wait_reconciled(NS, "volatile")
    kube_api.patch(REGISTRIES_PATH, NS, "volatile", {"metadata": {"annotations": {
        GC_REQUEST_ANNOTATION: "2026-11-30T02:59:00Z"}}})
    refused = wait_for(lambda: events(harness, "volatile", "InvalidGarbageCollectionRequest"), "the refusal")
    assert refused[0]["type"] == "Warning" and GC_STORAGE_MESSAGE in refused[0]["message"], refused
    wait_for(lambda: gc_status(harness, "volatile").get("handledRequest") == "2026-11-30T02:59:00Z", "handled")
    assert "request" not in gc_status(harness, "volatile")
    assert harness.condition(NS, "volatile", "Progressing")["reason"] != "GarbageCollecting"
    assert not events(harness, "volatile", "GarbageCollectionRequested")


def test_the_annotation_on_a_pull_through_cache_starts_nothing_and_says_why(operator_harness, kube_api):
    """Read-only mode does not stop a proxy from writing what it pulls through (measured,
    docs/decisions/0021-no-garbage-collection-on-a-proxy.md), so a collection would race the cache. The CRD refuses
    garbageCollection there; the annotation gets a Warning naming the reason."""
    harness = operator_harness([NS], clock=SetClock(T0))
    body = registry("mirror")
    body["spec"]["config"]["proxy"] = {"remoteURL": "https://registry-1.docker.io"}
    kube_api.create(body)
    harness.wait_reconciled(NS, "mirror")
    kube_api.patch(REGISTRIES_PATH, NS, "mirror", {"metadata": {"annotations": {
        GC_REQUEST_ANNOTATION: "2026-11-30T02:59:00Z"}}})
    refused = wait_for(lambda: events(harness, "mirror", "InvalidGarbageCollectionRequest"), "the refusal")
    assert refused[0]["type"] == "Warning" and GC_PROXY_MESSAGE in refused[0]["message"], refused
    wait_for(lambda: gc_status(harness, "mirror").get("handledRequest") == "2026-11-30T02:59:00Z", "handled")
    assert "request" not in gc_status(harness, "mirror")
    assert not events(harness, "mirror", "GarbageCollectionRequested")


def test_a_run_whose_runner_died_is_marked_interrupted_at_its_deadline(operator_harness, kube_api):
    clock = SetClock(T0)
    harness = operator_harness([NS], clock=clock)
    create(kube_api, registry("dies", {"readOnlyTimeout": "1m"}))
    harness.wait_reconciled(NS, "dies")
    kube_api.patch(REGISTRIES_PATH, NS, "dies", {"metadata": {"annotations": {
        GC_REQUEST_ANNOTATION: "2026-11-30T02:59:30Z"}}})
    request = wait_for(lambda: gc_status(harness, "dies").get("request"), "the request")
    assert request["deadline"] == "2026-11-30T03:02:30Z"
    # The runner takes it, then is killed: nothing more is written.
    seen = harness.ctx.completed
    kube_api.patch(REGISTRIES_PATH, NS, "dies", {"status": {"garbageCollection": {"active": {
        "id": request["id"], "runner": "dies-pod-1", "startedAt": "2026-11-30T02:59:31Z", "phase": "Collecting"}}}},
        subresource="status")
    wait_for(lambda: harness.ctx.completed > seen and harness.ctx.completed == harness.ctx.reconciles,
             "the reconcile the runner's record causes")  # before time moves:
    # from here only the timer can notice the deadline

    clock.set(datetime.datetime(2026, 11, 30, 3, 2, 29, tzinfo=datetime.UTC))
    clock.set(datetime.datetime(2026, 11, 30, 3, 2, 30, tzinfo=datetime.UTC))  # the timer fires
    last = wait_for(lambda: gc_status(harness, "dies").get("lastRun"), "the Interrupted record")
    assert last["id"] == request["id"] and last["result"] == "Interrupted" and last["runner"] == "dies-pod-1"
    assert "dies-pod-1 stopped" in last["message"]
    assert "request" not in gc_status(harness, "dies") and "active" not in gc_status(harness, "dies")
    warning = wait_for(lambda: events(harness, "dies", "GarbageCollectionInterrupted"), "the Warning event")
    assert warning[0]["type"] == "Warning"
    assert harness.condition(NS, "dies", "Progressing")["reason"] != "GarbageCollecting"


def test_garbage_collection_edits_never_touch_the_deployment(operator_harness, kube_api):
    clock = SetClock(T0)
    harness = operator_harness([NS], clock=clock)
    create(kube_api, registry("edits"))
    harness.wait_reconciled(NS, "edits")
    deployment = kube_api.get("apps/v1/deployments", NS, "edits")
    for gc in ({"schedule": "0 3 * * *"}, {"schedule": "*/10 * * * sun", "deleteUntagged": True, "dryRun": True,
                                              "readOnlyTimeout": "2h"}, None):
        kube_api.patch(REGISTRIES_PATH, NS, "edits", {"spec": {"garbageCollection": gc}})
        harness.wait_reconciled(NS, "edits")
    kube_api.patch(REGISTRIES_PATH, NS, "edits", {"metadata": {"annotations": {
        GC_REQUEST_ANNOTATION: "2026-11-30T02:59:00Z"}}})
    wait_for(lambda: gc_status(harness, "edits").get("request"), "the request")
    assert kube_api.get("apps/v1/deployments", NS, "edits") == deployment


def test_an_invalid_spec_with_a_passed_schedule_does_not_spin(operator_harness, kube_api):
    """The schedule is kept, not run, while the spec is invalid; its passed nextRun arms no timer (which would
    fire at once, forever)."""
    import time

    clock = SetClock(T0)
    harness = operator_harness([NS], clock=clock)
    create(kube_api, registry("spin", {"schedule": "0 3 * * *"}))
    wait_for(lambda: gc_status(harness, "spin").get("nextRun") == "2026-11-30T03:00:00Z", "nextRun")
    kube_api.patch(REGISTRIES_PATH, NS, "spin", {"spec": {"replicas": -1}})
    wait_for(lambda: (harness.condition(NS, "spin", "Degraded") or {}).get("reason") == "InvalidSpec", "InvalidSpec")
    wait_for(lambda: harness.ctx.completed == harness.ctx.reconciles, "settled")
    before = harness.ctx.reconciles
    clock.set(datetime.datetime(2026, 11, 30, 3, 5, tzinfo=datetime.UTC))
    time.sleep(1.0)  # something that must not happen: give a spinning timer time to show
    assert harness.ctx.reconciles == before
    assert "request" not in gc_status(harness, "spin")


# The operator's Interrupted write races the runner's result at the deadline. The reconcile decides from the body
# it was handed (kopf's copy, or the sweep's), which can be older than what the API server holds.
RACE_REQUEST = {"id": "20261130T025930Z-manual", "trigger": "manual", "requestedAt": "2026-11-30T02:59:30Z",
                "dryRun": False, "deleteUntagged": False, "readOnlyTimeout": "1m", "deadline": "2026-11-30T03:02:30Z"}
PAST_DEADLINE = datetime.datetime(2026, 11, 30, 3, 2, 31, tzinfo=datetime.UTC)


def running_request(kube_api, name: str) -> dict[str, Any]:
    """A Registry whose run's deadline has passed on PAST_DEADLINE, with a runner that took it; returned as
    read now (what the operator would reconcile from)."""
    create(kube_api, registry(name, {"readOnlyTimeout": "1m"}))
    kube_api.patch(REGISTRIES_PATH, NS, name, {"status": {"garbageCollection": {"request": RACE_REQUEST, "active": {
        "id": RACE_REQUEST["id"], "runner": f"{name}-pod-1", "startedAt": "2026-11-30T02:59:31Z",
        "phase": "Recording"}}}}, subresource="status")
    return kube_api.get(REGISTRIES_PATH, NS, name)


def reconcile_directly(kube_api, body: dict[str, Any]):
    """One reconcile in this thread, as a handler runs it, on the set clock."""
    import kubernetes.client

    from berth_operator.cluster.view import Cluster
    from berth_operator.engine.reconcile import reconcile
    from berth_operator.kube.client import Kube
    from support.clusters.operator_harness import AGENT_IMAGE

    configuration = kubernetes.client.Configuration()
    configuration.host = kube_api.url
    kube = Cluster(Kube(configuration))
    try:
        return reconcile(kube, body, agent_image=AGENT_IMAGE, clock=SetClock(PAST_DEADLINE))
    finally:
        kube.close()


def status_patches(kube_api, name: str, mark: int) -> int:
    return sum(1 for method, path in kube_api.requests()[mark:]
               if method == "PATCH" and path.split("?")[0].endswith(f"/registries/{name}/status"))


def test_interrupted_never_overwrites_a_result_the_runner_recorded_just_before(kube_api):
    stale = running_request(kube_api, "race")
    # The runner records its result at the deadline, after the operator's read and before its write.
    record_result(kube_api, "race", RACE_REQUEST, "Succeeded", blobsDeleted=12, manifestsDeleted=1, bytesFreed=4096)
    mark = len(kube_api.requests())

    outcome = reconcile_directly(kube_api, stale)

    gc = (kube_api.get(REGISTRIES_PATH, NS, "race")["status"])["garbageCollection"]
    assert gc["lastRun"]["result"] == "Succeeded" and gc["lastRun"]["blobsDeleted"] == 12  # the facts stay
    assert gc["lastRun"]["runner"] == "race-pod-1" and gc["lastRun"]["bytesFreed"] == 4096
    assert "request" not in gc and "active" not in gc  # then decided again: finished, the request cleared
    assert [event.reason for event in outcome.events] == ["GarbageCollectionSucceeded"]
    assert status_patches(kube_api, "race", mark) == 2  # the guarded one refused (409), then the re-decided one


def test_interrupted_is_still_written_when_only_something_else_changed(kube_api):
    stale = running_request(kube_api, "other")
    # An agent's record changes after the operator's read: the guard refuses, the new decision is the same.
    kube_api.patch(REGISTRIES_PATH, NS, "other", {"status": {"agents": {"other-pod-2": {"observedGeneration": 1}}}},
                   subresource="status")

    outcome = reconcile_directly(kube_api, stale)

    status = kube_api.get(REGISTRIES_PATH, NS, "other")["status"]
    last = status["garbageCollection"]["lastRun"]
    assert last["id"] == RACE_REQUEST["id"] and last["result"] == "Interrupted" and last["runner"] == "other-pod-1"
    assert "request" not in status["garbageCollection"] and "active" not in status["garbageCollection"]
    assert [event.reason for event in outcome.events] == ["GarbageCollectionInterrupted"]


def test_interrupted_from_a_current_read_is_written_at_once(kube_api):
    current = running_request(kube_api, "fresh")
    mark = len(kube_api.requests())
    reconcile_directly(kube_api, current)
    assert kube_api.get(REGISTRIES_PATH, NS, "fresh")["status"]["garbageCollection"]["lastRun"]["result"] == \
        "Interrupted"
    assert status_patches(kube_api, "fresh", mark) == 1
