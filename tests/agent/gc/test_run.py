"""The GC runner's coordination against the test API server (A3 to A7): the `<registry>-gc` Lease, waiting for
every acknowledgement, recording, a dead runner, a lost Lease.

The registry command is not what these tests are about (tests/agent/gc/test_command.py and the end-to-end tests
run the real one): `Command` stands in for GcCommand with the same `run`/`stop_orphan` methods and records what
the status said when it was started.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from dataclasses import dataclass, field

import pytest
import yaml

from berth_agent.gc import report as gc_report
from berth_agent.gc.api import GcStatusApi, LeaseKeeper
from berth_agent.gc.run import GcRunner
from berth_agent.kube.lease import ReloadLease
from berth_api import GC_PROXY_MESSAGE, GC_STORAGE_MESSAGE, GarbageCollectionRun
from berth_api.leases import gc_lease_name
from support.common.polling import until, wait_for
from support.registries.gc import gc_outcome
from support.registries.pod import filesystem_spec
from support.registries.replicas import create_registry

REGISTRIES = "berth.dev/v1alpha1/registries"
LEASES = "coordination.k8s.io/v1/leases"
SUMMARY = "7 blobs marked, 3 blobs and 0 manifests eligible for deletion\n"


def stamp(offset: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset))


@dataclass
class Command:
    kube_api: object
    wait_for_stop: bool = False
    calls: list = field(default_factory=list)
    orphans_stopped: int = 0

    def run(self, run_id, *, dry_run, delete_untagged, stop, timeout_seconds):
        status = self.kube_api.get(REGISTRIES, "default", "reg")["status"]
        self.calls.append((run_id, dry_run, delete_untagged, timeout_seconds, status))
        if self.wait_for_stop:
            assert stop.wait(30)
            return gc_outcome(exit_status=None, stopped=True, error="stopped")
        return gc_outcome(report=gc_report.parse(SUMMARY, dry_run=dry_run, exit_code=0))

    def stop_orphan(self, timeout=15.0):
        self.orphans_stopped += 1
        return None


class Reporter:
    def __init__(self):
        self.events = []

    async def event(self, reason, message, *, warning=False):
        self.events.append((reason, message, warning))


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture(scope="module")
def loop():
    """An event loop in a thread, as the agent's: the runner posts its Events there."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


@pytest.fixture
def reg(kube_api):
    create_registry(kube_api, filesystem_spec(5000))  # and its Leases, from the operator's builders
    return kube_api


def request(kube_api, **overrides):
    body = {"id": "r1", "trigger": "manual", "requestedAt": stamp(0), "dryRun": False, "deleteUntagged": False,
            "readOnlyTimeout": "10m", "deadline": stamp(720), **overrides}
    kube_api.patch(REGISTRIES, "default", "reg", {"status": {"garbageCollection": {"request": body}}},
                   subresource="status")


def ack(kube_api, pod, request_id="r1"):
    kube_api.patch(REGISTRIES, "default", "reg", {"status": {"agents": {pod: {"readOnlyFor": request_id}}}},
                   subresource="status")


@pytest.fixture
def runner(reg, loop, tmp_path):
    """runner(command, reporter, pod=..., clock=..., **options): an agent's GcRunner on the test API server."""
    def make(command, reporter, pod="pod-a", clock=None, config=None, **options):
        client = reg.agent_client()
        storage = {"filesystem": {"rootdirectory": str(tmp_path)}, **(config or {})}
        for name in ("repositories", "blobs"):  # something was pushed (nothing at all: see the test below)
            (tmp_path / "docker/registry/v2" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "config.yml").write_text(yaml.safe_dump({"version": 0.1, "storage": storage}))
        lease = ReloadLease(client, "default", gc_lease_name("reg"), pod, **({"clock": clock} if clock else {}))
        return GcRunner(GcStatusApi(client, "default", "reg"), lease, command, reporter, pod, tmp_path,
                        tmp_path / "config.yml", ack_poll_seconds=0.05, loop=loop, **options)

    return make


def gc(kube_api):
    return kube_api.get(REGISTRIES, "default", "reg")["status"]["garbageCollection"]


def attempt_in_background(worker, reached) -> threading.Thread:
    """worker.attempt() in a thread (it blocks for the whole run); returns once reached() holds (10 s at most)."""
    thread = threading.Thread(target=worker.attempt)
    thread.start()
    wait_for(reached, "the run to get that far", 10, 0.02)
    return thread


def test_the_runner_waits_for_every_acknowledgement_then_records_the_result(reg, runner):
    ack(reg, "pod-a", "r0")  # an earlier run's acknowledgement
    ack(reg, "pod-b", "r0")
    request(reg, deleteUntagged=True)
    command, reporter = Command(reg), Reporter()
    worker = runner(command, reporter)
    thread = attempt_in_background(worker, lambda: (gc(reg).get("active") or {}).get("phase") == "SwitchingReadOnly")
    assert reg.get(LEASES, "default", "reg-gc")["spec"]["holderIdentity"] == "pod-a"
    ack(reg, "pod-a")
    time.sleep(0.3)
    assert command.calls == []  # pod-b has not acknowledged: never before
    ack(reg, "pod-b")
    thread.join(20)
    assert not thread.is_alive()

    [(run_id, dry_run, delete_untagged, timeout, status)] = command.calls
    assert (run_id, dry_run, delete_untagged) == ("r1", False, True) and 500 < timeout <= 600
    assert {p: a["readOnlyFor"] for p, a in status["agents"].items()} == {"pod-a": "r1", "pod-b": "r1"}
    assert status["garbageCollection"]["active"]["phase"] == "Collecting"
    after = gc(reg)
    assert after.get("active") is None
    run = GarbageCollectionRun.model_validate(after["lastRun"])
    assert (run.id, run.result, run.runner, run.blobs_marked, run.blobs_deleted) == ("r1", "Succeeded", "pod-a", 7, 3)
    assert run.bytes_freed == 0  # filesystem storage, measured: nothing was on the data path
    assert "holderIdentity" not in reg.get(LEASES, "default", "reg-gc")["spec"]  # released
    [(reason, message, warning)] = reporter.events
    assert reason == "GarbageCollectionStarted" and "r1" in message and "delete untagged" in message and not warning


def test_only_one_agent_runs_a_request(reg, runner):
    request(reg)
    ack(reg, "pod-a")
    command_a, command_b = Command(reg, wait_for_stop=True), Command(reg)
    a = runner(command_a, Reporter(), "pod-a")
    b = runner(command_b, Reporter(), "pod-b")
    thread = attempt_in_background(a, lambda: command_a.calls)
    b.attempt()  # the Lease is pod-a's: nothing happens
    assert command_b.calls == [] and gc(reg)["active"]["runner"] == "pod-a"
    a.stop()  # the agent stops: the command is stopped, the run recorded as interrupted
    thread.join(20)
    last = gc(reg)["lastRun"]
    assert last["result"] == "Interrupted" and last["message"] == "the agent in pod pod-a stopped during the run"


def test_a_taker_records_a_dead_runs_interruption(reg, runner):
    request(reg)
    reg.patch(REGISTRIES, "default", "reg", {"status": {"garbageCollection": {"active": {
        "id": "r1", "runner": "pod-dead", "startedAt": stamp(-5), "phase": "Collecting"}}}}, subresource="status")
    ReloadLease(reg.agent_client(), "default", "reg-gc", "pod-dead").try_acquire(15)
    clock = Clock()
    command, reporter = Command(reg), Reporter()
    taker = runner(command, reporter, "pod-b", clock=clock)
    taker.attempt()
    assert command.orphans_stopped == 0 and gc(reg).get("lastRun") is None  # the Lease is still good
    clock.now += 16  # its holder left it unrenewed for longer than leaseDurationSeconds
    taker.attempt()
    assert command.orphans_stopped == 1 and command.calls == []
    after = gc(reg)
    assert after.get("active") is None
    assert after["lastRun"]["result"] == "Interrupted" and after["lastRun"]["runner"] == "pod-dead"
    assert after["lastRun"]["message"] == "the runner in pod pod-dead stopped"
    [(reason, _message, warning)] = reporter.events
    assert reason == "GarbageCollectionInterrupted" and warning


def test_acknowledgements_that_never_come_end_the_run_timed_out(reg, runner):
    request(reg, deadline=stamp(61.5))  # the bound: a minute before the deadline, 1.5 s from now
    reg.patch(REGISTRIES, "default", "reg", {"status": {"readyReplicas": 2}}, subresource="status")
    ack(reg, "pod-a")  # one record, two ready replicas
    command = Command(reg)
    runner(command, Reporter()).attempt()
    last = gc(reg)["lastRun"]
    assert command.calls == [] and last["result"] == "TimedOut"
    assert "1 of at least 2 replicas serve read-only" in last["message"]


def test_a_lost_lease_stops_the_command_and_records_nothing(reg, runner):
    request(reg)
    ack(reg, "pod-a")
    command = Command(reg, wait_for_stop=True)
    worker = runner(command, Reporter(), renew_seconds=0.1)
    thread = attempt_in_background(worker, lambda: command.calls)
    lease = reg.get(LEASES, "default", "reg-gc")
    reg.patch(LEASES, "default", "reg-gc", {"spec": {"holderIdentity": "pod-other"}})  # taken over meanwhile
    thread.join(20)
    assert not thread.is_alive() and lease["spec"]["holderIdentity"] == "pod-a"
    after = gc(reg)
    assert after.get("lastRun") is None and after["active"]["phase"] == "Collecting"  # for the taker to record
    assert reg.get(LEASES, "default", "reg-gc")["spec"]["holderIdentity"] == "pod-other"


def test_the_lease_keeper_gives_up_before_the_lease_would_expire_when_renewals_fail(reg):
    lease = ReloadLease(reg.agent_client(), "default", "reg-gc", "pod-a")
    assert lease.try_acquire(15)[0]
    reg.delete(LEASES, "default", "reg-gc")  # every renewal now fails (404)
    stop = threading.Event()
    keeper = LeaseKeeper(lease, stop, renew_seconds=0.05, lease_seconds=3.2)
    started = time.monotonic()
    keeper.start()
    assert stop.wait(10) and keeper.lost.is_set()
    assert time.monotonic() - started >= 3.2 - 3.0 - 0.05


def test_after_a_run_the_redis_blob_descriptor_cache_is_cleared(reg, runner, redis_server):
    """A descriptor of a deleted blob left in redis makes the registry answer HEAD 200 for it (gc_cache.py)."""
    redis_server.command("HSET", "blobs::sha256:" + "b" * 64, "size", "3", db=2)
    redis_server.command("SET", "unrelated", "kept", db=2)
    request(reg)
    ack(reg, "pod-a")
    cache = {"cache": {"blobdescriptor": "redis"}}
    redis = {"addr": f"127.0.0.1:{redis_server.port}", "password": redis_server.password, "db": 2}
    worker = runner(Command(reg), Reporter(), config=cache)
    config = yaml.safe_load((worker.config_path).read_text())
    worker.config_path.write_text(yaml.safe_dump({**config, "redis": redis}))
    worker.attempt()
    assert gc(reg)["lastRun"]["result"] == "Succeeded"
    assert redis_server.command("KEYS", "*", db=2) == [b"unrelated"]

    redis_server.stop()  # unreachable: the run is reported Failed, saying why
    request(reg, id="r2")
    ack(reg, "pod-a", "r2")
    worker.attempt()
    last = gc(reg)["lastRun"]
    assert (last["id"], last["result"]) == ("r2", "Failed")
    assert "blob descriptor cache" in last["message"] and redis_server.password not in last["message"]


def test_a_store_never_pushed_to_is_collected_without_running_the_command(reg, runner, tmp_path):
    """Both majors' garbage-collect fail on it ("Path not found: /docker/registry/v2/repositories")."""
    request(reg)
    ack(reg, "pod-a")
    command = Command(reg)
    worker = runner(command, Reporter())
    shutil.rmtree(tmp_path / "docker")
    worker.attempt()
    last = gc(reg)["lastRun"]
    assert command.calls == [] and last["result"] == "Succeeded", last
    assert (last["blobsMarked"], last["blobsDeleted"], last["bytesFreed"]) == (0, 0, 0)
    assert last["message"] == "nothing to collect: the storage holds no repository yet"


def test_a_request_on_in_memory_storage_is_refused_without_running_the_command(reg, runner):
    """A hand-written request (the operator never asks, the CRD refuses garbageCollection on inmemory): a
    garbage-collect process would see an empty store of its own and the run would claim nothing to collect."""
    reg.patch(REGISTRIES, "default", "reg", {"spec": {"config": {"storage": {"filesystem": None, "inmemory": {}}}}})
    request(reg)
    ack(reg, "pod-a")
    command = Command(reg)
    runner(command, Reporter()).attempt()
    last = gc(reg)["lastRun"]
    assert command.calls == [] and last["result"] == "Failed", last
    assert last["message"] == f"not run: {GC_STORAGE_MESSAGE}" and last.get("blobsDeleted") is None, last
    assert gc(reg).get("active") is None


def test_a_request_on_a_pull_through_cache_is_refused_without_running_the_command(reg, runner):
    """A hand-written request on a proxy (the CRD refuses garbageCollection there): refused, no command run."""
    reg.patch(REGISTRIES, "default", "reg", {"spec": {"config": {"proxy": {"remoteURL": "https://ghcr.io"}}}})
    request(reg)
    ack(reg, "pod-a")
    command = Command(reg)
    runner(command, Reporter()).attempt()
    last = gc(reg)["lastRun"]
    assert command.calls == [] and last["result"] == "Failed", last
    assert last["message"] == f"not run: {GC_PROXY_MESSAGE}", last


def test_the_loop_runs_a_request_it_is_offered_and_a_cancel_stops_a_running_command(reg, runner):
    """run(): woken by the pipeline's Registry reads; cancelled (the agent stops), a running command is stopped
    and its run recorded Interrupted."""
    request(reg)
    ack(reg, "pod-a")
    command = Command(reg, wait_for_stop=True)
    worker = runner(command, Reporter(), try_seconds=0.1)

    async def scenario():
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.2)
        assert command.calls == []  # nothing offered yet: the runner idles
        worker.offer(reg.get(REGISTRIES, "default", "reg"))
        await until(lambda: command.calls, "the offered run's command", 10, 0.02)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    # the worker thread finishes the run
    wait_for(lambda: (gc(reg).get("lastRun") or {}).get("result") == "Interrupted", "lastRun Interrupted", 10, 0.02)
    assert gc(reg).get("active") is None
