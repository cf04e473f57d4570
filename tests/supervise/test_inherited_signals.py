"""A test run started in the background (SIGINT and SIGQUIT ignored from its start, as under `.ci/run &` or a
job runner) still stops berth-supervise with SIGINT (tests/support/common/signals.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIGINT_TEST = ("tests/supervise/test_supervise.py::"
               "test_a_stop_signal_drains_the_registry_and_exits_after_it[SIGINT]")


def _in_background(command: str) -> subprocess.CompletedProcess:
    """`command` as an asynchronous list of a non-interactive shell: POSIX starts it with SIGINT and SIGQUIT
    ignored. "$0" is this Python."""
    return subprocess.run(["sh", "-c", f"{command} & wait $!", sys.executable], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_a_background_shell_starts_python_with_sigint_ignored():
    """The premise: such a start hands SIG_IGN on, and Python keeps it (it installs its handler only over SIG_DFL)."""
    probe = _in_background('"$0" -c "import signal; print(*(signal.getsignal(s) == signal.SIG_IGN '
                           'for s in (signal.SIGINT, signal.SIGQUIT)))"')
    assert probe.stdout.split() == ["True", "True"], probe


def test_the_sigint_test_passes_in_a_test_run_started_in_the_background():
    """Without support.common.signals this failed for the shell supervisor (TimeoutExpired after 15 s: a shell's INT
    trap
    is a no-op on a signal ignored at its start); berth-supervise sets its handlers whatever it inherited, and
    support.common.signals keeps every child's start as a container's is."""
    run = _in_background(f'"$0" -m pytest -q -p no:cacheprovider -p no:xdist {SIGINT_TEST}')
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout, run.stdout[-2000:]
