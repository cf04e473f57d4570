"""Every process a test starts begins with default signal dispositions, as a container's command does.

A signal ignored (SIG_IGN) is inherited through fork and exec, and a POSIX shell cannot trap a signal that was
ignored when it started: the shell supervisor's `trap 'stop INT' INT` did nothing, and a SIGINT test waited out
its timeout (test_sigint_stops_the_registry_gracefully[dash] and [busybox], TimeoutExpired after 15 s).
berth-supervise sets its handlers over SIG_IGN, but the registry and any shell a test starts inherit it.
pytest inherits SIGINT and SIGQUIT ignored whenever it is started in the background by a non-interactive shell
(`.ci/run &`, a job runner; POSIX gives an asynchronous list SIG_IGN for both), and Python then leaves them so.
So each test process (each xdist worker) puts them back at its start, and a test that leaves one ignored errors,
naming itself, instead of breaking whichever test of its worker starts a shell next.
"""

from __future__ import annotations

import signal

import pytest

# SIGINT: Python's own handler (KeyboardInterrupt), the one an interactive start installs; reset to the default by
# exec in every child. SIGQUIT: the default.
DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGQUIT: signal.SIG_DFL}


def ignored() -> list[signal.Signals]:
    return [sig for sig in DEFAULTS if signal.getsignal(sig) == signal.SIG_IGN]


def restore(signals: list[signal.Signals]) -> None:
    for sig in signals:
        signal.signal(sig, DEFAULTS[sig])


def pytest_configure(config: pytest.Config) -> None:
    restore(ignored())


@pytest.fixture(autouse=True)
def _no_signal_left_ignored():
    yield
    left = ignored()
    if left:
        restore(left)
        pytest.fail(f"this test left {', '.join(s.name for s in left)} ignored: every child process started "
                    "after it would inherit that (a shell cannot trap it)", pytrace=False)
