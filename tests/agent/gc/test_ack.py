"""gc_ack (A2): a pod acknowledges read-only only when the read-only registry serves and no older registry
process still runs (a draining writable registry could finish an upload during the mark phase)."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from berth_agent.core import metrics
from berth_agent.gc.ack import GcAck, older_registries
from support.common.polling import until
from support.common.ports import free_port
from support.registries.registry import start_registry
from support.registries.supervisor import minimal_config


def test_no_acknowledgement_while_an_older_registry_still_runs(tmp_path):
    config = tmp_path / "config.yml"
    config.write_bytes(minimal_config(tmp_path / "data", free_port()))
    older = start_registry(config, tmp_path / "old")  # serves the config before its rewrite: a draining one
    try:
        time.sleep(0.05)
        config.write_bytes(config.read_bytes() + b"# read-only now\n")  # a later write: `older` predates it
        assert [p.pid for p in older_registries(config)] == [older.process.pid]
        writes: list[str | None] = []

        async def write(request_id):
            writes.append(request_id)
            return True

        async def scenario():
            ack = GcAck(write, "pod-a", config, lambda: b"read-only", poll_seconds=0.05)
            ack.observe({"status": {"agents": {"pod-a": {"readOnlyFor": None}}}}, "r1", b"read-only")
            assert metrics.gc_read_only._value.get() == 1
            await asyncio.sleep(0.5)
            assert writes == []  # the older registry may still finish an upload
            older.stop()
            await until(lambda: writes == ["r1"], "the acknowledgement of r1", 10)
            ack.observe(None, None, b"writable")
            await until(lambda: writes == ["r1", None], "the acknowledgement cleared", 10)
            assert metrics.gc_read_only._value.get() == 0 and metrics.gc_read_only_seconds._value.get() > 0.4
            ack.close()

        asyncio.run(scenario())
    finally:
        older.stop()


def test_a_window_an_earlier_agent_began_still_counts_as_read_only(tmp_path):
    config = tmp_path / "config.yml"
    config.write_bytes(b"read-only")
    switched = time.time() - 20
    os.utime(config, (switched, switched))
    writes: list[str | None] = []

    async def write(request_id):
        writes.append(request_id)
        return True

    async def scenario():
        metrics.gc_read_only.set(0)
        ack = GcAck(write, "pod-a", config, lambda: b"read-only", poll_seconds=0.05)
        ack.observe({"status": {"agents": {"pod-a": {"readOnlyFor": "r1"}}}}, "r1", b"read-only")
        assert metrics.gc_read_only._value.get() == 1  # the restarted agent's pod is still read-only
        await asyncio.sleep(0.2)
        assert writes == []  # already acknowledged
        ack.observe(None, None, b"writable")
        await until(lambda: writes == [None], "the acknowledgement cleared", 10)
        assert metrics.gc_read_only._value.get() == 0 and 19 < metrics.gc_read_only_seconds._value.get() < 60
        ack.close()

    asyncio.run(scenario())


def test_a_record_left_by_an_earlier_agent_is_cleared_and_failed_writes_retried(tmp_path, caplog):
    config = tmp_path / "config.yml"
    config.write_bytes(b"x")
    switched = time.time() - 30
    os.utime(config, (switched, switched))  # the earlier agent wrote the read-only config 30 s ago
    answers = [False, True]
    writes: list[str | None] = []

    async def write(request_id):
        writes.append(request_id)
        return answers.pop(0) if answers else True

    async def scenario():
        ack = GcAck(write, "pod-a", config, lambda: b"x")
        with caplog.at_level(logging.INFO, logger="berth_agent.gc.ack"):
            ack.observe({"status": {"agents": {"pod-a": {"readOnlyFor": "r0"}}}}, None, b"x")
        own = [r for r in caplog.records if r.name == "berth_agent.gc.ack"]  # not asyncio's DEBUG lines
        assert [(r.msg, r.fields["request_id"]) for r in own] == [("gc writable", "r0")]
        # The window began in the earlier process: measured from when it wrote the read-only config.
        assert 29 < own[0].fields["read_only_seconds"] < 60, own[0].fields
        assert metrics.gc_read_only_seconds._value.get() == own[0].fields["read_only_seconds"]
        await until(lambda: len(writes) == 2, "two writes", timeout=5)
        assert writes == [None, None] and ack.written is None
        ack.observe(None, None, b"x")  # nothing to change: no write
        await asyncio.sleep(0.1)
        assert len(writes) == 2
        ack.close()

    asyncio.run(scenario())


def test_no_acknowledgement_when_another_config_serves_by_then(tmp_path):
    config = tmp_path / "config.yml"
    config.write_bytes(b"x")
    writes: list[str | None] = []

    async def write(request_id):
        writes.append(request_id)
        return True

    async def scenario():
        ack = GcAck(write, "pod-a", config, lambda: b"writable")  # a newer round changed what serves
        ack.observe({"status": {}}, "r1", b"read-only")
        await asyncio.sleep(0.2)
        assert writes == []
        ack.close()

    asyncio.run(scenario())
