"""berth-supervise's table of live registries: which debug ports they hold (berth_supervise.registry)."""

from __future__ import annotations

import subprocess
import time

from berth_supervise.registry import Registries, Registry
from support.common.processes import exited_unreaped


def test_a_registry_that_exited_unreaped_holds_no_debug_port():
    """The loop takes its signals before it reaps: a SIGHUP that arrived with an old registry's exit starts the
    successor while the old one is a zombie. Its sockets are closed, so its debug port is free for the successor
    (it was counted as held, and the successor took a third, random port)."""
    running = subprocess.Popen(["sleep", "60"])
    done = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while not exited_unreaped(done.pid):
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        registries = Registries()
        for pid, port in ((running.pid, 5001), (done.pid, 5002)):
            registries.by_pid[pid] = Registry(pid, time.monotonic(), port, None)
        assert registries.debug_ports() == {5001}
        assert exited_unreaped(done.pid), "debug_ports reaped the child: the loop's reap would miss its status"
    finally:
        running.kill()
        running.wait()
        done.wait()
