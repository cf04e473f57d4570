"""Garbage collection with two replicas coordinating through the test API server: safety and
faults (docs/design.md §4.5).

Two registry pods (agent subprocess + berth-supervise + docker-registry 2.8 each; the safety test also on 3.1.1) on
127.0.0.2 and 127.0.0.3, one data directory (a ReadWriteMany claim), one Registry (replicas: 2) with its reload
and gc Leases, behind support.traffic.balancer (new connections only to pods whose /readyz is 200). A run is asked for
as
the operator does (support.registries.gc.request_gc). The pods' registry binary is support.registries.gc.GatedRegistry:
the real one,
whose `garbage-collect` is held at its start until the test releases it, so "during the run" is a state the test
holds, not a moment it hopes to hit.

- Safety: the command starts only after both replicas serve read-only (both registries answer a push 405
  when it starts; in the agents' logs both `gc read-only` lines come before `gc started`, and before the
  command's own start time); a push through the Service during the run is refused with 405 and goes
  through after it; two pull loops through the Service from before the request to after both are writable
  again see no failed, refused or reset request.
- Fault: kill -9 of the runner's agent while its command runs. The surviving agent takes the expired gc
  Lease, records lastRun Interrupted and turns writable; the dead agent's orphaned command is stopped by its
  supervisor (heartbeat watchdog); the agent restarted as the kubelet would turns its registry writable and
  starts no new run.
"""

from __future__ import annotations

import datetime
import json
import signal
import time

import pytest

from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.gc import (
    GatedRegistry,
    agent_line_times,
    agent_records,
    blob_upload_status,
    blobs_on_disk,
    delete_manifest,
    gc_processes,
    gc_status,
    images_a_b,
    read_only_served_at,
    request_gc,
    running_gc_pods,
    start_agent_again,
    wait_last_run,
    writable,
)
from support.registries.pod import filesystem_spec
from support.registries.registry import REGISTRY_BINARY, make_oci_image, pull_image, push_image, registry_binaries
from support.registries.replicas import backends
from support.traffic.balancer import Balancer
from support.traffic.pull_loop import PullLoop

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

LEAVE_SECONDS = 0.3  # > the balancer's readiness period (0.05 s), as the pod's value covers its probe's
# The gc Lease lasts 15 s; a taker needs one more try (~2 s), a reload to writable and its record: generous.
LEASE_BOUND_WAIT = 60.0


@pytest.fixture
def gc_replicas(request, tmp_path, kube_api):
    """Two pods on Distribution 2.8, or on the major a test asks for (indirect parametrisation)."""
    major, binary = getattr(request, "param", ("2", REGISTRY_BINARY))
    gated = GatedRegistry(tmp_path / "bin", binary)
    port = free_port()
    spec = filesystem_spec(port, major=major, http={"addr": f"127.0.0.1:{port}", "drainTimeout": "30s"})
    spec["config"]["storage"]["delete"] = {"enabled": True}
    try:
        with running_gc_pods(tmp_path / "pods", kube_api, spec, count=2, binary=str(gated.path),
                             leave_seconds=LEAVE_SECONDS) as pods:
            yield pods, gated
    finally:
        gated.release()  # nothing may stay held after the test


def logs_of(pods) -> str:
    return "\n".join(f"--- {name}\n{pod.agent_log_text()[-5000:]}" for name, pod in pods.items())


@pytest.mark.parametrize("gc_replicas", registry_binaries(), indirect=True)
def test_gc_starts_after_both_replicas_serve_read_only_and_no_pull_fails(gc_replicas, kube_api, tmp_path):
    pods, gated = gc_replicas
    data = tmp_path / "pods" / "data"
    balancer = Balancer(backends(pods), check_interval=0.05).start()
    loops: list[PullLoop] = []
    try:
        a, b = images_a_b(tmp_path / "images")
        push_image(a, balancer.host, "demo/app:a")
        push_image(b, balancer.host, "demo/app:b")
        delete_manifest(balancer.url, "demo/app", b.manifest_digest)
        b_unique = set(b.blobs) - set(a.blobs)
        before = blobs_on_disk(data)
        shared = a.layer_digests[0]
        # retry_seconds=0: a refused or reset connection is a failure here, not something to retry (on 3.x too:
        # the old registry gets no new connection before its SIGTERM,
        # docs/decisions/0007-held-socket-handover.md).
        loops = [PullLoop(f"{balancer.url}/v2/demo/app/blobs/{shared}", a.blobs[shared], retry_seconds=0)
                 for _ in range(2)]
        for loop in loops:
            loop.start()
        wait_for(lambda: all(loop.stats.successes >= 5 for loop in loops),
                 "the pull loops to get going", 30, interval=0.1)

        gated.hold()
        request = request_gc(kube_api)
        run_id = request["id"]
        wait_for(gated.invocations, lambda: f"the garbage-collect command to start\n{logs_of(pods)}", 120, interval=0.1)
        # The command has started: both registries serve read-only now, and both said so on status.
        assert {name: blob_upload_status(pod.url) for name, pod in pods.items()} == {"pod-a": 405, "pod-b": 405}
        assert {name: record.get("readOnlyFor") for name, record in agent_records(kube_api).items()} == {
            "pod-a": run_id, "pod-b": run_id}
        active = gc_status(kube_api).get("active") or {}
        assert active.get("id") == run_id and active.get("phase") == "Collecting", active
        runner = active["runner"]
        # A push through the Service during the run is refused.
        assert blob_upload_status(balancer.url) == 405
        late = make_oci_image(tmp_path / "late", layer_size=32 * 1024)
        with pytest.raises(RuntimeError, match="StatusCode: 405"):
            push_image(late, balancer.host, "demo/late:1")
        gated.release()

        run = wait_last_run(kube_api, run_id, context=lambda: logs_of(pods))
        assert run["result"] == "Succeeded" and run["runner"] == runner, run
        assert (run["blobsDeleted"], run["manifestsDeleted"]) == (3, 0), run
        for name, pod in pods.items():
            wait_for(lambda pod=pod: writable(pod.url), lambda name=name: f"{name} writable again\n{logs_of(pods)}",
                     60, interval=0.1)
        # ... and the same push now goes through, and reads back.
        push_image(late, balancer.host, "demo/late:1")
        assert pull_image(balancer.host, "demo/late:1", tmp_path / "late-back").blobs == late.blobs
        # Keep pulling a little on the writable pair (the last reloads are behind us).
        marks = [loop.stats.successes for loop in loops]
        wait_for(lambda: all(loop.stats.successes >= mark + 5 for loop, mark in zip(loops, marks)),
                 "pulls after the run", 30, interval=0.1)
        stats = [loop.stop() for loop in loops]
    finally:
        for loop in loops:
            loop.stop()
        balancer.stop()

    # What the clients saw, from before the request to after both pods were writable again.
    assert [s.failures for s in stats] == [[], []], stats
    assert sum(s.refused_retries + s.reset_retries for s in stats) == 0, stats
    assert balancer.stats.refused == 0 and balancer.stats.no_backend == 0, balancer.stats
    assert balancer.stats.min_ready >= 1, balancer.stats  # never both out of the Service

    # The ordering, from the agents' logs: each pod acknowledged once; both served read-only before the runner
    # started the command, and that before the command itself began (its wall-clock start, from the binary);
    # both went writable after the result was recorded.
    lines = {name: pod.agent_lines() for name, pod in pods.items()}
    acked = {name: agent_line_times(lines[name], "gc read-only", run_id) for name in pods}
    assert all(len(times) == 1 for times in acked.values()), acked
    read_only = {name: read_only_served_at(lines[name], run_id) for name in pods}
    assert None not in read_only.values(), read_only
    started = agent_line_times(lines[runner], "gc started", run_id)
    finished = agent_line_times(lines[runner], "gc finished", run_id)
    assert len(started) == 1 and len(finished) == 1, (started, finished)
    (_pid, command_started, _args), = gated.invocations()
    assert max(read_only.values()) <= started[0] <= command_started, (read_only, started, command_started)
    recorded = datetime.datetime.fromisoformat(run["finishedAt"].replace("Z", "+00:00"))  # whole seconds
    for name in pods:
        # The registry answers writable a moment before its agent logs it: the agent's round still ends its
        # reload turn (ready again, then leave_seconds before the Lease goes on) first.
        wait_for(lambda name=name: agent_line_times(pods[name].agent_lines(), "gc writable", run_id),
                 f"{name}'s gc writable line", 30, interval=0.1)
        went_writable = agent_line_times(pods[name].agent_lines(), "gc writable", run_id)
        assert len(went_writable) == 1 and went_writable[0] >= recorded, (name, went_writable, run["finishedAt"])
    assert [agent_line_times(lines[name], "gc started", run_id) for name in pods if name != runner] == [[]]

    # The storage: B's own blobs are gone, A's are all there (and the push made after the run).
    assert blobs_on_disk(data) == (before - b_unique) | set(late.blobs)
    assert set(a.blobs) <= blobs_on_disk(data)
    print(json.dumps({"pulls": [s.successes for s in stats], "connections": balancer.stats.connections,
                      "min_ready": balancer.stats.min_ready, "runner": runner}))


def test_kill_9_of_the_runners_agent_mid_run(gc_replicas, kube_api, tmp_path):
    pods, gated = gc_replicas
    data = tmp_path / "pods" / "data"
    a, b = images_a_b(tmp_path / "images")
    first = next(iter(pods.values()))
    push_image(a, first.host, "demo/app:a")
    push_image(b, first.host, "demo/app:b")
    delete_manifest(first.url, "demo/app", b.manifest_digest)
    before = blobs_on_disk(data)

    gated.hold()
    request = request_gc(kube_api)
    run_id = request["id"]
    wait_for(gated.invocations, lambda: f"the garbage-collect command to start\n{logs_of(pods)}", 120, interval=0.1)
    active = gc_status(kube_api).get("active") or {}
    assert active.get("id") == run_id and active.get("phase") == "Collecting", active
    runner_name = active["runner"]
    runner = pods[runner_name]
    survivor_name, survivor = next((name, pod) for name, pod in pods.items() if name != runner_name)
    config_path = runner.config_dir / "config.yml"
    assert gc_processes(config_path), "the held command runs in the runner's pod"

    runner.agent.send_signal(signal.SIGKILL)
    runner.agent.wait(10)
    killed_at = time.monotonic()

    # The survivor takes the expired Lease, records the run Interrupted and serves writable again.
    wait_for(lambda: writable(survivor.url),
             lambda: f"{survivor_name} writable after the runner's agent died\n{logs_of(pods)}",
             LEASE_BOUND_WAIT, interval=0.1)
    writable_after = time.monotonic() - killed_at
    run = gc_status(kube_api).get("lastRun") or {}
    assert (run.get("id"), run.get("result"), run.get("runner")) == (run_id, "Interrupted", runner_name), run
    assert runner_name in run.get("message", ""), run
    interrupted = [line for line in survivor.actions("gc interrupted") if line.get("request_id") == run_id]
    assert [line.get("runner") for line in interrupted] == [runner_name], interrupted
    assert gc_status(kube_api).get("active") is None
    wait_for(lambda: agent_records(kube_api)[survivor_name].get("readOnlyFor") is None,
             lambda: f"{survivor_name}'s readOnlyFor cleared\n{agent_records(kube_api)}",
             30, interval=0.1)
    events = kube_api.list("v1/events", "default")
    assert any(event.get("reason") == "GarbageCollectionInterrupted" for event in events), events
    # The registry of the dead agent's pod: its orphaned command is stopped by the supervisor's watchdog (no
    # heartbeat), and it still serves (read-only: nobody is left in the pod to change its config).
    wait_for(lambda: not gc_processes(config_path),
             lambda: f"the orphaned garbage-collect to be stopped\n{runner.supervisor.log()[-3000:]}",
             30, interval=0.1)
    assert runner.supervisor.alive() and runner.serving()
    assert blob_upload_status(runner.url) == 405
    assert blobs_on_disk(data) == before  # the held command never deleted anything

    # The kubelet restarts the agent container: the run is over (lastRun has its id), so it goes writable and
    # starts nothing.
    start_agent_again(runner, runner_name, kube_api, leave_seconds=LEAVE_SECONDS)
    wait_for(lambda: writable(runner.url), lambda: f"{runner_name} writable after its agent restarted\n{logs_of(pods)}",
             LEASE_BOUND_WAIT, interval=0.1)
    wait_for(lambda: agent_records(kube_api).get(runner_name, {}).get("readOnlyFor") is None,
             lambda: f"{runner_name}'s record to drop readOnlyFor\n{agent_records(kube_api)}",
             30, interval=0.1)
    assert not gc_processes(config_path) and not gc_processes(survivor.config_dir / "config.yml")
    assert len(gated.invocations()) == 1, gated.invocations()
    assert (gc_status(kube_api).get("lastRun") or {}).get("result") == "Interrupted"
    assert runner.supervisor.alive() and runner.registry_pid() is not None
    print(json.dumps({"runner": runner_name, "survivor_writable_after_kill_seconds": round(writable_after, 1)}))
