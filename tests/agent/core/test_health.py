"""Health: the probes' logic, and the aiohttp server answering real HTTP requests on 127.0.0.1."""

from __future__ import annotations

import urllib.request
from urllib.error import HTTPError

import pytest

from berth_agent.core import metrics
from berth_agent.core.health import Health, start_health_server
from support.common.ports import free_port


class FakeClock:
    """The time source Health reads: lets a test step time instead of sleeping (no timing assertions)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_liveness_follows_beats():
    clock = FakeClock()
    health = Health(clock=clock)
    assert health.live_ok()  # nothing registered yet
    health.register("registry-api", max_silence_seconds=30)
    clock.now += 29
    assert health.live_ok()  # a fresh loop gets its full allowance
    clock.now += 2
    assert not health.live_ok()
    assert health.stale_loops() == ["registry-api (silent 31s)"]
    health.beat("registry-api")
    assert health.live_ok()
    health.unregister("registry-api")
    clock.now += 1000
    assert health.live_ok()


def test_startup_and_readiness():
    health = Health()
    assert not health.startup_ok() and not health.ready_ok()
    health.mark_config_written()
    assert health.startup_ok() and health.ready_ok()
    health.set_ready(False)
    assert health.startup_ok() and not health.ready_ok()


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.asyncio
async def test_health_server_over_http():
    import asyncio

    clock = FakeClock()
    health = Health(clock=clock)
    port = free_port()
    runner = await start_health_server(health, "127.0.0.1", port)
    try:
        def get(path):  # the blocking client off the loop
            return asyncio.to_thread(_get, port, path)

        status, body = await get("/startupz")
        assert (status, body.strip()) == (503, "config not written yet")
        assert (await get("/readyz"))[0] == 503
        assert (await get("/livez"))[0] == 200

        health.mark_config_written()
        assert (await get("/startupz"))[0] == 200
        assert (await get("/readyz"))[0] == 200

        health.register("mounts", max_silence_seconds=10)
        clock.now += 11
        status, body = await get("/livez")
        assert status == 503 and "mounts" in body
        health.beat("mounts")
        assert (await get("/livez"))[0] == 200

        metrics.expose_pvc()
        metrics.pvc_free_bytes.set(12345)
        metrics.set_config_identity("abc123")
        status, body = await get("/metrics")
        assert status == 200
        assert "berth_agent_pvc_free_bytes 12345.0" in body
        assert 'berth_agent_config_info{hash="abc123"} 1.0' in body
        assert (await get("/nothing"))[0] == 404
    finally:
        await runner.cleanup()


def test_config_info_keeps_only_the_current_hash():
    metrics.set_config_identity("first")
    metrics.set_config_identity("second")
    from prometheus_client import REGISTRY, generate_latest

    text = generate_latest(REGISTRY).decode()
    assert 'berth_agent_config_info{hash="second"} 1.0' in text
    assert 'hash="first"' not in text


def test_a_check_asked_on_every_question_turns_readiness_at_once(tmp_path):
    """A fact read per probe (the supervisor is gone) wins over the registry watch's last look."""
    config = tmp_path / "config.yml"
    config.write_text("version: 0.1\n")
    health = Health(config_path=config)
    health.set_serving(True)
    gone: list[str] = []
    health.add_check(lambda: gone[0] if gone else None)
    assert health.ready_ok()
    gone.append("the supervisor is not running: nothing serves")
    assert health.not_ready_reason() == "the supervisor is not running: nothing serves"
    gone.clear()
    assert health.ready_ok()
