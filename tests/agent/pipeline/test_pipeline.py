"""The pipeline in process, against the real supervisor and registry: debounce, hash compare, agent restart."""

from __future__ import annotations

import asyncio
import logging
import time

import yaml

from berth_agent.core.health import Health
from berth_agent.pipeline.coordinator import Pipeline, PipelineSettings
from berth_agent.pipeline.report import LogReporter
from berth_agent.restart.endpoint import Endpoint
from berth_agent.restart.probe import answers
from berth_agent.sources import Change
from support.common.clock import SteppedClock
from support.common.polling import wait_for
from support.registries.pod import filesystem_spec, registry_object
from support.registries.secretdir import swap_secret_dir, write_secret_dir


def _registry(port: int, host: str = "127.0.0.1") -> dict:
    spec = filesystem_spec(port, http={"addr": f"{host}:{port}", "drainTimeout": "5s",
                                       "secret": {"name": "http", "field": "secret"}})
    return registry_object(spec)


def test_a_burst_of_100_events_within_a_second_restarts_once(tmp_path, supervisor_factory, registry_port):
    mounts, config_dir = tmp_path / "mounts", tmp_path / "config"
    config_dir.mkdir()
    write_secret_dir(mounts / "http-secret", {"secret": "first"})
    supervisor = supervisor_factory(config_dir=config_dir)
    health = Health()
    settings = PipelineSettings(config_dir=config_dir, data_dir=tmp_path / "data", mount_root=mounts)
    (tmp_path / "data").mkdir()
    # The debounce runs on a clock the test steps: the burst's gaps are 10 ms exactly, however loaded the machine
    # (in real time a stalled 10 ms sleep opened the quiet window and gave a second apply).
    clock = SteppedClock()
    pipeline = Pipeline(settings, LogReporter("test"), health, clock=clock)

    async def scenario() -> None:
        queue: asyncio.Queue[Change] = asyncio.Queue()
        task = asyncio.create_task(pipeline.run(queue))
        queue.put_nowait(Change("registry", registry=_registry(registry_port)))
        await clock.step_when_waiting(settings.quiet_seconds)
        await asyncio.to_thread(wait_for, lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200,
                                "the registry to answer")
        assert health.startup_ok()
        applies_before = pipeline.applies

        # 100 events over one second; the Secret changes several times along the way, the last one counts.
        for i in range(100):
            if i % 25 == 0:
                swap_secret_dir(mounts / "http-secret", {"secret": f"value-{i}"})
            queue.put_nowait(Change("mount:http-secret"))
            await clock.handed_over(queue)
            clock.step(0.01)
        assert pipeline.applies == applies_before  # 1 s of events, 10 ms apart: still in the burst
        await clock.step_when_waiting(settings.quiet_seconds)  # the quiet window ends the burst
        await asyncio.to_thread(wait_for, lambda: "value-75" in (config_dir / "config.yml").read_text(),
                                "value-75 in config.yml")
        await asyncio.to_thread(wait_for, lambda: pipeline.applier.current is not None
                                and b"value-75" in pipeline.applier.current.config, what="the apply to finish")
        clock.step(3.0)  # past the debounce's maximum wait: room for a second apply to show
        await asyncio.sleep(0.5)
        assert pipeline.applies == applies_before + 1
        assert not clock.waiting() and queue.empty()  # nothing left that could start another round
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    assert supervisor.log().count("started registry") == 2  # the first start and exactly one restart
    assert yaml.safe_load((config_dir / "config.yml").read_text())["http"]["secret"] == "value-75"


def test_an_unchanged_render_does_nothing(tmp_path, supervisor_factory, registry_port):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (tmp_path / "data").mkdir()
    write_secret_dir(tmp_path / "mounts" / "http-secret", {"secret": "s"})
    supervisor = supervisor_factory(config_dir=config_dir)
    pipeline = Pipeline(PipelineSettings(config_dir=config_dir, data_dir=tmp_path / "data",
                                         mount_root=tmp_path / "mounts"), LogReporter("test"), Health())

    async def scenario() -> None:
        pipeline.registry = _registry(registry_port)
        await pipeline.apply_once()
        await asyncio.to_thread(wait_for, lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200,
                                "the registry to answer")
        mtime = (config_dir / "config.yml").stat().st_mtime_ns
        for _ in range(3):  # resyncs
            await pipeline.apply_once()
        assert (config_dir / "config.yml").stat().st_mtime_ns == mtime

    asyncio.run(scenario())
    assert supervisor.log().count("started registry") == 1


def test_a_restarted_agent_adopts_the_running_config_without_restarting_the_registry(pod):
    write_secret_dir(pod.mounts / "http-secret", {"secret": "s"})
    pod.write_registry_file(_registry(pod.port))
    pod.start_agent()
    pod.start_supervisor()
    pod.wait_serving()
    pid = pod.registry_pid()
    assert pod.stop_agent() == 0

    # The kubelet restarts the agent container (e.g. after a failed liveness probe); the registry runs on.
    pod.start_agent()
    wait_for(lambda: pod.actions("config on disk is current"), what="the agent to adopt the config")
    wait_for(lambda: pod.health("/startupz") == 200, what="startup to pass again")
    time.sleep(0.5)
    assert pod.registry_pid() == pid and pod.registry_starts() == 1
    assert pod.actions("restarted") == []


def test_a_restarted_agent_rolls_back_to_the_files_on_disk_when_its_new_config_fails(pod):
    write_secret_dir(pod.mounts / "http-secret", {"secret": "s"})
    pod.write_registry_file(_registry(pod.port))
    pod.start_agent()
    pod.start_supervisor()
    pod.wait_serving()
    assert pod.stop_agent() == 0
    good = (pod.config_dir / "config.yml").read_bytes()

    # While no agent runs, the Registry changes to an address someone else holds; the new agent has no memory
    # of the last good config, only the files on disk, which the running registry uses. Same port on another
    # loopback address: the pre-flight leaves an unchanged port to the restart (the running registry holds
    # it), so this is a config only the registry itself refuses.
    import socket

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.2", pod.port))
        squatter.listen()
        pod.write_registry_file(_registry(pod.port, host="127.0.0.2"))
        pod.start_agent()
        wait_for(lambda: pod.actions("rolled back"), timeout=40, what=lambda: f"a rollback\n{pod.agent_log_text()}")
        wait_for(pod.serving, what="the registry on the config it had")
    assert (pod.config_dir / "config.yml").read_bytes() == good
    assert pod.metric("rollbacks_total") == 1
    # docs/guide/local-run.md names the action as the log does: msg and action agree on every action line.
    [rollback] = pod.actions("rolled back")
    assert rollback["action"] == "rolled back" and rollback["restored_hash"]
    assert all(line["action"] == line["msg"] for line in pod.agent_lines() if "action" in line)


def test_a_cancel_that_lands_with_a_change_still_stops_the_pipeline(tmp_path):
    """On Python 3.11 asyncio.wait_for can swallow a cancel that arrives as the queue yields an item; the
    pipeline's debounce then kept running and the agent could not stop."""
    settings = PipelineSettings(config_dir=tmp_path / "config", data_dir=tmp_path / "data",
                                mount_root=tmp_path / "mounts", quiet_seconds=30.0, max_wait_seconds=60.0)

    async def scenario() -> None:
        for attempt in range(5):
            pipeline = Pipeline(settings, LogReporter("test"), Health())
            queue: asyncio.Queue[Change] = asyncio.Queue()
            task = asyncio.create_task(pipeline.run(queue))
            queue.put_nowait(Change("resync"))  # the first Change; the debounce now waits for more
            for _ in range(3 + attempt):
                await asyncio.sleep(0)
            queue.put_nowait(Change("resync"))
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=10)
            assert done, f"the pipeline ignored the cancel (attempt {attempt})"

    asyncio.run(scenario())


def test_the_data_path_is_probed_only_for_filesystem_storage(tmp_path, supervisor_factory, registry_port):
    """Object and in-memory storage have no PVC: the probe stays off, so no 'data path unusable' warning and no
    pvc_ok 0 for them; filesystem storage turns it on, and a missing data path is then the error reported.
    (A supervisor runs: the first config counts as applied only once a registry answers on it.)"""
    from berth_agent.sources.pvc import PvcProbe

    health = Health()
    missing = tmp_path / "no-pvc-here"
    probe = PvcProbe(missing, health, enabled=False)
    settings = PipelineSettings(config_dir=tmp_path / "config", data_dir=missing, mount_root=tmp_path / "mounts")
    (tmp_path / "config").mkdir()
    pipeline = Pipeline(settings, LogReporter("test"), health, pvc=probe)
    supervisor_factory(config_dir=tmp_path / "config")
    inmemory = {"distribution": "2", "config": {"storage": {"inmemory": {}}},
                "http": {"addr": f"127.0.0.1:{registry_port}"}}

    async def scenario() -> None:
        pipeline._absorb(Change("registry", registry=registry_object(inmemory)))
        await pipeline.apply_once()
        assert probe.enabled is False
        assert pipeline.reported_error is None
        assert (tmp_path / "config" / "config.yml").exists()

        pipeline._absorb(Change("registry", registry=_registry(registry_port)))  # filesystem on the missing path
        await pipeline.apply_once()
        assert probe.enabled is True
        assert pipeline.reported_error is not None and str(missing) in pipeline.reported_error

    asyncio.run(scenario())


def test_a_gc_request_turns_the_registry_read_only_until_its_deadline_by_the_pipelines_own_timer(
        tmp_path, supervisor_factory, registry_port):
    """A1/A2 in process: a standing request renders readonly (the hot reload) and is acknowledged; at its deadline
    the pipeline's own timer renders the spec's readonly again, with no other Change (operator and runner gone)."""
    from berth_agent.gc.ack import GcAck
    from berth_agent.gc.read_only import GcReadOnly

    config_dir, data = tmp_path / "config", tmp_path / "data"
    config_dir.mkdir()
    data.mkdir()
    write_secret_dir(tmp_path / "mounts" / "http-secret", {"secret": "s"})
    supervisor = supervisor_factory(config_dir=config_dir)
    writes: list[str | None] = []

    async def write(request_id):
        writes.append(request_id)
        return True

    settings = PipelineSettings(config_dir=config_dir, data_dir=data, mount_root=tmp_path / "mounts")
    ack = GcAck(write, "pod-a", config_dir / "config.yml",
                lambda: pipeline.applier.current.config if pipeline.applier.current else None, poll_seconds=0.05)
    pipeline = Pipeline(settings, LogReporter("test"), Health(), gc=GcReadOnly(ack))
    registry = _registry(registry_port)
    deadline_at = int(time.time()) + 5
    deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline_at))
    registry["status"] = {"garbageCollection": {"request": {
        "id": "r1", "trigger": "manual", "readOnlyTimeout": "1m", "deadline": deadline}}}

    def read_only() -> bool:
        return yaml.safe_load((config_dir / "config.yml").read_text())["storage"]["maintenance"]["readonly"]["enabled"]

    async def scenario() -> None:
        queue: asyncio.Queue[Change] = asyncio.Queue()
        task = asyncio.create_task(pipeline.run(queue))
        queue.put_nowait(Change("registry", registry=registry))
        await asyncio.to_thread(wait_for, lambda: writes == ["r1"], "the acknowledgement", 20)
        assert read_only() and answers(Endpoint("127.0.0.1", registry_port)) == 200
        await asyncio.to_thread(wait_for, lambda: writes == ["r1", None], "writable at the deadline", 30)
        assert not read_only() and time.time() >= deadline_at
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    # The first config was read-only already (a pod starting while a request stands), then one restart.
    assert supervisor.log().count("started registry") == 2


class RecordingReporter(LogReporter):
    """Keeps every applied record the pipeline asks for; refuses the writes the test tells it to (as an API
    server answering 500 would)."""

    def __init__(self) -> None:
        super().__init__("test")
        self.applied_records: list[tuple[str, int | None]] = []
        self.refuse = 0

    async def applied(self, identity: str, generation: int | None) -> bool:
        self.applied_records.append((identity, generation))
        if self.refuse:
            self.refuse -= 1
            return False
        return True


def test_each_generation_served_is_reported_once_whether_or_not_it_restarted(tmp_path, supervisor_factory,
                                                                               registry_port):
    """The record rule (docs/decisions/0017-status-records-and-ready.md): a new generation rendering what runs is
    reported at once with no restart; the same generation again is not rewritten; a refused write is made again on the
    next round."""
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (tmp_path / "data").mkdir()
    write_secret_dir(tmp_path / "mounts" / "http-secret", {"secret": "s"})
    supervisor = supervisor_factory(config_dir=config_dir)
    reporter = RecordingReporter()
    pipeline = Pipeline(PipelineSettings(config_dir=config_dir, data_dir=tmp_path / "data",
                                         mount_root=tmp_path / "mounts"), reporter, Health())

    def at(generation: int, **spec_changes) -> dict:
        obj = _registry(registry_port)
        obj["metadata"]["generation"] = generation
        obj["spec"].update(spec_changes)
        return obj

    async def scenario() -> None:
        pipeline.registry = at(1)
        await pipeline.apply_once()
        await asyncio.to_thread(wait_for, lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200,
                                "the registry to answer")
        first_hash = pipeline.applier.current.identity
        assert reporter.applied_records == [(first_hash, 1)]

        pipeline.registry = at(2, replicas=3)  # not rendered: the same config
        await pipeline.apply_once()
        assert reporter.applied_records[-1] == (first_hash, 2)
        for _ in range(3):  # resyncs: nothing new to say
            await pipeline.apply_once()
        assert len(reporter.applied_records) == 2

        reporter.refuse = 1
        pipeline.registry = at(3, resources={"limits": {"memory": "1Gi"}})
        await pipeline.apply_once()  # the write is refused
        await pipeline.apply_once()  # the next round (the retry timer's, or a resync) writes it again
        assert reporter.applied_records[-2:] == [(first_hash, 3), (first_hash, 3)]
        await pipeline.apply_once()
        assert len(reporter.applied_records) == 4

    asyncio.run(scenario())
    assert supervisor.log().count("started registry") == 1


def test_a_refused_input_replaced_by_a_good_one_is_logged_recovered_once_at_info(tmp_path, supervisor_factory,
                                                                                registry_port, caplog):
    """The pod back on a good state after a refused input says so at INFO (it was DEBUG only), once,
    naming the state it serves and the error it clears."""
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (tmp_path / "data").mkdir()
    write_secret_dir(tmp_path / "mounts" / "http-secret", {"secret": "s"})
    supervisor_factory(config_dir=config_dir)
    pipeline = Pipeline(PipelineSettings(config_dir=config_dir, data_dir=tmp_path / "data",
                                         mount_root=tmp_path / "mounts"), LogReporter("test"), Health())
    caplog.set_level(logging.INFO, logger="berth_agent.pipeline")

    def recovered() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.getMessage() == "recovered"]

    async def scenario() -> None:
        pipeline.registry = _registry(registry_port)
        await pipeline.apply_once()
        await asyncio.to_thread(wait_for, lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200,
                                "the registry to answer")
        served = pipeline.applier.current.identity
        assert recovered() == []  # nothing was refused yet

        bad = _registry(registry_port)
        bad["spec"]["config"]["log"]["level"] = "loud"
        pipeline.registry = bad
        await pipeline.apply_once()
        assert pipeline.reported_error and "spec.config.log.level" in pipeline.reported_error
        assert recovered() == []

        pipeline.registry = _registry(registry_port)  # the input fixed: the state that never stopped serving
        for _ in range(3):  # and resyncs after it: said once
            await pipeline.apply_once()
        (line,) = recovered()
        assert line.levelno == logging.INFO
        assert line.fields["config_hash"] == served and "spec.config.log.level" in line.fields["cleared"]

    asyncio.run(scenario())
