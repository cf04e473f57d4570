"""ApiReporter against the test API server (real HTTP, official client); LogReporter's lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from berth_agent.core import metrics
from berth_agent.core.logs import setup_json_logging
from berth_agent.pipeline.report import ApiReporter, LogReporter

REGISTRIES = "berth.dev/v1alpha1/registries"
REGISTRY = {
    "apiVersion": "berth.dev/v1alpha1",
    "kind": "Registry",
    "metadata": {"name": "reg", "namespace": "default"},
    "spec": {"config": {"storage": {"inmemory": {}}}},
}


def _agents(kube_api) -> dict:
    return (kube_api.get(REGISTRIES, "default", "reg").get("status") or {}).get("agents") or {}


def _events(kube_api) -> list[dict]:
    return kube_api.list("v1/events", "default")


def _errors(kind: str) -> float:
    return metrics.report_errors_total.labels(kind=kind)._value.get()


@pytest.fixture
def registry(kube_api):
    obj = kube_api.create(REGISTRY)
    # Another pod's agent has already reported: our patches must leave its record alone.
    kube_api.patch(REGISTRIES, "default", "reg",
                   {"status": {"agents": {"reg-other": {"configHash": "other-hash", "error": None}},
                               "observedGeneration": 1}},
                   subresource="status")
    return obj


@pytest.mark.asyncio
async def test_status_record_under_own_key(kube_api, registry):
    reporter = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc")
    await reporter.applied("hash-1", 1)
    agents = _agents(kube_api)
    assert agents["reg-other"] == {"configHash": "other-hash"}  # not clobbered
    mine = agents["reg-abc"]
    assert mine["configHash"] == "hash-1" and mine["observedGeneration"] == 1 and "error" not in mine
    assert mine["appliedAt"].endswith("Z")
    assert kube_api.get(REGISTRIES, "default", "reg")["status"]["observedGeneration"] == 1  # operator's field kept

    await reporter.failed("cosi: key BucketInfo: invalid JSON at line 1", 2)
    mine = _agents(kube_api)["reg-abc"]
    # The record still describes the config that runs, now with the reason the newer input was not applied.
    assert mine["configHash"] == "hash-1" and mine["observedGeneration"] == 1
    assert mine["error"] == "cosi: key BucketInfo: invalid JSON at line 1"

    await reporter.applied("hash-2", 2)
    mine = _agents(kube_api)["reg-abc"]
    assert mine["configHash"] == "hash-2" and mine["observedGeneration"] == 2 and "error" not in mine
    assert _agents(kube_api)["reg-other"] == {"configHash": "other-hash"}

    # The status subresource, as a merge patch (a json-patch or a replace would have failed or clobbered).
    patches = [path for method, path in kube_api.requests() if method == "PATCH"]
    assert patches and all(path.startswith("/apis/berth.dev/v1alpha1/namespaces/default/registries/reg/status")
                           for path in patches)


@pytest.mark.asyncio
async def test_identical_record_is_not_rewritten(kube_api, registry):
    reporter = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc")
    await reporter.applied("hash-1", 1)
    await reporter.applied("hash-1", 1)
    await reporter.failed("bad", 2)
    await reporter.failed("bad", 2)
    patches = [path for method, path in kube_api.requests() if method == "PATCH" and "/status" in path]
    assert len(patches) == 2  # one applied, one failed (the fixture seeds the store directly, not over HTTP)


@pytest.mark.asyncio
async def test_events_name_the_registry_and_coalesce(kube_api, registry):
    reporter = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc")
    await reporter.event("ConfigApplied", "registry restarted on config hash-1")
    await reporter.event("RenderFailed", "cosi: key BucketInfo missing", warning=True)
    await reporter.event("RenderFailed", "cosi: key BucketInfo missing", warning=True)
    await reporter.event("RenderFailed", "cosi: key BucketInfo missing", warning=True)
    events = {e["reason"]: e for e in _events(kube_api)}
    assert len(_events(kube_api)) == 2
    applied, failed = events["ConfigApplied"], events["RenderFailed"]
    assert applied["type"] == "Normal" and applied["count"] == 1
    assert applied["message"] == "registry restarted on config hash-1"
    assert applied["involvedObject"] == {
        "apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "name": "reg", "namespace": "default",
        "uid": registry["metadata"]["uid"],
    }
    assert applied["source"] == {"component": "berth-agent", "host": "reg-abc"}
    assert applied["reportingComponent"] == "berth-agent" and applied["reportingInstance"] == "reg-abc"
    assert applied["firstTimestamp"] == applied["lastTimestamp"]
    assert failed["type"] == "Warning" and failed["count"] == 3  # three reports, one Event
    assert failed["metadata"]["name"].startswith("reg.")


@pytest.mark.asyncio
async def test_expired_event_is_written_again(kube_api, registry):
    reporter = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc")
    await reporter.event("RenderFailed", "bad", warning=True)
    name = _events(kube_api)[0]["metadata"]["name"]
    kube_api.delete("v1/events", "default", name)  # the API server expired it
    await reporter.event("RenderFailed", "bad", warning=True)
    events = _events(kube_api)
    assert len(events) == 1 and events[0]["metadata"]["name"] != name and events[0]["count"] == 1


@pytest.mark.asyncio
async def test_failures_are_counted_never_raised(kube_api):
    reporter = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc")  # the Registry does not exist
    status_before, event_before, lookup_before = _errors("status"), _errors("event"), _errors("lookup")
    await reporter.applied("hash-1", 1)  # 404
    assert _errors("status") == status_before + 1
    kube_api.fail_next(1, status=500, verb="create", plural="events")
    await reporter.event("ConfigApplied", "x")
    assert _errors("event") == event_before + 1
    assert _errors("lookup") >= lookup_before + 1  # the uid look-up 404s too; the Event goes without it
    await reporter.event("ConfigApplied", "x")  # the next one goes through
    assert len(_events(kube_api)) == 1 and "uid" not in _events(kube_api)[0]["involvedObject"]

    dead = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc")
    kube_api.close()  # the API server is gone altogether
    await dead.applied("hash-1", 1)
    await dead.event("ConfigApplied", "x")


@pytest.mark.asyncio
async def test_no_planted_secret_in_logs_events_or_status(kube_api):
    planted = "AKIA-PLANTED-SECRET-0123456789"
    obj = json.loads(json.dumps(REGISTRY))
    # A value that must never be echoed: it sits in the object the reporter reads (uid look-up) and in the
    # API server's answers; a reporter that logged responses or request bodies would leak it.
    obj["metadata"]["annotations"] = {"example.com/planted": planted}
    kube_api.create(obj)
    stream = io.StringIO()
    handler = setup_json_logging("DEBUG", stream=stream)
    try:
        reporter = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc")
        await reporter.event("ConfigApplied", "registry restarted on config h")
        kube_api.fail_next(1, status=500, verb="patch")
        await reporter.applied("h", 1)  # fails and is logged
        kube_api.fail_next(1, status=422, verb="create")
        await reporter.event("RenderFailed", "cosi: key BucketInfo: invalid JSON", warning=True)
        await reporter.failed("cosi: key BucketInfo: invalid JSON", 1)
    finally:
        logging.getLogger().removeHandler(handler)
    logged = stream.getvalue()
    assert "cannot report to the API" in logged  # the failures were logged...
    assert planted not in logged  # ...without bodies
    for line in logged.splitlines():
        json.loads(line)
    assert planted not in json.dumps(_events(kube_api))
    assert planted not in json.dumps(kube_api.get(REGISTRIES, "default", "reg").get("status"))


@pytest.mark.asyncio
async def test_log_reporter_lines():
    stream = io.StringIO()
    handler = setup_json_logging("DEBUG", stream=stream)
    try:
        reporter = LogReporter("examples/local/registry.yaml")
        await reporter.applied("hash-1", 3)
        await reporter.failed("registry file x: invalid YAML at line 2, column 1: bad", None)
        await reporter.event("ConfigApplied", "registry restarted on config hash-1")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    # DEBUG: at INFO the pipeline's one line per action says it already (a pod logs only that line too).
    assert [(line["level"], line["msg"]) for line in lines] == [
        ("debug", "config applied"),
        ("debug", "config not applied"),
        ("debug", "registry restarted on config hash-1"),
    ]
    assert lines[0]["config_hash"] == "hash-1" and lines[0]["generation"] == 3
    assert lines[1]["error"].startswith("registry file x") and lines[2]["reason"] == "ConfigApplied"


@pytest.mark.asyncio
async def test_first_record_on_a_registry_without_status(kube_api):
    kube_api.create(REGISTRY)
    reporter = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc")
    await reporter.failed("spec.config.storage: exactly one backend", None)  # the very first config failed
    assert _agents(kube_api) == {"reg-abc": {"error": "spec.config.storage: exactly one backend"}}
    await asyncio.gather(reporter.applied("h", 1), reporter.event("ConfigApplied", "x"))  # overlapping calls
    assert _agents(kube_api)["reg-abc"]["configHash"] == "h" and len(_events(kube_api)) == 1


@pytest.mark.asyncio
async def test_data_path_record_follows_the_volume_without_churn(kube_api, registry):
    """status.agents.<pod>.dataPath: written on the first probe, not again for a small move of free space, again
    for a move of 1% of capacity or a change of the volume, removed when the storage is no longer a volume."""
    from berth_agent.sources.pvc import PvcState

    now = [1_000_000.0]
    reporter = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc", clock=lambda: now[0])
    gib = 1 << 30

    def state(free: int, *, mounted: bool = True, capacity: int = 10 * gib) -> PvcState:
        return PvcState("/var/lib/registry", present=True, mounted=mounted, capacity_bytes=capacity,
                        free_bytes=free, writable=True)

    def patches() -> int:
        return sum(1 for method, _ in kube_api.requests() if method == "PATCH")

    await reporter.applied("hash-1", 1)
    await reporter.data_path(state(8 * gib))
    mine = _agents(kube_api)["reg-abc"]
    assert mine["configHash"] == "hash-1"  # the applied record is kept beside it
    assert mine["dataPath"] == {"mounted": True, "capacityBytes": 10 * gib, "freeBytes": 8 * gib,
                                "checkedAt": "1970-01-12T13:46:40Z"}
    written = patches()

    now[0] += 30
    await reporter.data_path(state(8 * gib - 50 * (1 << 20)))  # 50 MiB less: under 1% of 10 GiB
    assert patches() == written
    now[0] += 30
    await reporter.data_path(state(8 * gib - 200 * (1 << 20)))  # 200 MiB less: over 1%
    assert patches() == written + 1
    assert _agents(kube_api)["reg-abc"]["dataPath"]["freeBytes"] == 8 * gib - 200 * (1 << 20)
    now[0] += 30
    await reporter.data_path(state(8 * gib - 200 * (1 << 20), capacity=20 * gib))  # the volume was expanded
    assert _agents(kube_api)["reg-abc"]["dataPath"]["capacityBytes"] == 20 * gib
    now[0] += 601
    await reporter.data_path(state(8 * gib - 200 * (1 << 20), capacity=20 * gib))  # unchanged, but 10 min on
    assert _agents(kube_api)["reg-abc"]["dataPath"]["checkedAt"] != "1970-01-12T13:46:40Z"

    await reporter.data_path(None)  # switched to object storage
    assert "dataPath" not in _agents(kube_api)["reg-abc"]
    assert _agents(kube_api)["reg-other"] == {"configHash": "other-hash"}


@pytest.mark.asyncio
async def test_waiting_for_a_turn_is_on_the_pods_record_until_it_ends(kube_api, registry):
    reporter = ApiReporter(kube_api.agent_client(), "default", "reg", "reg-abc")
    await reporter.applied("hash-1", 1)
    await reporter.waiting("waiting for its turn to reload: pod reg-other holds Lease reg-reload")
    mine = _agents(kube_api)["reg-abc"]
    assert mine["waiting"].startswith("waiting for its turn") and mine["configHash"] == "hash-1"
    await reporter.waiting(None)
    assert "waiting" not in _agents(kube_api)["reg-abc"]
    # A record left by an agent that died while waiting goes with the next applied config.
    await reporter.waiting("waiting for its turn to reload: pod reg-other holds Lease reg-reload")
    await reporter.applied("hash-2", 2)
    assert "waiting" not in _agents(kube_api)["reg-abc"]
    assert _agents(kube_api)["reg-other"] == {"configHash": "other-hash"}
