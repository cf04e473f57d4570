"""The registry's metrics across overlapped restarts: berth-supervise gives each registry a debug port no
draining registry holds, names it in the state dir, and never lets a taken debug port fail a reload.

Real berth-supervise, real registries (2.8 and 3.1.1).

The alternation test runs the supervisor as the pod's template runs it (BERTH_LISTEN_ADDR set: 3.1.1 on the held
socket, 2.8 binding its own) and restarts through the agent's one door (SupervisorRestarter: SIGHUP on the held
socket, overlapped on 2.8). Until 2026-12-06 its 3.1.1 case ran the overlapped restart of a 3.1.1 registry binding its
own listener, a path no pod runs (only a supervisor whose `registry --version` did not answer would), and it failed
on a loaded machine (handed_over=False): see `_upload`. The taken-port test keeps the overlapped restart on purpose.
"""

from __future__ import annotations

import os
import signal
import socket
import urllib.request

import pytest

from berth_agent.core.write import write_atomic
from berth_agent.restart.endpoint import Endpoint
from berth_agent.restart.handover import request_handover
from berth_agent.restart.metrics_proxy import read_target
from berth_agent.restart.overlapped_restart import restart_registry
from berth_agent.restart.probe import answers
from berth_agent.restart.restarter import SupervisorRestarter
from berth_supervise.protocol import METRICS_NAME
from support.common.polling import wait_for
from support.common.ports import free_port
from support.common.processes import exited_unreaped
from support.registries.registry import REGISTRY3_BINARY, registry_binaries, requires_registry3
from support.registries.supervisor import minimal_config
from support.traffic.upload import SlowUpload

SHARED_SECRET = "  secret: metrics-test-secret\n"  # under http: an upload finishes on the successor


def _scrape(port: int) -> str:
    """The registry's metrics text on its debug port ("" until it listens)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""


def _start(supervisor_factory, binary, tmp_path, registry_port, ports, *, listen: bool = False):
    """berth-supervise with debug ports; `listen`: with BERTH_LISTEN_ADDR, as every pod runs it."""
    env = {"BERTH_DEBUG_PORTS": " ".join(map(str, ports))}
    if listen:
        env["BERTH_LISTEN_ADDR"] = f"127.0.0.1:{registry_port}"
    supervisor = supervisor_factory(binary=binary, env=env)
    write_atomic(supervisor.config_path,
                 minimal_config(tmp_path / "data", registry_port, drain="30s", extra=SHARED_SECRET))
    first = supervisor.registry()
    state = supervisor.config_path.parent
    wait_for(lambda: (t := read_target(state)) is not None and t.pid == first.pid, what="the metrics file")
    wait_for(lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200, what="the registry to answer")
    return supervisor, first, state


def _named(state, pid: int):
    """The metrics file once it names registry `pid`."""
    return wait_for(lambda: (t := read_target(state)) is not None and t.pid == pid and t,
                    what=f"the metrics file to name registry {pid}")


def _upload(port: int, data_root=None, seconds: float = 4.0) -> SlowUpload:
    """A slow upload in flight; with `data_root` (the registry's rootdirectory), once a registry is handling it.

    The client's `in_flight` means it sent the PATCH's first chunks, not that a registry accepted the connection:
    on a loaded machine the connection may still wait in the listener's accept queue. A 3.1.1 registry that binds
    its own listener and is sent SIGTERM then has nothing in flight: it closes the listener (Linux resets the
    queued connection) and exits at once, so the overlapped restart finds no registry draining (handed_over=False,
    the new one listening 0.166 s later). The registry's own write of the upload's bytes is the proof it handles it.
    """
    upload = SlowUpload(f"http://127.0.0.1:{port}", "demo/slow", b"x" * 200_000, seconds=seconds).start()
    assert upload.in_flight.wait(20) and upload.error is None, upload.error
    if data_root is not None:
        uploads = data_root / "docker/registry/v2/repositories/demo/slow/_uploads"
        wait_for(lambda: any(f.stat().st_size > 0 for f in uploads.glob("*/data")) or upload.error,
                 what="the registry writing the upload's first bytes")
        assert upload.error is None, upload.error
    return upload


@pytest.mark.parametrize("dist", registry_binaries())
def test_each_successor_takes_the_debug_port_the_draining_registry_does_not_hold(
    supervisor_factory, registry_port, tmp_path, dist
):
    _major, binary = dist
    ports = [free_port(), free_port()]
    supervisor, first, state = _start(supervisor_factory, binary, tmp_path, registry_port, ports, listen=True)
    assert read_target(state).port == ports[0]
    assert "registry_" in wait_for(lambda: _scrape(ports[0]), what="the first registry's metrics")
    endpoint = Endpoint("127.0.0.1", registry_port)
    restarter = SupervisorRestarter(supervisor.config_path, state)  # the Applier's door: held (3.x) or overlapped
    draining: set = set()
    seen = []
    for _ in range(3):
        upload = _upload(registry_port, tmp_path / "data")  # the old registry drains it, holding its debug port
        before = read_target(state)
        result = restarter.restart(endpoint, timeout=20, draining=draining)
        assert result.ok and result.handed_over, (result.detail, result.no_listener_seconds)
        draining |= set(result.old)
        after = _named(state, result.new.pid)
        assert after.port is not None and after.port != before.port, (before, after, supervisor.log())
        assert "registry_" in wait_for(lambda port=after.port: _scrape(port), what="the successor's metrics")
        seen.append(after.port)
        upload.join(60)
        assert upload.error is None, (upload.error, upload.statuses)
        old = result.old[0]
        wait_for(lambda old=old: not old.alive(), timeout=40, what="the old registry to finish draining")
    assert seen == [ports[1], ports[0], ports[1]]  # alternating
    assert "could not listen on debug port" not in supervisor.log()
    assert (state / METRICS_NAME).read_text().split()[0] == str(supervisor.registries()[0].pid)


@pytest.mark.parametrize("dist", registry_binaries())
def test_a_debug_port_taken_by_another_process_never_fails_the_reload(
    supervisor_factory, registry_port, tmp_path, dist
):
    _major, binary = dist
    ports = [free_port(), free_port()]
    # Overlapped restarts (each registry binds its own listener): on the held socket the supervisor takes any free
    # port for a successor (it steers by the successor's debug port), so a taken one is never left out there.
    supervisor, first, state = _start(supervisor_factory, binary, tmp_path, registry_port, ports)
    squatter = socket.socket()  # a process the supervisor does not know holds the other port
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", ports[1]))
    squatter.listen()
    try:
        upload = _upload(registry_port, tmp_path / "data")  # port 0 stays held by the draining registry
        result = restart_registry(supervisor.config_path, Endpoint("127.0.0.1", registry_port), timeout=30,
                                  draining=set())
        assert result.ok, (result.detail, supervisor.log())
        # The start on the taken port died of it; the next one started without metrics, and serves.
        target = wait_for(lambda: (t := read_target(state)) is not None and t.pid == result.new.pid and t,
                          what="the metrics file to name the registry that serves")
        assert target.port is None, supervisor.log()
        assert f"could not listen on debug port {ports[1]}" in supervisor.log()
        upload.join(60)
        assert upload.error is None
        wait_for(lambda: not first.alive(), timeout=40, what="the old registry to finish draining")
    finally:
        squatter.close()
    # The next reload tries every port again: the metrics are back.
    result = restart_registry(supervisor.config_path, Endpoint("127.0.0.1", registry_port), timeout=30,
                              draining=set())
    assert result.ok, result.detail
    target = wait_for(lambda: (t := read_target(state)) is not None and t.pid == result.new.pid and t,
                      what="the metrics file")
    assert target.port in ports
    assert "registry_" in wait_for(lambda: _scrape(target.port), what="metrics again")


def test_without_debug_ports_nothing_changes(supervisor_factory, registry_port, tmp_path):
    supervisor = supervisor_factory()
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    registry = supervisor.registry()
    wait_for(lambda: f"started registry (pid {registry.pid})" in supervisor.log(), what="the start")
    assert not (supervisor.config_path.parent / METRICS_NAME).exists()
    env = open(f"/proc/{registry.pid}/environ", "rb").read()
    assert b"REGISTRY_HTTP_DEBUG" not in env


@requires_registry3
def test_a_registry_that_exited_with_the_sighup_leaves_its_debug_port_to_the_successor(
    supervisor_factory, registry_port, tmp_path
):
    """The loop takes its signals before it reaps. A registry that exited in the same turn as a SIGHUP is a zombie
    when the successor's port is picked: its sockets are closed, so its port is the successor's (it used to be
    counted as held, and the successor took a random third port)."""
    ports = [free_port(), free_port()]
    supervisor = supervisor_factory(binary=REGISTRY3_BINARY, env={
        "BERTH_DEBUG_PORTS": " ".join(map(str, ports)), "BERTH_LISTEN_ADDR": f"127.0.0.1:{registry_port}"})
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port, drain="30s",
                                                        extra=SHARED_SECRET))
    state = supervisor.config_path.parent
    first_process = supervisor.registry()
    first = _named(state, first_process.pid)
    assert first.port == ports[0]
    upload = _upload(registry_port, tmp_path / "data")  # the first registry drains it, holding ports[0]
    request_handover(supervisor.config_path, {first_process})
    os.kill(supervisor.pid, signal.SIGHUP)
    second = wait_for(lambda: (t := read_target(state)) is not None and t.pid != first.pid and t,
                      what=lambda: f"the successor named\n{supervisor.log()[-2000:]}")
    assert second.port == ports[1]
    assert first_process.alive(), "the first registry no longer drains: the upload ended too soon"
    (second_process,) = [p for p in supervisor.registries() if p.pid == second.pid]
    request_handover(supervisor.config_path, {second_process})
    os.kill(supervisor.pid, signal.SIGSTOP)  # the exit and the SIGHUP wait for the same turn
    try:
        os.kill(first.pid, signal.SIGKILL)
        wait_for(lambda: exited_unreaped(first.pid), what="the first registry a zombie, all its threads gone")
        os.kill(supervisor.pid, signal.SIGHUP)
    finally:
        os.kill(supervisor.pid, signal.SIGCONT)
    third = wait_for(lambda: (t := read_target(state)) is not None and t.pid not in (first.pid, second.pid) and t,
                     what=lambda: f"the next successor named\n{supervisor.log()[-2000:]}")
    assert third.port == ports[0], supervisor.log()[-3000:]
    upload.join(60)  # cut by the kill: its outcome is not this test's

