"""RegistryApiWatcher against the test API server (kmock plus our gap fillers, real HTTP on 127.0.0.1),
through the agent's own API client (berth_agent.kube.client) for the server's host; faults are injected
server-side."""

from __future__ import annotations

import asyncio
import contextlib
import copy

import pytest

from berth_agent.core import metrics
from berth_agent.kube.api import describe_api_error
from berth_agent.sources.kube_watch import Backoff, content_digest
from berth_agent.sources.registry_api import RegistryApiWatcher
from support.common.polling import until
from support.registries.sources import running

REGISTRIES = "berth.dev/v1alpha1/registries"
REGISTRY = {
    "apiVersion": "berth.dev/v1alpha1",
    "kind": "Registry",
    "metadata": {"name": "reg", "namespace": "default"},
    "spec": {"config": {"log": {"level": "info"}, "storage": {"inmemory": {}}}},
}


@contextlib.asynccontextmanager
async def watching(kube_api, health, changes, name="reg", **options):
    options = {"timeout_seconds": 60, "backoff_initial": 0.05, "backoff_cap": 0.2} | options
    watcher = RegistryApiWatcher(kube_api.agent_client(), "default", name, health, **options)
    async with running(watcher, changes):
        yield watcher


def _level(change):
    return change.registry["spec"]["config"]["log"]["level"] if change.registry else None


def _set_level(kube_api, level):
    kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"config": {"log": {"level": level}}}})


def _sample(metric, **labels) -> float:
    return metric.labels(**labels)._value.get()


@pytest.mark.asyncio
async def test_list_then_watch_spec_changes(kube_api, health, changes):
    kube_api.create(REGISTRY)
    async with watching(kube_api, health, changes) as watcher:
        first = await changes.wait_for(lambda c: c.registry is not None)
        assert first.source == "registry" and first.error is None
        assert first.registry["metadata"]["uid"] and _level(first) == "info"
        await until(lambda: kube_api.open_watches == 1, "the Registry watch open", 20)

        _set_level(kube_api, "debug")
        await changes.wait_for(lambda c: _level(c) == "debug")

        # A status-only write (every agent's own record, the operator's conditions) is not a change...
        kube_api.patch(REGISTRIES, "default", "reg", {"status": {"agents": {"other-pod": {"configHash": "x"}}}},
                       subresource="status")
        _set_level(kube_api, "warn")  # ...as the next spec change, which must come right after, shows
        await changes.wait_for(lambda c: _level(c) == "warn")
        assert [_level(c) for c in changes.snapshot()] == ["info", "debug", "warn"]

        # ...except the garbage-collection keys an agent acts on (gc_mode.status_digest): a request turns it
        # read-only, the runner's result (lastRun.id) back to writable.
        request = {"id": "r1", "deadline": "2026-11-30T10:11:00Z"}
        kube_api.patch(REGISTRIES, "default", "reg", {"status": {"garbageCollection": {"request": request}}},
                       subresource="status")
        seen = await changes.wait_for(lambda c: c.registry is not None and (c.registry.get("status") or {}).get(
            "garbageCollection", {}).get("request", {}).get("id") == "r1")
        assert _level(seen) == "warn"
        kube_api.patch(REGISTRIES, "default", "reg", {"status": {"garbageCollection": {"lastRun": {"id": "r1"}}}},
                       subresource="status")
        await changes.wait_for(lambda c: c.registry is not None and (c.registry.get("status") or {}).get(
            "garbageCollection", {}).get("lastRun", {}).get("id") == "r1")
        assert len(changes.snapshot()) == 5

        # The single object only: another Registry in the namespace is not ours.
        other = copy.deepcopy(REGISTRY)
        other["metadata"]["name"] = "other"
        kube_api.create(other)
        _set_level(kube_api, "error")
        await changes.wait_for(lambda c: _level(c) == "error")
        assert all(c.registry["metadata"]["name"] == "reg" for c in changes.snapshot())
        assert health.live_ok() and "registry-api" in health.registered()
        assert watcher.resource_version

    # The list and watch asked for the one object by name, resuming from the list's resourceVersion.
    requests = [path for method, path in kube_api.requests() if method == "GET" and "registries" in path]
    assert "fieldSelector=metadata.name%3Dreg" in requests[0] and "watch" not in requests[0]
    watch = next(path for path in requests if "watch=" in path)
    assert "resourceVersion=" in watch and "timeoutSeconds=60" in watch


@pytest.mark.asyncio
async def test_dropped_watch_relists_and_still_delivers(kube_api, health, changes):
    kube_api.create(REGISTRY)
    errors_before = _sample(metrics.watch_errors_total, source="registry-api")
    async with watching(kube_api, health, changes):
        await changes.wait_for(lambda c: c.registry is not None)
        for level in ("debug", "warn", "error"):
            await until(lambda: kube_api.open_watches == 1, "the Registry watch open", 20)
            lists_before = _lists(kube_api)
            assert kube_api.drop_watches() == 1
            # A dropped connection means a fresh list.
            await until(lambda lists_before=lists_before: _lists(kube_api) > lists_before, "a relist", 20)
            await until(lambda: kube_api.open_watches == 1, "the Registry watch open again", 20)
            _set_level(kube_api, level)
            await changes.wait_for(lambda c, level=level: _level(c) == level)
        assert [_level(c) for c in changes.snapshot()] == ["info", "debug", "warn", "error"]
    assert _sample(metrics.watch_errors_total, source="registry-api") >= errors_before + 3


@pytest.mark.asyncio
async def test_change_while_disconnected_is_not_lost(kube_api, health, changes):
    kube_api.create(REGISTRY)
    async with watching(kube_api, health, changes):
        await changes.wait_for(lambda c: c.registry is not None)
        await until(lambda: kube_api.open_watches == 1, "the Registry watch open", 20)
        kube_api.fail_next(2, status=503, verb="list")  # the relist fails twice, with backoff in between
        kube_api.drop_watches()
        _set_level(kube_api, "debug")  # made while the agent has no watch open
        await changes.wait_for(lambda c: _level(c) == "debug")
        failed = [c for c in changes.snapshot() if c.error]
        assert failed and failed[0].error == "cannot read Registry default/reg: API answered 503 Service Unavailable"


def _lists(kube_api) -> int:
    return sum(1 for method, path in kube_api.requests()
               if method == "GET" and "/registries?" in path and "watch=" not in path)


@pytest.mark.asyncio
async def test_410_gone_leads_to_a_relist(kube_api, health, changes, caplog):
    caplog.set_level("INFO", logger="berth_agent")
    kube_api.create(REGISTRY)
    restarts_before = _sample(metrics.watch_restarts_total, source="registry-api")
    # A short server timeout: each watch ends cleanly and is reopened from its resourceVersion.
    async with watching(kube_api, health, changes, timeout_seconds=1):
        await changes.wait_for(lambda c: c.registry is not None)
        await until(lambda: kube_api.open_watches == 1, "the Registry watch open", 20)
        lists_before = _lists(kube_api)
        other = copy.deepcopy(REGISTRY)
        other["metadata"]["name"] = "other"
        kube_api.create(other)  # moves the server's resourceVersion past ours (we do not see that object)...
        kube_api.compact()  # ...and forgets the history: resuming from ours is 410 Gone
        await until(lambda: _lists(kube_api) > lists_before, "a relist", 20)
        _set_level(kube_api, "debug")
        await changes.wait_for(lambda c: _level(c) == "debug")
    assert any(r.getMessage() == "watch expired (410 Gone), listing again" for r in caplog.records)
    gone = [path for _, path in kube_api.requests() if "watch=" in path]
    assert len(gone) >= 2 and all("resourceVersion=" in path for path in gone)
    assert _sample(metrics.watch_restarts_total, source="registry-api") >= restarts_before + 1
    assert not [c for c in changes.snapshot() if c.error]  # a 410 is routine, not an error to report


@pytest.mark.asyncio
async def test_missing_then_created_then_deleted(kube_api, health, changes):
    async with watching(kube_api, health, changes):
        missing = await changes.wait_for(lambda c: c.error is not None)
        assert missing.error == "Registry default/reg not found" and missing.registry is None
        kube_api.create(REGISTRY)
        await changes.wait_for(lambda c: c.registry is not None)
        kube_api.delete(REGISTRIES, "default", "reg")
        await changes.wait_for(lambda c: c.error == "Registry default/reg was deleted")


@pytest.mark.asyncio
async def test_cancel_stops_the_watch_thread(kube_api, health, changes):
    import threading

    kube_api.create(REGISTRY)
    async with watching(kube_api, health, changes):
        await changes.wait_for(lambda c: c.registry is not None)
        await until(lambda: kube_api.open_watches == 1, "the Registry watch open", 20)
    # Cancelled in the middle of a blocking read: the thread notices and the connection closes.
    await until(lambda: not [t for t in threading.enumerate() if t.name == "registry-api-watch"],
                "the registry-api-watch thread gone", 20)
    await until(lambda: kube_api.open_watches == 0, "no watch open", 20)
    assert "registry-api" not in health.registered()


@pytest.mark.asyncio
async def test_every_event_is_a_liveness_beat(kube_api, changes):
    from berth_agent.core.health import Health

    class Clock:
        now = 1000.0

        def __call__(self):
            return self.now

    clock = Clock()
    health = Health(clock=clock)
    kube_api.create(REGISTRY)
    async with watching(kube_api, health, changes):
        await changes.wait_for(lambda c: c.registry is not None)
        await until(lambda: kube_api.open_watches == 1, "the Registry watch open", 20)
        await asyncio.sleep(0.5)  # the beat for the opened watch lands just after the server counts it
        clock.now += 10_000  # the idle watch has been silent far too long...
        assert not health.live_ok()
        _set_level(kube_api, "debug")  # ...until an event arrives
        await changes.wait_for(lambda c: _level(c) == "debug")
        assert health.live_ok()
        clock.now += 10_000
        kube_api.drop_watches()  # a reopened watch is progress too (no change to emit)
        await until(health.live_ok, "the watcher live", 20)


def test_content_digest_ignores_status_and_bookkeeping():
    obj = copy.deepcopy(REGISTRY)
    obj["metadata"] |= {"resourceVersion": "1", "generation": 1}
    moved = copy.deepcopy(obj)
    moved["metadata"]["resourceVersion"] = "2"
    moved["metadata"]["managedFields"] = [{"manager": "x"}]
    moved["status"] = {"agents": {"p": {"configHash": "h"}}}
    assert content_digest(obj) == content_digest(moved)
    edited = copy.deepcopy(moved)
    edited["metadata"]["generation"] = 2
    assert content_digest(edited) != content_digest(obj)


def test_backoff_grows_to_the_cap_with_jitter():
    import random

    backoff = Backoff(0.5, 10.0, rng=random.Random(1))
    delays = [backoff.next_delay() for _ in range(10)]
    assert all(0.25 <= d <= 0.5 for d in delays[:1])
    assert all(5.0 <= d <= 10.0 for d in delays[6:])  # capped: never above 10 s
    assert len(set(delays)) == len(delays)  # jittered
    backoff.reset()
    assert backoff.next_delay() <= 0.5


def test_api_errors_are_described_without_bodies():
    import http.client

    from berth_agent.kube.client import ApiError

    error = ApiError(403, "Forbidden")
    error.body = '{"message": "planted-secret-body"}'  # were a body kept, describing must still not show it
    error.headers = {"Authorization": "Bearer planted-token"}
    assert describe_api_error(error) == "API answered 403 Forbidden"
    assert describe_api_error(ConnectionRefusedError()) == "cannot reach the API server (ConnectionRefusedError)"
    import json

    dropped = http.client.IncompleteRead(b'{"type": "ADDED", "object": {"secret": "planted')  # cut mid-chunk
    assert describe_api_error(dropped) == "cannot reach the API server (IncompleteRead)"
    try:
        json.loads('{"type": "ADDED", "object": {"secret": "planted')
    except ValueError as exc:
        assert describe_api_error(exc) == "malformed answer from the API server (JSONDecodeError)"


@pytest.mark.asyncio
async def test_unreachable_api_is_an_error_and_keeps_beating(health, changes):
    from berth_agent.kube.client import ApiClient
    from support.common.ports import free_port

    client = ApiClient.for_host(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    watcher = RegistryApiWatcher(client, "default", "reg", health,
                                 backoff_initial=0.05, backoff_cap=0.2)
    errors_before = _sample(metrics.watch_errors_total, source="registry-api")
    task = asyncio.create_task(watcher.run(changes))
    try:
        failed = await changes.wait_for(lambda c: c.error is not None)
        assert failed.error.startswith("cannot read Registry default/reg: cannot reach the API server (")
        await until(lambda: _sample(metrics.watch_errors_total, source="registry-api") >= errors_before + 3,
                    "3 more watch errors counted", 20)
        assert len(changes.snapshot()) == 1  # the same error is emitted once, however often it recurs
        assert health.live_ok()  # retrying is progress: a restart of the agent would not help
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.asyncio
async def test_410_as_the_watch_answer_also_relists(kube_api, health, changes, caplog):
    """Some servers refuse a too-old resourceVersion with an HTTP 410 answer instead of an ERROR event."""
    caplog.set_level("INFO", logger="berth_agent")
    kube_api.create(REGISTRY)
    async with watching(kube_api, health, changes):
        await changes.wait_for(lambda c: c.registry is not None)
        await until(lambda: kube_api.open_watches == 1, "the Registry watch open", 20)
        kube_api.fail_next(1, status=410, verb="watch")
        kube_api.drop_watches()
        await until(lambda: any(r.getMessage().startswith("watch expired (410 Gone)") for r in caplog.records),
                    "the 410 Gone logged", 20)
        await until(lambda: kube_api.open_watches == 1, "the Registry watch open again", 20)
        _set_level(kube_api, "debug")
        await changes.wait_for(lambda c: _level(c) == "debug")
    assert not [c for c in changes.snapshot() if c.error]
