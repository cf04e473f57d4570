"""The registry watch on its own: what it reads from berth-supervise's files and what it reports."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time

import pytest

from berth_agent.apply.applier import Applier
from berth_agent.apply.registry_watch import CRASH_LOOP_EXITS, Finding, RegistryWatch, exit_reason, stable_words
from berth_agent.core import metrics
from berth_agent.core.health import Health
from berth_supervise.protocol import EXIT_NAME, SUPERVISOR_PID_NAME, record_exit


@pytest.mark.parametrize("status, lived, reason", [
    (0, 10, None),  # the exit the agent asked for (SIGTERM, drained)
    (143, 10, "signal"),
    (1, 0, "start-failure"),
    (1, 60, "crash"),
])
def test_exit_reasons(status, lived, reason):
    assert exit_reason(status, lived) == reason


def _watch(tmp_path) -> RegistryWatch:
    return RegistryWatch(Applier(tmp_path), Health())


def test_before_any_config_nothing_serves_and_a_supervisor_not_seen_yet_counts_as_running(tmp_path):
    finding = _watch(tmp_path).check()
    assert (finding.serving, finding.serving_reason, finding.supervisor, finding.exits) == (
        False, "config not written yet", True, ())


def test_a_supervisor_pid_that_is_gone_and_the_last_exit_are_read(tmp_path):
    (tmp_path / SUPERVISOR_PID_NAME).write_text("999999999\n")
    record_exit(tmp_path, 40, 137, 5)
    record_exit(tmp_path, 41, 1, 0)
    finding = _watch(tmp_path).check()
    assert (finding.supervisor, finding.exits) == (False, ((1, 40, 137, 5), (2, 41, 1, 0)))
    assert (tmp_path / EXIT_NAME).read_text() == "41 1 0\n"  # the last exit, as before


def test_the_own_pid_running_no_supervise_is_no_supervisor(tmp_path):
    (tmp_path / SUPERVISOR_PID_NAME).write_text(f"{os.getpid()}\n")  # a live process, but not a supervisor
    assert _watch(tmp_path).check().supervisor is False


def _finding(exit_line: str = "", *, supervisor: bool = True, serving: bool = False,
             pid: int | None = None, said: str = "bind: address already in use") -> Finding:
    """A look at the supervisor's files; `exit_line` "pid status seconds" is its newest exit, whose seq is its pid
    (the tests number their exits 1, 2, 3 ...)."""
    exits = ((int(exit_line.split()[0]), *map(int, exit_line.split())),) if exit_line else ()
    return Finding(serving, "" if serving else "down", supervisor, exits, said,
                   supervisor_pid=pid if supervisor else None)


def _reporting(watch: RegistryWatch) -> tuple[RegistryWatch, list[tuple[str, str | None]]]:
    """The watch, and the (reason, problem) pairs it reports, as the pipeline's watch_problem receives them."""
    reports: list[tuple[str, str | None]] = []

    async def report(reason, problem):
        reports.append((reason, problem))

    watch.report = report
    return watch, reports


def _act(watch: RegistryWatch, finding: Finding) -> list[str]:
    emitted: list[str] = []
    asyncio.run(watch._act(finding, lambda change: emitted.append(change.source)))
    return emitted


def test_repeated_exits_are_a_crash_loop_reported_once_with_the_registry_s_words(tmp_path):
    watch, reports = _reporting(_watch(tmp_path))
    _act(watch, _finding("1 1 0"))  # at the agent's start: an exit from before is not news
    assert reports == []
    for n in range(2, 2 + CRASH_LOOP_EXITS):
        _act(watch, _finding(f"{n} 1 0"))
    assert [reason for reason, _ in reports] == ["RegistryCrashLooping"]
    assert f"exited {CRASH_LOOP_EXITS} or more times" in reports[0][1] and "address already in use" in reports[0][1]
    _act(watch, _finding(f"{n} 1 0"))  # nothing new: nothing more reported
    for more in range(n + 1, n + 5):  # more exits of the same failure: the same message, not reported again
        _act(watch, _finding(f"{more} 1 0"))
    assert len(reports) == 1


def test_every_exit_between_two_looks_is_counted_by_its_reason(tmp_path):
    """A kill -9 and the refused starts after it can all come between two looks (a loaded machine, a supervisor
    quicker than the watch): each is counted, not only the last."""
    watch, reports = _reporting(_watch(tmp_path))
    record_exit(tmp_path, 10, 1, 0)
    _act(watch, watch.check())  # at the agent's start: not news
    signals = metrics.registry_exits_total.labels(reason="signal")._value.get()
    starts = metrics.registry_exits_total.labels(reason="start-failure")._value.get()
    record_exit(tmp_path, 11, 137, 40)  # the kill -9
    for pid in (12, 13, 14):
        record_exit(tmp_path, pid, 1, 0)  # its port taken: every start fails
    _act(watch, watch.check())
    assert metrics.registry_exits_total.labels(reason="signal")._value.get() - signals == 1
    assert metrics.registry_exits_total.labels(reason="start-failure")._value.get() - starts == 3
    assert [reason for reason, _ in reports] == ["RegistryCrashLooping"]
    _act(watch, watch.check())  # nothing new: nothing counted again
    assert metrics.registry_exits_total.labels(reason="start-failure")._value.get() - starts == 3


# Distribution 3.1.1's panic with its upstream unreachable, two starts apart: only the ephemeral port moves.
_PANIC = ('panic: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.96.0.10:53: '
          'read udp 127.0.0.1:{port}->10.96.0.10:53: i/o timeout')


def test_a_crash_loop_whose_words_change_only_in_volatile_parts_is_reported_once(tmp_path):
    watch, reports = _reporting(_watch(tmp_path))
    _act(watch, _finding("1 2 0", said=_PANIC.format(port=40000)))
    for n in range(2, 12):
        _act(watch, _finding(f"{n} 2 0", said=_PANIC.format(port=40000 + 7 * n)))
    assert [reason for reason, _ in reports] == ["RegistryCrashLooping"]
    assert reports[0][1].endswith('the registry said: panic: Get "https://registry-1.docker.io/v2/": dial tcp: '
                                  "lookup registry-1.docker.io on 10.96.0.10:53: read udp 10.96.0.10:53: i/o timeout")


@pytest.mark.parametrize("said, stable", [
    ("read tcp [::1]:53211->[::1]:5000: connection reset by peer", "read tcp [::1]:5000: connection reset by peer"),
    ("2026/12/07 01:06:19 pid=4711 failed at 2026-12-07T01:06:19.271456821Z", "<time> pid=<pid> failed at <time>"),
    ('dial tcp 10.0.0.7:443: connect: connection refused', 'dial tcp 10.0.0.7:443: connect: connection refused'),
])
def test_stable_words_drop_what_moves_between_starts_and_keep_where_and_why(said, stable):
    assert stable_words(said) == stable


def test_a_missing_supervisor_is_reported_and_its_return_asks_for_a_round(tmp_path):
    watch, reports = _reporting(_watch(tmp_path))
    _act(watch, _finding(supervisor=True, serving=True))
    assert _act(watch, _finding(supervisor=False, serving=True)) == []
    assert reports[-1][0] == "SupervisorMissing" and "berth-supervise" in reports[-1][1]
    assert _act(watch, _finding(supervisor=True, serving=True)) == ["registry-watch"]
    assert reports[-1] == ("", None)


def _notified(watch: RegistryWatch) -> list[tuple[str, str]]:
    """The (reason, message) Events the watch asks for, as the pipeline's watch_event receives them."""
    events: list[tuple[str, str]] = []

    async def notify(reason, message):
        events.append((reason, message))

    watch.notify = notify
    return events


def test_a_supervisor_restarted_between_two_looks_is_told_once_and_the_wanted_config_applied(tmp_path):
    """Found on the real node: the kubelet restarted the registry container quicker than a look (a second)."""
    watch, reports = _reporting(_watch(tmp_path))
    events = _notified(watch)
    assert _act(watch, _finding(serving=True, pid=100)) == []
    assert _act(watch, _finding(serving=True, pid=100)) == []
    assert _act(watch, _finding(serving=True, pid=200)) == ["registry-watch"]
    assert [reason for reason, _ in events] == ["SupervisorRestarted"] and "berth-supervise" in events[0][1]
    assert reports == []  # over already: an Event, nothing left on status
    assert _act(watch, _finding(serving=True, pid=200)) == [] and len(events) == 1


def test_a_supervisor_seen_missing_comes_back_as_a_return_not_a_restart(tmp_path):
    watch, reports = _reporting(_watch(tmp_path))
    events = _notified(watch)
    _act(watch, _finding(serving=True, pid=100))
    _act(watch, _finding(supervisor=False))
    assert _act(watch, _finding(serving=True, pid=200)) == ["registry-watch"]
    assert [reason for reason, _ in reports] == ["SupervisorMissing", ""] and events == []


class _ServingWatch(RegistryWatch):
    """Reads the supervisor as it is, and finds the registry serving while it runs: the watch then looks only
    at its (long) interval, not at the quick one of a registry down."""

    def check(self) -> Finding:
        finding = super().check()
        return dataclasses.replace(finding, serving=True, serving_reason="") if finding.supervisor else finding


def test_a_readiness_question_that_finds_the_supervisor_gone_wakes_the_watch(tmp_path):
    """/readyz reads the supervisor on every question; the watch, looking once a second (here: once a minute),
    is woken by it and reports at once: a restart quicker than a look is still seen missing."""
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "supervise"])
    try:
        (tmp_path / SUPERVISOR_PID_NAME).write_text(f"{supervisor.pid}\n")
        watch, reports = _reporting(_ServingWatch(Applier(tmp_path), Health(), interval=60.0))

        async def kill_and_ask() -> float:
            task = asyncio.create_task(watch.run(lambda change: None))
            while not watch._looked:
                await asyncio.sleep(0.01)
            assert watch.nothing_serves() is None and reports == [] and watch.health.serving_now()
            supervisor.kill()
            supervisor.wait()
            asked = time.monotonic()
            assert watch.nothing_serves() is not None  # what /readyz asks
            while not reports and time.monotonic() - asked < 30:
                await asyncio.sleep(0.01)
            task.cancel()
            return time.monotonic() - asked

        waited = asyncio.run(kill_and_ask())
        assert [reason for reason, _ in reports] == ["SupervisorMissing"], reports
        assert waited < 30  # not the minute's look
    finally:
        supervisor.kill()
        supervisor.wait()


class _LookAcrossAnApply(RegistryWatch):
    """A watch whose looks are scripted: the second one spans a whole apply (busy, then not again) and sees the
    new config.yml before its process answers, as a real look racing a restart can."""

    def __init__(self, tmp_path) -> None:
        super().__init__(Applier(tmp_path), Health(), interval=0.01)
        self.looks = 0

    def check(self) -> Finding:
        self.looks += 1
        if self.looks == 2:
            self.applier.applies += 1  # an apply began and ended while this look ran
            return _finding()  # "not serving": the restart in progress
        return _finding(serving=True)


def test_a_look_that_spans_an_apply_is_dropped_not_reported_as_not_serving(tmp_path):
    """Found on the real node: one such look took the only replica out of its Service for a second (a 503)."""
    watch = _LookAcrossAnApply(tmp_path)
    served: list[bool] = []
    set_serving = watch.health.set_serving
    watch.health.set_serving = lambda ok, reason="": (served.append(ok), set_serving(ok, reason))

    async def a_few_looks():
        task = asyncio.create_task(watch.run(lambda change: None))
        while watch.looks < 4:
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(a_few_looks())
    assert watch.looks >= 4 and False not in served, served
    assert watch.health.not_ready_reason() is None or "serving" not in watch.health.not_ready_reason()
