"""The pipeline's bounds: a render overtaken by a newer input is never applied, a render that never
returns does not hold the loop and turns /livez red, and an I/O failure is reported with its errno and path.

In process, with the real Applier, berth-supervise and registry; the one thing a test changes is *when* something
happens: a Pipeline subclass swaps a Secret or blocks right inside the render stage, which a real slow read
would do at an unpredictable moment.
"""

from __future__ import annotations

import asyncio
import threading

import yaml

from berth_agent.core.health import Health
from berth_agent.pipeline.coordinator import Pipeline, PipelineSettings
from berth_agent.pipeline.render_step import RenderStep
from berth_agent.pipeline.report import LogReporter
from berth_agent.restart.endpoint import Endpoint
from berth_agent.restart.probe import answers
from berth_agent.sources import Change
from support.common.polling import wait_for
from support.registries.pod import filesystem_spec, registry_object
from support.registries.secretdir import swap_secret_dir, write_secret_dir


def _registry(port: int) -> dict:
    return registry_object(filesystem_spec(port, http={"addr": f"127.0.0.1:{port}", "drainTimeout": "5s",
                                                       "secret": {"name": "http", "field": "secret"}}))


def _settings(tmp_path, **extra) -> PipelineSettings:
    for name in ("config", "data"):
        (tmp_path / name).mkdir(exist_ok=True)
    return PipelineSettings(config_dir=tmp_path / "config", data_dir=tmp_path / "data",
                            mount_root=tmp_path / "mounts", **extra)


class Recorder(LogReporter):
    """LogReporter that also keeps the errors it reported."""

    def __init__(self) -> None:
        super().__init__("test")
        self.errors: list[str] = []

    async def failed(self, error: str, generation: int | None) -> bool:
        self.errors.append(error)
        return await super().failed(error, generation)


def _secret_in_config(tmp_path) -> str:
    return yaml.safe_load((tmp_path / "config" / "config.yml").read_text())["http"]["secret"]


def test_a_render_overtaken_by_a_newer_input_is_never_applied(tmp_path, supervisor_factory, registry_port):
    secret_dir = write_secret_dir(tmp_path / "mounts" / "http-secret", {"secret": "first"})
    supervisor = supervisor_factory(config_dir=tmp_path / "config")
    written: list[str] = []

    class SwapDuringRender(RenderStep):
        overtake = False

        def _render(self, registry, registry_error):
            result = super()._render(registry, registry_error)
            if self.overtake:  # the read is done; a newer Secret lands before the write
                self.overtake = False
                swap_secret_dir(secret_dir, {"secret": "newer"})
            return result

    settings = _settings(tmp_path)
    pipeline = Pipeline(settings, LogReporter("test"), Health())
    renderer = pipeline.renderer = SwapDuringRender(settings, Health())  # the render step, swapping a Secret
    original_apply = pipeline.applier.apply

    def apply(rendered, turn=None):  # what reaches the applier, in order
        written.append(yaml.safe_load(rendered.config)["http"]["secret"])
        return original_apply(rendered, turn)

    pipeline.applier.apply = apply

    async def scenario() -> None:
        pipeline.registry = _registry(registry_port)
        await pipeline.apply_once()
        await asyncio.to_thread(wait_for, lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200,
                                "the registry to answer")

        swap_secret_dir(secret_dir, {"secret": "stale"})
        renderer.overtake = True
        await pipeline.apply_once()

    asyncio.run(scenario())
    assert written == ["first", "newer"], "the stale render reached the applier"
    assert _secret_in_config(tmp_path) == "newer"
    assert supervisor.log().count("started registry") == 2  # the first start and one restart, onto "newer"
    assert answers(Endpoint("127.0.0.1", registry_port)) == 200


def test_a_render_that_does_not_return_is_bounded_and_turns_livez_red(tmp_path, supervisor_factory, registry_port):
    write_secret_dir(tmp_path / "mounts" / "http-secret", {"secret": "first"})
    supervisor = supervisor_factory(config_dir=tmp_path / "config")
    release = threading.Event()
    health = Health()
    reporter = Recorder()

    class StuckRead(RenderStep):
        stuck = False

        def _render(self, registry, registry_error):
            if self.stuck:
                release.wait(120)  # a read on a hung volume
            return super()._render(registry, registry_error)

    settings = _settings(tmp_path, render_timeout=1.0)
    pipeline = Pipeline(settings, reporter, health)
    renderer = pipeline.renderer = StuckRead(settings, health)  # the render step, on a hung volume

    async def scenario() -> None:
        pipeline.registry = _registry(registry_port)
        await pipeline.apply_once()
        await asyncio.to_thread(wait_for, lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200,
                                "the registry to answer")
        assert health.live_ok()

        renderer.stuck = True
        await pipeline.apply_once()  # returns after the bound, not when the read does
        assert "did not finish within 1s" in reporter.errors[-1]
        await asyncio.to_thread(wait_for, lambda: any(s.startswith("render ") for s in health.stale_loops()),
                                what="/livez to name the stuck render")
        await pipeline.apply_once()  # a resync meanwhile starts no second thread
        assert "has not finished" in reporter.errors[-1]
        assert answers(Endpoint("127.0.0.1", registry_port)) == 200  # the last good config keeps serving

        renderer.stuck = False
        release.set()
        await asyncio.to_thread(wait_for, health.live_ok, what="/livez green once the read returned")
        pipeline.registry["spec"]["config"]["log"]["level"] = "debug"
        await pipeline.apply_once()
        assert pipeline.reported_error is None

    asyncio.run(scenario())
    assert supervisor.log().count("started registry") == 2
    assert "level: debug" in (tmp_path / "config" / "config.yml").read_text()


def test_a_write_failure_names_the_errno_and_the_path(tmp_path):
    write_secret_dir(tmp_path / "mounts" / "http-secret", {"secret": "never-in-the-error"})
    settings = _settings(tmp_path, retry_seconds=3600)
    (tmp_path / "config" / "config.yml").mkdir()  # whatever the volume's problem, open(2) fails with an errno
    reporter = Recorder()
    pipeline = Pipeline(settings, reporter, Health())

    async def scenario() -> None:
        queue: asyncio.Queue[Change] = asyncio.Queue()
        task = asyncio.create_task(pipeline.run(queue))
        queue.put_nowait(Change("registry", registry=_registry(5999)))
        await asyncio.to_thread(wait_for, lambda: reporter.errors, what="the failure to be reported")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    [error] = reporter.errors
    assert error.startswith(f"internal error IsADirectoryError EISDIR writing {tmp_path}/config/config.yml "), error
    assert "never-in-the-error" not in error


def test_every_failure_to_read_the_registry_counts_as_a_render_error(tmp_path):
    """An empty file or invalid YAML never reaches validation, yet it is a Registry that cannot be rendered."""
    from prometheus_client import REGISTRY

    from berth_agent.sources.registry_file import read_registry_file

    def count() -> float:
        return REGISTRY.get_sample_value("berth_agent_render_errors_total", {"source": "registry"}) or 0.0

    pipeline = Pipeline(_settings(tmp_path), LogReporter("test"), Health())
    before = count()
    for content in ("", "spec: [unclosed\n", "kind: Deployment\n"):
        (tmp_path / "r.yaml").write_text(content)
        obj, error = read_registry_file(tmp_path / "r.yaml")
        pipeline._absorb(Change("registry", registry=obj, error=error))
    assert count() == before + 3


def test_looking_for_a_pending_newer_input_keeps_the_queue_as_it_was():
    from berth_agent.pipeline.guard import newer_input_pending

    async def scenario() -> None:
        for newer in (Change("registry", registry={"spec": {}}), Change("secret:cosi", error="unreadable")):
            queue: asyncio.Queue[Change] = asyncio.Queue()
            assert not newer_input_pending(queue)
            changes = [Change("mount:tls"), Change("resync")]
            for change in changes:
                queue.put_nowait(change)
            assert not newer_input_pending(queue)
            changes.append(newer)
            queue.put_nowait(newer)
            assert newer_input_pending(queue)  # a Registry edit or a Secret read over the API
            assert [queue.get_nowait() for _ in range(queue.qsize())] == changes

    asyncio.run(scenario())
