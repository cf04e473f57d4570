"""supervise.sh under dash and busybox sh, running the real docker-registry."""

from __future__ import annotations

import os
import signal
import time

from berth_agent.restart import Endpoint, answers
from berth_agent.write import write_atomic
from support.supervisor import children_of, minimal_config, wait_for


def _serving(port: int) -> bool:
    return answers(Endpoint("127.0.0.1", port)) == 200


def _cmdline(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def test_waits_for_the_config_then_starts_the_registry(supervisor_factory, shell, registry_port, tmp_path):
    supervisor = supervisor_factory(shell)
    wait_for(lambda: "waiting for" in supervisor.log(), what="the supervisor to say it waits")
    # Give it time to misbehave: nothing may start while the config is missing.
    time.sleep(0.5)
    assert supervisor.alive()
    assert supervisor.registries() == []
    assert not any(b"serve" in _cmdline(pid) for pid in children_of(supervisor.pid))

    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    registry = supervisor.registry()
    wait_for(lambda: _serving(registry_port), what="the registry to answer")
    cmdline = open(f"/proc/{registry.pid}/cmdline", "rb").read().split(b"\0")
    assert cmdline[:3] == [b"/usr/bin/docker-registry", b"serve", str(supervisor.config_path).encode()]


def test_restarts_the_registry_when_it_exits(supervisor_factory, shell, registry_port, tmp_path):
    supervisor = supervisor_factory(shell)
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    first = supervisor.registry()
    wait_for(lambda: _serving(registry_port), what="the registry to answer")

    for _ in range(3):
        os.kill(first.pid, signal.SIGTERM)
        second = wait_for(lambda: [p for p in supervisor.registries() if p != first], what="a new registry")[0]
        wait_for(lambda: _serving(registry_port), what="the new registry to answer")
        assert second.pid != first.pid
        assert supervisor.alive()
        first = second
    assert supervisor.log().count("exited with status 0") == 3


def test_forwards_sigterm_and_exits_after_the_registry(supervisor_factory, shell, registry_port, tmp_path):
    supervisor = supervisor_factory(shell)
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    registry = supervisor.registry()
    wait_for(lambda: _serving(registry_port), what="the registry to answer")

    supervisor.process.send_signal(signal.SIGTERM)
    # The registry drains (draintimeout) and exits 0; the supervisor exits with that status, starting nothing.
    assert supervisor.process.wait(15) == 0
    assert not registry.alive()
    assert "received SIGTERM" in supervisor.log()
    assert supervisor.log().count("started registry") == 1


def test_sigint_stops_the_registry_gracefully(supervisor_factory, shell, registry_port, tmp_path):
    supervisor = supervisor_factory(shell)
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    registry = supervisor.registry()
    wait_for(lambda: _serving(registry_port), what="the registry to answer")

    supervisor.process.send_signal(signal.SIGINT)
    # Forwarded as SIGTERM, on which 2.8 drains and exits 0 (SIGINT would kill it at once, field-notes §6).
    assert supervisor.process.wait(15) == 0
    assert not registry.alive()


def test_sigterm_while_waiting_for_the_config_exits(supervisor_factory, shell):
    supervisor = supervisor_factory(shell)
    wait_for(lambda: "waiting for" in supervisor.log(), what="the supervisor to wait")
    supervisor.process.send_signal(signal.SIGTERM)
    assert supervisor.process.wait(10) == 143
    assert "started registry" not in supervisor.log()


def test_a_registry_that_fails_at_start_is_not_restarted_in_a_hot_loop(
    supervisor_factory, shell, registry_port, tmp_path
):
    supervisor = supervisor_factory(shell)
    # A config the registry refuses at start: an unknown storage driver.
    write_atomic(supervisor.config_path, b"version: 0.1\nstorage:\n  nosuchdriver: {}\n")
    wait_for(lambda: supervisor.log().count("exited with status") >= 2, what="two failed starts")
    time.sleep(2.0)
    failures = supervisor.log().count("exited with status")
    # Unpaused, a registry that dies in milliseconds would be started hundreds of times in those seconds.
    assert 2 <= failures <= 8, supervisor.log()
    assert supervisor.alive()

    # Fixing the config recovers without touching the supervisor.
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    wait_for(lambda: _serving(registry_port), what="the registry to recover")
