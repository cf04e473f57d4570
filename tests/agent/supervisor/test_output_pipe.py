"""The registry's output pipe (awk's redaction, then tee) under kill -9: the registry never blocks on its log."""

from __future__ import annotations

import http.client
import os
import signal

import pytest

from berth_agent.core.write import write_atomic
from berth_agent.supervisor.endpoint import Endpoint
from berth_agent.supervisor.probe import answers
from support.supervisor import PYTHON, children_of, minimal_config, wait_for


def _program(pid: int) -> str:
    """The name a process was started by (argv[0]: busybox's applets are one binary, `awk` and `tee` by name)."""
    try:
        return os.path.basename(open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode())
    except (OSError, UnicodeDecodeError):
        return ""


def _pipe(supervisor) -> set[int]:
    """The supervisor's awk and tee (its other children are registries)."""
    return {pid for pid in children_of(supervisor.pid) if _program(pid) in ("awk", "mawk", "gawk", "tee")}


def _noisy_requests(port: int, count: int) -> None:
    """Requests the registry logs a long line for each (an unknown repository): far more than a pipe's 64 KiB."""
    name = "a" * 200
    for index in range(count):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", f"/v2/{name}/{index}/manifests/latest")
            assert connection.getresponse().status == 404
        finally:
            connection.close()


@pytest.mark.parametrize("victim", ["awk", "tee"])
def test_a_killed_output_pipe_is_replaced_before_the_registry_blocks_on_its_log(
        supervisor_factory, shell, registry_port, tmp_path, victim):
    if shell == PYTHON:
        pytest.skip("awk and tee are supervise.sh's: berth-supervise reads each registry's pipe itself "
                    "(tests/agent/supervisor/test_supervise_python.py)")
    supervisor = supervisor_factory(shell)
    config = minimal_config(tmp_path / "data", registry_port).replace(b"level: error", b"level: info")
    write_atomic(supervisor.config_path, config)
    registry = supervisor.registry()
    wait_for(lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200, what="the registry to answer")
    before = wait_for(lambda: _pipe(supervisor) if len(_pipe(supervisor)) == 2 else None, what="awk and tee")
    (target,) = [pid for pid in before if (_program(pid) == "tee") == (victim == "tee")]
    os.kill(target, signal.SIGKILL)
    # The supervisor starts a new pipe at once (a child's exit interrupts its wait), so 600 logged requests
    # (several times the FIFO's 64 KiB of output) never fill it: each gets its answer within the client's 10 s.
    wait_for(lambda: len(_pipe(supervisor) - before) == 2, what=f"a new awk and tee\n{supervisor.log()}")
    _noisy_requests(registry_port, 600)
    assert supervisor.registries() == [registry]  # the same registry served it all
    assert "output pipe" in supervisor.log()
