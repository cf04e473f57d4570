"""Finding and restarting the real registry under the real supervisor."""

from __future__ import annotations

import os
import subprocess

from berth_agent.core.write import write_atomic
from berth_agent.restart.endpoint import Endpoint
from berth_agent.restart.overlapped_restart import restart_registry
from berth_agent.restart.probe import ServingWait, answers, wait_until_serving
from berth_agent.restart.procfs import find_registry_processes
from support.common.polling import wait_for
from support.registries.supervisor import minimal_config, registry_env


def test_finds_only_the_process_serving_our_config(supervisor_factory, registry_port, tmp_path):
    supervisor = supervisor_factory()
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    registry = supervisor.registry()

    # A registry serving another config path is not ours, and neither is the supervisor itself.
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other_config = other_dir / "config.yml"
    other_port = registry_port + 1 if registry_port < 65000 else registry_port - 1
    write_atomic(other_config, minimal_config(tmp_path / "data2", other_port))
    other = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(other_config)], env=registry_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        found = find_registry_processes(supervisor.config_path)
        assert [p.pid for p in found] == [registry.pid]
        assert supervisor.pid not in [p.pid for p in found] and os.getpid() not in [p.pid for p in found]
    finally:
        other.terminate()
        other.wait(10)


def test_restart_signals_the_registry_and_waits_for_a_new_one_that_answers(
    supervisor_factory, registry_port, tmp_path
):
    supervisor = supervisor_factory()
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    first = supervisor.registry()
    endpoint = Endpoint.from_addr(f"127.0.0.1:{registry_port}")
    wait_for(lambda: answers(endpoint) == 200, what="the registry to answer")

    result = restart_registry(supervisor.config_path, endpoint, timeout=15)

    assert result.ok, result.detail
    assert result.old == [first]
    assert result.new is not None and result.new.pid != first.pid
    assert not first.alive()
    assert supervisor.registries() == [result.new]
    assert answers(endpoint) == 200


def test_restart_reports_a_registry_that_never_comes_up(supervisor_factory, registry_port, tmp_path):
    supervisor = supervisor_factory()
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    supervisor.registry()
    endpoint = Endpoint.from_addr(f"127.0.0.1:{registry_port}")
    wait_for(lambda: answers(endpoint) == 200, what="the registry to answer")

    write_atomic(supervisor.config_path, b"version: 0.1\nstorage:\n  nosuchdriver: {}\n")
    result = restart_registry(supervisor.config_path, endpoint, timeout=3)

    assert not result.ok
    assert result.new is None
    # Either it saw the refused starts die (early answer) or it waited out the bound.
    assert "exited at start" in result.detail or "within 3s" in result.detail, result.detail


def test_with_no_registry_running_the_next_one_is_awaited(supervisor_factory, registry_port, tmp_path):
    supervisor = supervisor_factory()
    endpoint = Endpoint.from_addr(f":{registry_port}")
    assert endpoint.host == "127.0.0.1"
    # Nothing is serving yet; the config appears while we wait (the agent's very first write).
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    process, detail = wait_until_serving(ServingWait(supervisor.config_path, endpoint, timeout=15))
    assert process is not None, detail
    assert supervisor.registries() == [process]


def test_a_wait_excludes_the_registries_named_when_it_was_built(supervisor_factory, registry_port, tmp_path):
    """The applier's set of draining registries changes while a wait runs: the wait keeps its own copy, so a
    registry that was draining when it began is never taken for the new one."""
    supervisor = supervisor_factory()
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    running = supervisor.registry()
    draining = {running}
    wanted = ServingWait(supervisor.config_path, Endpoint.from_addr(f":{registry_port}"), timeout=0.5,
                         exclude=draining)
    draining.clear()
    new, detail = wait_until_serving(wanted)
    assert new is None, f"the excluded registry {running} was taken for a new one"
    assert detail == f"no registry process serving {supervisor.config_path} appeared within 0.5s", detail
