"""GcCommand driving the real berth-supervise and the real `registry garbage-collect` (2.8, 3.1.1).

A run while the registry serves (it keeps serving, same pid, no registry exit recorded), dry run then real
run on images A and B (B's manifest deleted), a refused request, the time bound and the stop event killing
the command, the supervisor's heartbeat watchdog and SIGTERM stopping it, an orphan stopped by a new agent,
no SIGUSR2 to an older supervisor, and a big output followed and freed without losing a line.

A command that runs "for ever" is the real one on a store with a named pipe where a manifest link belongs: it
blocks opening it, as a run blocks on a stuck volume. The big output comes from a stand-in binary (the one
test of the supervisor's plumbing that needs millions of bytes): it execs the real registry for `serve`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from berth_agent.core.write import write_atomic
from berth_agent.gc import command as gc_command
from berth_agent.gc import report as gc_report
from berth_agent.gc.command import GcCommand, GcCommandError
from berth_agent.restart.endpoint import Endpoint
from berth_agent.restart.probe import answers
from berth_supervise.protocol import GC_REQUEST_NAME
from support.common.polling import wait_for
from support.registries.registry import OciImage, oci_image_example, pull_image, push_image, registry_binaries
from support.registries.stuck_store import make_stuck_store
from support.registries.supervisor import Supervisor, children_of

BLOBS = Path("docker/registry/v2/blobs/sha256")


def _config(root: Path, port: int) -> bytes:
    return (
        "version: 0.1\n"
        "log:\n  level: info\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  draintimeout: 5s\n"
    ).encode()


def _serving(supervisor: Supervisor, root: Path, port: int):
    write_atomic(supervisor.config_path, _config(root, port))
    registry = supervisor.registry()
    wait_for(lambda: answers(Endpoint("127.0.0.1", port)) == 200, what="the registry to answer")
    return registry


def _serving_a_stuck_store(supervisor_factory, port: int, tmp_path: Path, binary: str | None = None):
    """A supervisor serving a store on which garbage-collect blocks for ever (support.registries.stuck_store)."""
    root = tmp_path / "data"
    make_stuck_store(root)
    supervisor = supervisor_factory(**({"binary": binary} if binary else {}))
    return supervisor, _serving(supervisor, root, port)


def _image(layout: Path, shared: dict[str, bytes], unique: str) -> OciImage:
    digest, blobs = oci_image_example.write_layout(layout, [shared, {f"{unique}.bin": os.urandom(32 * 1024)}])
    return OciImage(layout, digest, blobs)


def _blob(root: Path, digest: str) -> Path:
    hex_digest = digest.split(":", 1)[1]
    return root / BLOBS / hex_digest[:2] / hex_digest / "data"


def _gc_processes(supervisor: Supervisor) -> list[int]:
    """garbage-collect processes among the supervisor's children and theirs (a wrapper binary's)."""
    found = []
    for child in children_of(supervisor.pid):
        for pid in [child, *children_of(child)]:
            try:
                if b"garbage-collect" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
    return found


def _request(state: Path, supervisor: Supervisor, line: bytes) -> None:
    """What the agent does, by hand: the request file, then SIGUSR2 (repeated until it is taken)."""
    write_atomic(state / GC_REQUEST_NAME, line)

    def taken() -> bool:
        if (state / GC_REQUEST_NAME).exists():
            supervisor.process.send_signal(signal.SIGUSR2)
            return False
        return True

    wait_for(taken, interval=0.2, what="the supervisor to take the request")


def _no_registry_exit(supervisor: Supervisor, registry) -> None:
    log = supervisor.log()
    assert supervisor.registries() == [registry], log
    assert not (supervisor.config_dir / "registry-exit").exists(), log
    assert "registry (pid" not in log.replace(f"started registry (pid {registry.pid})", ""), log


@pytest.mark.parametrize("dist", registry_binaries())
def test_dry_run_then_run_while_the_registry_serves(supervisor_factory, registry_port, tmp_path, dist):
    _major, binary = dist
    root = tmp_path / "data"
    supervisor = supervisor_factory(binary=binary)
    registry = _serving(supervisor, root, registry_port)
    host = f"127.0.0.1:{registry_port}"
    shared = {"shared.bin": os.urandom(64 * 1024)}
    a, b = _image(tmp_path / "a", shared, "a"), _image(tmp_path / "b", shared, "b")
    push_image(a, host, "demo/app:a")
    push_image(b, host, "demo/app:b")
    request = urllib.request.Request(f"http://{host}/v2/demo/app/manifests/{b.manifest_digest}", method="DELETE")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 202
    b_unique = set(b.blobs) - set(a.blobs)
    command = GcCommand(supervisor.config_dir, supervisor.config_dir)

    dry = command.run("20261130T120000Z-manual", dry_run=True, delete_untagged=False, stop=threading.Event(),
                      timeout_seconds=60)
    assert (dry.exit_status, dry.error, dry.timed_out, dry.stopped) == (0, None, False, False)
    assert dry.report is not None and dry.report.dry_run
    assert (dry.report.blobs_marked, dry.report.manifests_marked, dry.report.blobs_deleted) == (4, 1, 3)
    assert set(dry.report.blobs_eligible) == b_unique
    assert all(_blob(root, digest).exists() for digest in b_unique)
    assert (supervisor.config_dir / "gc-result").read_text() == "20261130T120000Z-manual 0\n"
    assert not (supervisor.config_dir / "gc.pid").exists()

    run = command.run("r2", dry_run=False, delete_untagged=False, stop=threading.Event(), timeout_seconds=60)
    assert (run.exit_status, run.error) == (0, None)
    assert run.report is not None and run.report.succeeded and not run.report.dry_run
    assert (run.report.blobs_marked, run.report.blobs_deleted, run.report.manifests_deleted) == (4, 3, 0)
    assert not any(_blob(root, digest).exists() for digest in b_unique)
    # The registry served throughout and still does: same process, no exit, A pulls back whole.
    assert answers(Endpoint("127.0.0.1", registry_port)) == 200
    assert pull_image(host, "demo/app:a", tmp_path / "pulled").blobs == a.blobs
    _no_registry_exit(supervisor, registry)
    log = supervisor.log()
    assert "started garbage-collect --dry-run" in log and "request r2) exited with status 0" in log


def test_a_failing_run_reports_its_status_and_the_registrys_words(supervisor_factory, registry_port,
                                                                  tmp_path):
    supervisor = supervisor_factory()
    registry = _serving(supervisor, tmp_path / "empty", registry_port)  # nothing pushed: no repositories dir
    outcome = GcCommand(supervisor.config_dir, supervisor.config_dir).run(
        "r1", dry_run=False, delete_untagged=True, stop=threading.Event(), timeout_seconds=60)
    assert outcome.exit_status == 1 and not outcome.timed_out and not outcome.stopped
    # The command's own failure; gc_report reads this one as an empty store (the runner records it Succeeded).
    assert outcome.report is not None and outcome.report.empty_store
    assert outcome.error.startswith("garbage-collect exited with status 1: failed to garbage collect"), outcome
    assert str(tmp_path) not in outcome.error  # a path could name anything: long runs are scrubbed
    # Asked to stop before it started (the Lease lost meanwhile): nothing starts.
    stopped = threading.Event()
    stopped.set()
    before = GcCommand(supervisor.config_dir, supervisor.config_dir).run(
        "r2", dry_run=False, delete_untagged=False, stop=stopped, timeout_seconds=60)
    assert (before.exit_status, before.stopped, before.report) == (None, True, None)
    assert supervisor.log().count("started garbage-collect") == 1
    _no_registry_exit(supervisor, registry)


# A command whose process keeps a command line without "garbage-collect" for 3 s (a wrapper script in the binary's
# place; the shell supervisor's forked subshell was one until its exec, seen in a full run), then becomes the real
# one. 3 s is longer than the 2 s the agent waits for a result once it believes the command gone.
SLOW_EXEC_BINARY = """#!/bin/sh
if [ "$1" = serve ]; then
    exec /usr/bin/docker-registry "$@"
fi
BERTH_TEST_ARGS="$*" exec {python} -c 'import os, time
time.sleep(3)
os.execv("/usr/bin/docker-registry", ["/usr/bin/docker-registry", *os.environ["BERTH_TEST_ARGS"].split()])'
"""


def test_a_command_not_yet_execd_is_followed_to_its_own_result(supervisor_factory, registry_port, tmp_path):
    binary = tmp_path / "registry-slow-exec"
    binary.write_text(SLOW_EXEC_BINARY.replace("{python}", sys.executable))
    binary.chmod(0o755)
    supervisor = supervisor_factory(binary=str(binary))
    registry = _serving(supervisor, tmp_path / "empty", registry_port)  # nothing pushed: exit 1
    state = supervisor.config_dir
    outcome = GcCommand(state, state).run("slow", dry_run=True, delete_untagged=False, stop=threading.Event(),
                                          timeout_seconds=60)
    # The supervisor's status for it, not "no exit status was recorded" two seconds after a look at the shell.
    assert outcome.exit_status == 1 and outcome.report is not None and outcome.report.empty_store, outcome
    assert (state / "gc-result").read_text() == "slow 1\n"
    assert _gc_processes(supervisor) == []
    _no_registry_exit(supervisor, registry)


BAD_REQUESTS = [
    (b"r1 --dry-run --force\n", "r1"),
    (b"r1 --dry-run --dry-run\n", "r1"),
    (b"r1 $(touch CANARY)\n", "r1"),
    (b"r1 --dry-run;touch CANARY\n", "r1"),
    (b"r1 `touch CANARY`\n", "r1"),
    (b"r1\n--dry-run\n", "r1"),
    (b"r1 *\n", "r1"),
    (b"$(touch CANARY)\n", "?"),
    (b"../r1 --dry-run\n", "?"),
    (b"r" * 65 + b"\n", "?"),
    (b"\n", "?"),
]


def test_a_bad_request_is_refused_and_nothing_in_it_runs(supervisor_factory, registry_port, tmp_path,
                                                         monkeypatch):
    supervisor = supervisor_factory()
    registry = _serving(supervisor, tmp_path / "data", registry_port)
    state = supervisor.config_dir
    canary = Path(supervisor.config_dir.parent / "CANARY")
    monkeypatch.chdir(supervisor.config_dir.parent)  # where a `touch CANARY` would land
    for line, answer_id in BAD_REQUESTS:
        (state / "gc-result").unlink(missing_ok=True)
        _request(state, supervisor, line.replace(b"CANARY", str(canary).encode()))
        result = wait_for(lambda: (state / "gc-result").exists() and (state / "gc-result").read_text(),
                          what=f"an answer to {line!r}")
        assert result == f"{answer_id} 2 refused\n", (line, result)
    assert not canary.exists()
    assert not list(supervisor.config_dir.parent.glob("CANARY*"))
    assert "started garbage-collect" not in supervisor.log()
    _no_registry_exit(supervisor, registry)
    # The agent's side refuses a bad id before writing anything.
    with pytest.raises(GcCommandError, match="request id"):
        GcCommand(state, state).run("a b", dry_run=False, delete_untagged=False, stop=threading.Event(),
                                    timeout_seconds=5)
    assert not (state / GC_REQUEST_NAME).exists()


@pytest.mark.parametrize("dist", registry_binaries())
def test_the_time_bound_kills_the_command_and_the_heartbeat_keeps_the_watchdog_off(
    supervisor_factory, registry_port, tmp_path, dist
):
    _major, binary = dist
    supervisor, registry = _serving_a_stuck_store(supervisor_factory, registry_port, tmp_path, binary)
    # 12 s: longer than the supervisor's 10 s watchdog, which the agent's heartbeat keeps off.
    outcome = GcCommand(supervisor.config_dir, supervisor.config_dir).run(
        "slow", dry_run=True, delete_untagged=False, stop=threading.Event(), timeout_seconds=12)
    assert outcome.timed_out and not outcome.stopped
    assert outcome.exit_status == 128 + signal.SIGTERM
    assert outcome.error == "garbage-collect did not finish within 12s and was stopped"
    assert outcome.seconds >= 12
    assert _gc_processes(supervisor) == []
    assert not (supervisor.config_dir / "gc.pid").exists()
    assert "no heartbeat" not in supervisor.log()
    assert answers(Endpoint("127.0.0.1", registry_port)) == 200
    _no_registry_exit(supervisor, registry)


def test_the_stop_event_kills_the_command(supervisor_factory, registry_port, tmp_path):
    supervisor, registry = _serving_a_stuck_store(supervisor_factory, registry_port, tmp_path)
    stop = threading.Event()
    state = supervisor.config_dir
    threading.Thread(target=lambda: wait_for(lambda: (state / "gc.pid").exists(), what="gc.pid") and stop.set(),
                     daemon=True).start()
    outcome = GcCommand(state, state).run("stopped", dry_run=False, delete_untagged=False, stop=stop,
                                          timeout_seconds=120)
    assert outcome.stopped and not outcome.timed_out
    assert outcome.exit_status == 128 + signal.SIGTERM
    assert outcome.error == "garbage-collect was stopped before it finished"
    assert _gc_processes(supervisor) == []
    assert (state / "gc-result").read_text() == "stopped 143\n"
    _no_registry_exit(supervisor, registry)


def test_a_command_killed_from_outside_says_by_what_and_the_registry_serves_on(supervisor_factory,
                                                                                registry_port, tmp_path):
    """kill -9 of garbage-collect itself: what the kernel does at the registry container's memory limit (mark
    and sweep holds every digest in memory). The run ends at once with the signal named, not 'status 137'."""
    supervisor, registry = _serving_a_stuck_store(supervisor_factory, registry_port, tmp_path)
    state = supervisor.config_dir

    def kill_it() -> None:
        pid = int(wait_for(lambda: (state / "gc.pid").exists() and (state / "gc.pid").read_text(), "gc.pid",
                           20).split()[0])
        os.kill(pid, signal.SIGKILL)

    threading.Thread(target=kill_it, daemon=True).start()
    outcome = GcCommand(state, state).run("oom", dry_run=False, delete_untagged=False, stop=threading.Event(),
                                          timeout_seconds=120)
    assert not outcome.stopped and not outcome.timed_out and not outcome.report.succeeded
    assert outcome.exit_status == 128 + signal.SIGKILL
    assert outcome.error.startswith("garbage-collect was killed by SIGKILL (exit status 137): "), outcome.error
    assert "spec.resources.limits.memory" in outcome.error
    assert _gc_processes(supervisor) == []
    _no_registry_exit(supervisor, registry)


def test_the_watchdog_stops_a_command_whose_agent_went_quiet(supervisor_factory, registry_port, tmp_path):
    supervisor, registry = _serving_a_stuck_store(supervisor_factory, registry_port, tmp_path)
    state = supervisor.config_dir
    _request(state, supervisor, b"orphan\n")  # and no heartbeat: the agent that asked is gone
    pid = int(wait_for(lambda: (state / "gc.pid").exists() and (state / "gc.pid").read_text(), "gc.pid", 20).split()[0])
    assert _gc_processes(supervisor) == [pid]
    result = wait_for(lambda: (state / "gc-result").exists() and (state / "gc-result").read_text(), timeout=40,
                      what="the watchdog to stop the command")
    assert result == "orphan 143\n"
    assert f"no heartbeat from the agent within 10s: stopping garbage-collect (pid {pid})" in supervisor.log()
    assert _gc_processes(supervisor) == []
    _no_registry_exit(supervisor, registry)


def test_sigterm_to_the_supervisor_stops_the_command(supervisor_factory, registry_port, tmp_path):
    supervisor, _registry = _serving_a_stuck_store(supervisor_factory, registry_port, tmp_path)
    state = supervisor.config_dir
    outcomes = []
    runner = threading.Thread(target=lambda: outcomes.append(GcCommand(state, state).run(
        "pod-stopping", dry_run=False, delete_untagged=False, stop=threading.Event(), timeout_seconds=120)))
    runner.start()
    pid = int(wait_for(lambda: (state / "gc.pid").exists() and (state / "gc.pid").read_text(), "gc.pid", 20).split()[0])
    supervisor.process.send_signal(signal.SIGTERM)
    assert supervisor.process.wait(30) == 0  # the registry drained; the command's status is not the script's
    runner.join(30)
    assert outcomes and outcomes[0].exit_status == 128 + signal.SIGTERM, outcomes
    assert not outcomes[0].stopped and not outcomes[0].timed_out
    assert (state / "gc-result").read_text() == "pod-stopping 143\n"
    assert not Path(f"/proc/{pid}").exists()


def test_a_new_agent_stops_the_orphan_of_an_old_one(supervisor_factory, registry_port, tmp_path):
    supervisor, registry = _serving_a_stuck_store(supervisor_factory, registry_port, tmp_path)
    state = supervisor.config_dir
    command = GcCommand(state, state)
    assert command.stop_orphan() is None
    _request(state, supervisor, b"left-behind --dry-run\n")
    pid = int(wait_for(lambda: (state / "gc.pid").exists() and (state / "gc.pid").read_text(), "gc.pid", 20).split()[0])
    with pytest.raises(GcCommandError, match="request left-behind"):
        command.run("next", dry_run=False, delete_untagged=False, stop=threading.Event(), timeout_seconds=5)
    assert command.stop_orphan() == "left-behind"
    assert not Path(f"/proc/{pid}/cmdline").exists() or _gc_processes(supervisor) == []
    wait_for(lambda: (state / "gc-result").exists(), what="the supervisor to record it")
    assert (state / "gc-result").read_text() == "left-behind 143\n"
    assert "no heartbeat" not in supervisor.log()
    _no_registry_exit(supervisor, registry)


# A supervisor from before garbage collection: it starts the registry without BERTH_SUPERVISE_GC=1 and
# does not handle SIGUSR2, so the signal would end it (and its container).
OLDER_SUPERVISOR = """#!/bin/sh
echo $$ >"${BERTH_CONFIG%/*}/supervisor.pid"
while [ ! -f "$BERTH_CONFIG" ]; do sleep 0.1; done
BERTH_SUPERVISE_HANDOVER=1 "$BERTH_REGISTRY_BIN" serve "$BERTH_CONFIG" &
wait $!
"""


def test_no_sigusr2_to_a_supervisor_without_the_marker(registry_port, tmp_path):
    older = tmp_path / "older-supervise"
    older.write_text(OLDER_SUPERVISOR)
    older.chmod(0o755)
    (tmp_path / "config").mkdir()
    supervisor = Supervisor(tmp_path / "config", argv=[str(older)]).start()
    try:
        registry = _serving(supervisor, tmp_path / "data", registry_port)
        state = supervisor.config_dir
        with pytest.raises(GcCommandError, match="BERTH_SUPERVISE_GC"):
            GcCommand(state, state).run("r1", dry_run=True, delete_untagged=False, stop=threading.Event(),
                                        timeout_seconds=5)
        assert not (state / GC_REQUEST_NAME).exists()
        assert supervisor.alive() and supervisor.registries() == [registry]
    finally:
        supervisor.stop()


def test_no_request_while_the_supervisor_runs_no_registry(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    with pytest.raises(GcCommandError, match="no supervisor"):
        GcCommand(state, state).run("r1", dry_run=True, delete_untagged=False, stop=threading.Event(),
                                    timeout_seconds=5)


# A stand-in registry binary: `serve` is the real one; `garbage-collect` prints a big report in bursts.
BIG_OUTPUT_BINARY = """#!/bin/sh
if [ "$1" = serve ]; then
    exec /usr/bin/docker-registry "$@"
fi
awk -v MANIFESTS={manifests} 'BEGIN {
    for (i = 0; i < MANIFESTS; i++) {
        printf "demo/app: marking manifest sha256:%064d \\n", i
        if (i % 20000 == 0) { fflush(); system("sleep 0.05") }
    }
    printf "%d blobs marked, 2 blobs and 0 manifests eligible for deletion\\n", MANIFESTS
    print "blob eligible for deletion: sha256:" sprintf("%064d", 1)
    print "blob eligible for deletion: sha256:" sprintf("%064d", 2)
}'
"""


def test_a_big_output_is_followed_and_freed_without_losing_a_line(supervisor_factory, registry_port,
                                                                   tmp_path):
    manifests = 250_000  # ~24 MiB of output
    binary = tmp_path / "registry-big-output"
    binary.write_text(BIG_OUTPUT_BINARY.replace("{manifests}", str(manifests)))
    binary.chmod(0o755)
    supervisor = supervisor_factory(binary=str(binary))
    registry = _serving(supervisor, tmp_path / "data", registry_port)
    state = supervisor.config_dir
    outcome = GcCommand(state, state).run("big", dry_run=True, delete_untagged=False, stop=threading.Event(),
                                          timeout_seconds=120)
    assert (outcome.exit_status, outcome.error) == (0, None)
    # Every line was read: each marked manifest is distinct, so one lost line would show in the count.
    assert outcome.report.manifests_marked == manifests
    assert (outcome.report.blobs_marked, outcome.report.blobs_deleted) == (manifests, 2)
    output = os.stat(state / "gc-output")
    assert output.st_size > 20 * 1024 * 1024  # what the command wrote
    assert output.st_blocks * 512 <= gc_command.FREE_AFTER + 64 * 1024  # what still occupies the volume
    _no_registry_exit(supervisor, registry)


def test_the_follower_joins_lines_split_across_reads_and_cuts_overlong_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(gc_command, "READ_CHUNK", 7)
    path = tmp_path / "gc-output"
    path.write_bytes(b"")
    parser = gc_report.GcReportParser(dry_run=True)
    follower = gc_command._OutputFollower(path, parser)
    digest = "sha256:" + "a" * 64
    with open(path, "ab") as out:
        out.write(f"demo/app: marking manifest {digest} \n3 blobs ".encode())
        out.flush()
        follower.read()  # the summary line is half written
        out.write(b"marked, 1 blobs and 0 manifests eligible for deletion\n")
        out.write(b"x" * (gc_command.MAX_LINE + 100) + b" level=error msg=beyond the cut\n")
        out.write(b"last, without a newline")
    follower.read()
    follower.close()
    assert parser.lines == 4
    report = parser.finish(0)
    assert (report.manifests_marked, report.blobs_marked, report.blobs_deleted) == (1, 3, 1)
    assert follower.first_error is None  # the error words were in the cut part of the long line
