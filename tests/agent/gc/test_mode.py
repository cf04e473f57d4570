"""gc_mode (A1) and gc_decide (A3 to A7): pure decisions of the agent's half of garbage collection."""

from __future__ import annotations

import yaml

from berth_agent.gc import report as gc_report
from berth_agent.gc.decide import (
    Interrupt,
    Refuse,
    Run,
    acknowledgements,
    interrupted_run,
    last_run,
    measures_bytes,
    next_step,
    result_of,
    time_bound,
)
from berth_agent.gc.mode import read_only_for, with_read_only
from berth_agent.mounted.mounts import MountedInputs
from berth_agent.render.config import render
from berth_agent.sources.registry_api import status_digest
from berth_api import GC_STORAGE_MESSAGE, GarbageCollectionRun, RegistrySpec
from berth_api.timestamps import parse_epoch
from support.registries.gc import gc_outcome

NOW = parse_epoch("2026-11-30T10:00:00Z")
SPEC = {"image": "docker.io/library/registry:2", "config": {"storage": {"filesystem": {"persistentVolumeClaim": "d"}}}}


def registry(request: dict | None = None, *, last_run_id: str | None = None, active: dict | None = None,
             agents: dict | None = None, ready: int | None = None) -> dict:
    gc: dict = {}
    if request is not None:
        gc["request"] = {"id": "r1", "trigger": "manual", "requestedAt": "2026-11-30T09:59:00Z", "dryRun": False,
                         "deleteUntagged": True, "readOnlyTimeout": "10m", "deadline": "2026-11-30T10:11:00Z",
                         **request}
    if last_run_id is not None:
        gc["lastRun"] = {"id": last_run_id, "result": "Succeeded"}
    if active is not None:
        gc["active"] = active
    status: dict = {"garbageCollection": gc}
    if agents is not None:
        status["agents"] = agents
    if ready is not None:
        status["readyReplicas"] = ready
    return {"spec": SPEC, "status": status}


def test_a_standing_request_holds_read_only_until_its_result_or_its_deadline():
    hold = read_only_for(registry({}), NOW)
    assert hold is not None and hold.request_id == "r1" and hold.delete_untagged and not hold.dry_run
    assert hold.read_only_timeout == 600 and hold.deadline == parse_epoch("2026-11-30T10:11:00Z")
    assert read_only_for(registry({}, last_run_id="r1"), NOW) is None  # the result is in
    assert read_only_for(registry({}, last_run_id="r0"), NOW) is not None  # an earlier run's result
    assert read_only_for(registry({}), parse_epoch("2026-11-30T10:11:00Z")) is None  # the deadline passed
    assert read_only_for(registry(None), NOW) is None
    assert read_only_for(registry({"deadline": "tomorrow"}), NOW) is None  # malformed: never read-only for it
    assert read_only_for(None, NOW) is None


def test_the_read_only_overlay_renders_the_whole_maintenance_block():
    spec = RegistrySpec.model_validate({**SPEC, "config": {"storage": {
        "filesystem": {"persistentVolumeClaim": "d"},
        "maintenance": {"uploadpurging": {"enabled": True, "age": "24h", "interval": "1h", "dryrun": False}}}}})
    before = yaml.safe_load(render(spec, MountedInputs()).config)["storage"]["maintenance"]
    after = yaml.safe_load(render(with_read_only(spec), MountedInputs()).config)["storage"]["maintenance"]
    assert before["readonly"] == {"enabled": False} and after["readonly"] == {"enabled": True}
    assert after["uploadpurging"] == before["uploadpurging"]
    assert spec.config.storage.maintenance.readonly.enabled is False  # the spec itself is untouched


def test_the_watchers_digest_moves_with_the_gc_keys_only():
    base = status_digest(registry({}))
    assert status_digest(registry({"deadline": "2026-11-30T10:12:00Z"})) != base
    assert status_digest(registry({}, last_run_id="r1")) != base
    assert status_digest(registry({}, active={"id": "r1", "phase": "Collecting"})) != base
    assert status_digest(registry({}, agents={"pod-a": {"readOnlyFor": "r1"}})) == base  # acks: polled
    assert status_digest(registry({"requestedAt": "2026-11-30T09:59:30Z"})) == base


def test_with_the_lease_taken_a_request_runs_or_a_dead_run_is_recorded():
    assert next_step(registry({}), NOW) == Run(read_only_for(registry({}), NOW))
    step = next_step(registry({}, active={"id": "r1", "runner": "pod-a", "startedAt": "2026-11-30T09:59:30Z"}), NOW)
    assert isinstance(step, Interrupt) and step.runner == "pod-a"
    assert isinstance(next_step(registry({}, active={"id": "r0", "runner": "pod-a"}), NOW), Run)  # a stale active
    assert next_step(registry({}, last_run_id="r1"), NOW) is None
    in_memory = registry({})
    in_memory["spec"] = {"config": {"storage": {"inmemory": {}}}}
    assert next_step(in_memory, NOW) == Refuse(read_only_for(in_memory, NOW), GC_STORAGE_MESSAGE)
    record = interrupted_run(step, "2026-11-30T10:00:05Z", "pod-b")
    assert record["result"] == "Interrupted" and record["message"] == "the runner in pod pod-a stopped"
    assert record["startedAt"] == "2026-11-30T09:59:30Z" and record["blobsDeleted"] is None
    GarbageCollectionRun.model_validate(record)
    assert "restarted" in interrupted_run(step, "2026-11-30T10:00:05Z", "pod-a")["message"]


def test_the_runner_starts_only_when_every_record_acknowledged_and_enough_of_them():
    agents = {"pod-a": {"readOnlyFor": "r1"}, "pod-b": {"readOnlyFor": None}}
    acks = acknowledgements(registry({}, agents=agents, ready=2), "r1")
    assert not acks.complete and acks.missing == ("pod-b",) and "waiting for pod-b" in acks.describe()
    agents["pod-b"]["readOnlyFor"] = "r1"
    assert acknowledgements(registry({}, agents=agents, ready=2), "r1").complete
    assert not acknowledgements(registry({}, agents=agents, ready=3), "r1").complete  # a ready pod has no record
    assert not acknowledgements(registry({}, agents={}), "r1").complete  # never with nobody
    assert not acknowledgements(registry({}, agents={"pod-a": {"readOnlyFor": "r0"}}), "r1").complete
    assert acknowledgements(registry({}, agents={"pod-a": {"readOnlyFor": "r1"}}), "r1").complete
    # A roll's new pod beside the old one (ReadWriteOnce): counted by the Deployment before it is ready
    # or has written its record, so the runner waits for it too.
    rolling = registry({}, agents={"pod-a": {"readOnlyFor": "r1"}}, ready=1)
    rolling["status"]["replicas"] = 2
    acks = acknowledgements(rolling, "r1")
    assert not acks.complete and acks.needed == 2


def test_every_pod_of_the_registry_takes_a_turn_to_reload_a_roll_s_new_pod_too():
    from berth_agent.pipeline.render_step import pods_of

    assert pods_of(None) == 0 and pods_of({"status": {}}) == 0
    assert pods_of({"status": {"replicas": 2, "agents": {"a": {}}}}) == 2  # the new pod, before its record
    assert pods_of({"status": {"replicas": 1, "agents": {"a": {}, "b": {}}}}) == 2  # the old one, terminating


def test_the_command_stops_at_the_read_only_bound_or_a_minute_before_the_deadline():
    hold = read_only_for(registry({}), NOW)
    assert time_bound(NOW, hold) == min(NOW + 600, hold.deadline - 60) == hold.deadline - 60
    assert time_bound(NOW - 300, hold) == NOW + 300


SUMMARY = ("demo/a: marking manifest sha256:" + "a" * 64
           + "\n7 blobs marked, 3 blobs and 1 manifests eligible for deletion\n")


def test_outcomes_become_results_and_a_complete_last_run():
    report = gc_report.parse(SUMMARY, dry_run=False, exit_code=0)
    assert result_of(gc_outcome(report=report), stopped_by_agent=False, pod="p") == ("Succeeded", report.summary())
    assert result_of(gc_outcome(exit_status=None, timed_out=True, error="killed"), stopped_by_agent=False,
                     pod="p")[0] == "TimedOut"
    assert result_of(gc_outcome(exit_status=None, stopped=True), stopped_by_agent=True, pod="p") == (
        "Interrupted", "the agent in pod p stopped during the run")
    empty = gc_report.parse("failed to garbage collect: failed to mark: s3aws: Path not found: "
                            "/docker/registry/v2/repositories", dry_run=False, exit_code=1)
    assert result_of(gc_outcome(exit_status=1, error="exited with status 1", report=empty), stopped_by_agent=False,
                     pod="p") == ("Succeeded", gc_report.NOTHING_TO_COLLECT)  # a store never pushed to
    assert result_of(gc_outcome(exit_status=1, error="sweep failed"), stopped_by_agent=False, pod="p") == (
        "Failed", "sweep failed")
    hold = read_only_for(registry({}), NOW)
    record = last_run(hold, result="Succeeded", started_at="2026-11-30T10:00:00Z", finished_at="2026-11-30T10:00:09Z",
                      runner="pod-a", report=report, bytes_freed=1234, message=report.summary())
    run = GarbageCollectionRun.model_validate(record)
    assert (run.blobs_marked, run.manifests_marked, run.blobs_deleted, run.manifests_deleted, run.bytes_freed) == (
        7, 1, 3, 1, 1234)
    assert measures_bytes(registry({}), dry_run=False) and not measures_bytes(registry({}), dry_run=True)
    s3 = {"spec": {"config": {"storage": {"s3": {"bucket": "b"}}}}}
    assert not measures_bytes(s3, dry_run=False)
