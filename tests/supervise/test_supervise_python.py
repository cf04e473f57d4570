"""berth-supervise's own parts: the held socket of Distribution 3, whole-line redaction, state files.

Starts, crash pauses, 2.8 handovers, the stop fan-out and garbage-collect beside the registry are in
test_supervise.py, the debug ports in test_metrics_ports.py.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from berth_agent.core.write import write_atomic
from berth_agent.restart.endpoint import Endpoint
from berth_agent.restart.probe import answers
from berth_supervise.lines import LineSplitter, redact
from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.registry import REGISTRY3_BINARY, requires_registry3
from support.registries.supervisor import minimal_config
from support.traffic.new_connections import NewConnectionLoop
from support.traffic.upload import SlowUpload

SECRET = "Bearer s3cr3t-t0ken-value"
SHARED_SECRET = "  secret: shared-upload-secret\n"

# ---- whole lines, redacted -----------------------------------------------------------------------------------


TEXT_LINE = (b'time="2026-12-01T21:00:00Z" level=info msg="configuring endpoint hook (http://127.0.0.1:9/x), '
             b'timeout=1s, headers=map[Authorization:[' + SECRET.encode() + b'] X-Quote:[a\\"b]]" go.version=go1\n')
JSON_LINE = json.dumps({"level": "info", "msg": "configuring endpoint hook (http://127.0.0.1:9/x), timeout=1s, "
                        f"headers=map[Authorization:[{SECRET}] X-Quote:[a\"b]]", "time": "2026"}).encode() + b"\n"


def test_both_formatters_keep_their_shape_and_lose_the_header_values():
    text = redact(TEXT_LINE)
    assert SECRET.encode() not in text and b"a\\\"b" not in text
    assert text.endswith(b'headers=<redacted>" go.version=go1\n'), text
    parsed = json.loads(redact(JSON_LINE))
    assert SECRET not in json.dumps(parsed) and parsed["msg"].endswith("headers=<redacted>")
    assert parsed["time"] == "2026"  # the fields after it are still there
    assert redact(b"level=info msg=started\n") == b"level=info msg=started\n"


@pytest.mark.parametrize("chunk", [1, 7, 4096, 65536])
def test_lines_are_whole_however_the_pipe_cuts_them(chunk):
    long_json = json.dumps({"msg": "x" * 20000, "level": "info"}).encode() + b"\n"  # over 4 KiB
    stream = long_json + JSON_LINE + TEXT_LINE + b"tail without newline"
    splitter = LineSplitter()
    out = []
    for start in range(0, len(stream), chunk):
        out += splitter.feed(stream[start:start + chunk])
    out += splitter.close()
    assert out[0] == long_json and json.loads(out[0])["msg"] == "x" * 20000
    assert json.loads(out[1])["msg"].endswith("headers=<redacted>")
    assert out[2] == redact(TEXT_LINE) and out[3] == b"tail without newline\n"
    assert not any(SECRET.encode() in line for line in out)


def test_an_overlong_line_is_passed_on_in_pieces_and_its_headers_never():
    splitter = LineSplitter(max_line=1000)
    line = b"a" * 1500 + b" headers=map[Authorization:[" + SECRET.encode() * 100 + b"]] end\n"
    out = []
    for start in range(0, len(line), 300):
        out += splitter.feed(line[start:start + 300])
    out += splitter.feed(b"next\n")
    joined = b"".join(out)
    assert SECRET.encode()[:8] not in joined
    assert joined.endswith(b"headers=<redacted>\nnext\n"), joined[-80:]
    assert all(len(piece) <= 1000 + len(b"headers=<redacted>") for piece in out)


# ---- the registry's output through the supervisor ---------------------------------------------------------------


NOTIFY = ("notifications:\n  endpoints:\n    - name: hook\n      url: http://127.0.0.1:9/hook\n      timeout: 1s\n"
          "      threshold: 5\n      backoff: 1s\n      headers:\n        Authorization: [\"" + SECRET + "\"]\n")


@pytest.mark.parametrize("formatter", ["text", "json"])
def test_the_container_log_and_registry_output_never_hold_the_headers(supervisor_factory, registry_port, tmp_path,
                                                                       formatter):
    # No program on PATH (the shell supervisor passed the output unfiltered without awk): the filter is its own.
    (tmp_path / "empty-path").mkdir()
    supervisor = supervisor_factory(env={"PATH": str(tmp_path / "empty-path")})
    config = minimal_config(tmp_path / "data", registry_port, extra=NOTIFY).replace(
        b"log:\n  level: error\n", f"log:\n  level: info\n  formatter: {formatter}\n".encode())
    write_atomic(supervisor.config_path, config)
    wait_for(lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200, what="the registry to answer")
    # A request whose access-log line is over 4 KiB (the path is in it), then a marker request.
    long_path = "/v2/" + "a" * 6000 + "/manifests/latest"
    for path in (long_path, "/v2/marker/manifests/done"):
        connection = http.client.HTTPConnection("127.0.0.1", registry_port, timeout=10)
        connection.request("GET", path)
        connection.getresponse().read()
        connection.close()
    output = supervisor.config_dir / "registry-output"
    wait_for(lambda: b"marker" in output.read_bytes(), what="the marker request in registry-output")
    wait_for(lambda: "marker" in supervisor.log(), what="the marker request in the container log")
    for text in (output.read_bytes(), supervisor.log().encode()):
        assert SECRET.encode() not in text
        assert b"headers=<redacted>" in text
        assert any(b"a" * 6000 in line for line in text.splitlines()), "the long line arrived whole"
    if formatter == "json":
        # logrus's lines (the access log is Apache's combined format either way) stay JSON, the redacted one too.
        lines = [line for line in output.read_bytes().splitlines() if line.startswith(b"{")]
        assert any(b"headers=<redacted>" in line for line in lines)
        assert all(isinstance(json.loads(line), dict) for line in lines)


# ---- the state files the agent reads (restart/supervisor_state.py, registry_output.py, metrics_proxy.py) ---------


def _bytes(path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def test_the_state_files_say_who_runs_what_ran_and_what_it_said(supervisor_factory, registry_port, tmp_path):
    state = tmp_path / "state"
    port = free_port()
    supervisor = supervisor_factory(env={"BERTH_STATE_DIR": str(state), "BERTH_DEBUG_PORTS": str(port)})
    config = minimal_config(tmp_path / "data", registry_port).replace(b"level: error", b"level: info")
    write_atomic(supervisor.config_path, config)
    first = supervisor.registry()
    wait_for(lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200, what="the registry to answer")
    assert (state / "supervisor.pid").read_text() == f"{supervisor.pid}\n"
    assert (state / "registry-metrics").read_text() == f"{first.pid} {port}\n"
    # The registry may answer before the supervisor has read its first line off the pipe (and made the file).
    wait_for(lambda: b"listening on" in _bytes(state / "registry-output"), what="the registry's words")
    assert not (state / "registry-exit").exists()
    assert not any(p.name.endswith(".yml") for p in state.iterdir())  # only its own files, not the config

    os.kill(first.pid, signal.SIGKILL)
    second = wait_for(lambda: [p for p in supervisor.registries() if p != first], what="a new registry")[0]
    pid, status, seconds = (state / "registry-exit").read_text().split()
    assert (int(pid), status) == (first.pid, "137") and int(seconds) >= 0
    wait_for(lambda: (state / "registry-metrics").read_text() == f"{second.pid} {port}\n",
             what="the new registry named current, on the port the killed one let go")
    said = (state / "registry-output.1").read_bytes()
    assert b"listening on" in said, said  # what the killed registry said, kept for the agent
    wait_for(lambda: b"listening on" in _bytes(state / "registry-output"), what="the new registry's words")
    assert (state / "registry-output").read_bytes().count(b"listening on") == 1  # it began on an empty file


# ---- the held socket (Distribution 3) -------------------------------------------------------------------------


def _held(supervisor_factory, tmp_path, *, drain: str = "30s", debug_ports: str = ""):
    """A 3.x registry on the held socket; its config names another port, which nothing may listen on."""
    port, unused = free_port(), free_port()
    env = {"BERTH_LISTEN_ADDR": f"127.0.0.1:{port}"}
    if debug_ports:
        env["BERTH_DEBUG_PORTS"] = debug_ports
    supervisor = supervisor_factory(binary=REGISTRY3_BINARY, env=env)
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", unused, drain=drain, extra=SHARED_SECRET))
    first = supervisor.registry()
    wait_for(lambda: answers(Endpoint("127.0.0.1", port)) == 200, what="the registry to answer on the held socket")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", unused), timeout=2).close()
    return supervisor, port, first


def _current(supervisor) -> int:
    return int((supervisor.config_dir / "registry-metrics").read_text().split()[0])


def _replace(supervisor, old) -> int:
    """The agent's request: name the registry in the handover file, SIGHUP; the new current registry's pid."""
    (supervisor.config_dir / "handover").write_text(f"{old.pid} {old.start_ticks}\n")
    os.kill(supervisor.pid, signal.SIGHUP)
    return wait_for(lambda: _current(supervisor) != old.pid and _current(supervisor), what="a successor")


@requires_registry3
def test_reloads_on_the_held_socket_refuse_nothing_while_an_upload_drains(supervisor_factory, tmp_path):
    supervisor, port, first = _held(supervisor_factory, tmp_path)
    assert b"LISTEN_FDS=1" in open(f"/proc/{first.pid}/environ", "rb").read().split(b"\0")
    upload = SlowUpload(f"http://127.0.0.1:{port}", "demo/slow", os.urandom(256 * 1024), seconds=4.0).start()
    assert upload.in_flight.wait(20)
    loops = [NewConnectionLoop("127.0.0.1", port) for _ in range(3)]
    for loop in loops:
        loop.start()
    old = first
    pids = [first.pid]
    for _ in range(5):
        new_pid = _replace(supervisor, old)
        pids.append(new_pid)
        old = next(p for p in supervisor.registries() if p.pid == new_pid)
    upload.join(60)
    counts = [loop.stop() for loop in loops]
    total = counts[0].add(counts[1]).add(counts[2])
    assert upload.error is None, (upload.error, upload.statuses)
    assert upload.read_back() == upload.data
    # None is closed: the supervisor holds every registry's socket until that registry has exited, so
    # the program always names the serving one (before: 1 to 5 per 10 reloads under CI's load,
    # docs/design.md §5.9).
    assert total.refused == 0 and total.failed == 0 and total.closed_without_response == 0, total
    assert total.answered > 100, total
    print(f"held socket, 5 reloads under 3 clients: {total.answered} answered, 0 refused, "
          f"{total.closed_without_response} closed without a response")
    assert len(set(pids)) == 6
    log = supervisor.log()
    assert log.count("answers on its debug port: new connections go to it") == 5, log
    assert log.count("once its accept queue is empty") == 5, log
    # Each old registry goes once its clients' connections have closed (the upload's holds the first one's).
    wait_for(lambda: supervisor.log().count(", which drains") == 5, what=supervisor.log)
    wait_for(lambda: f"registry (pid {first.pid}) exited with status 0 after draining" in supervisor.log(),
             what="the first registry to finish its upload and exit 0")
    assert supervisor.alive()


@requires_registry3
def test_a_successor_that_fails_at_start_leaves_the_old_one_serving(supervisor_factory, tmp_path):
    supervisor, port, first = _held(supervisor_factory, tmp_path)
    good = supervisor.config_path.read_bytes()
    write_atomic(supervisor.config_path, b"version: 0.1\nstorage:\n  nosuchdriver: {}\n")
    with NewConnectionLoop("127.0.0.1", port) as loop:
        (supervisor.config_dir / "handover").write_text(f"{first.pid} {first.start_ticks}\n")
        os.kill(supervisor.pid, signal.SIGHUP)
        wait_for(lambda: "before it answered" in supervisor.log(), what="the successor to fail")
        exit_line = (supervisor.config_dir / "registry-exit").read_text().split()
        assert exit_line[0] != str(first.pid) and exit_line[1] != "0"
        assert first.alive() and supervisor.registries() == [first]
        assert _current(supervisor) == first.pid
        # The agent's rollback: the good config again, the same request; this time it is taken.
        write_atomic(supervisor.config_path, good)
        new_pid = _replace(supervisor, first)
    counts = loop.counts
    assert counts.refused == 0 and counts.failed == 0 and counts.answered > 0, counts
    assert counts.closed_without_response == 0, counts  # the failed successor was given no connection
    wait_for(lambda: not first.alive(), what="the old registry to stop")
    assert [p.pid for p in supervisor.registries()] == [new_pid]
    assert "panic" in (supervisor.config_dir / "registry-output.1").read_text() or \
        "nosuchdriver" in (supervisor.config_dir / "registry-output.1").read_text()


@requires_registry3
def test_a_killed_registry_is_replaced_and_no_connection_is_refused_meanwhile(supervisor_factory, tmp_path):
    supervisor, port, first = _held(supervisor_factory, tmp_path)
    with NewConnectionLoop("127.0.0.1", port) as loop:
        wait_for(lambda: loop.counts.answered > 20, what="requests before the kill")
        os.kill(first.pid, signal.SIGKILL)
        second = wait_for(lambda: [p for p in supervisor.registries() if p != first], what="a new registry")[0]
        wait_for(lambda: loop.counts.answered > 20 + 50, what="requests after the kill")
    counts = loop.counts
    # The kernel kept the socket (the supervisor holds it): connections waited in its queue, none refused. The
    # ones the killed process had accepted are closed without a response.
    assert counts.refused == 0 and counts.failed == 0, counts
    assert (supervisor.config_dir / "registry-exit").read_text().split()[:2] == [str(first.pid), "137"]
    assert second.alive()


@requires_registry3
def test_a_successor_whose_debug_port_is_taken_starts_on_another(supervisor_factory, tmp_path):
    taken, spare = free_port(), free_port()
    supervisor, port, first = _held(supervisor_factory, tmp_path, debug_ports=f"{spare} {taken}")
    assert (supervisor.config_dir / "registry-metrics").read_text().split() == [str(first.pid), str(spare)]
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", taken))
    squatter.listen()
    try:
        new_pid = _replace(supervisor, first)
    finally:
        squatter.close()
    metrics_port = int((supervisor.config_dir / "registry-metrics").read_text().split()[1])
    assert metrics_port not in (taken, spare)  # the spare is the draining registry's: a free port instead
    assert "could not listen on debug port" in supervisor.log()
    assert answers(Endpoint("127.0.0.1", port)) == 200 and new_pid in [p.pid for p in supervisor.registries()]


@requires_registry3
def test_sigterm_stops_every_registry_and_closes_the_socket(supervisor_factory, tmp_path):
    supervisor, port, first = _held(supervisor_factory, tmp_path, drain="5s")
    supervisor.process.send_signal(signal.SIGTERM)
    assert supervisor.process.wait(30) == 0, supervisor.log()
    assert not first.alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_sighup_without_a_held_socket_changes_nothing(supervisor_factory, registry_port, tmp_path):
    supervisor = supervisor_factory()
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    first = supervisor.registry()
    (supervisor.config_dir / "handover").write_text(f"{first.pid} {first.start_ticks}\n")
    os.kill(supervisor.pid, signal.SIGHUP)
    wait_for(lambda: "SIGHUP ignored" in supervisor.log(), what="the supervisor to say why")
    assert supervisor.registries() == [first] and supervisor.alive()


def test_a_2_8_binary_binds_its_own_listener_whatever_the_listen_addr(supervisor_factory, registry_port, tmp_path):
    # The pod template sets BERTH_LISTEN_ADDR for every major (spec.distribution is hot): the binary decides.
    supervisor = supervisor_factory(env={"BERTH_LISTEN_ADDR": f"127.0.0.1:{registry_port}"})
    write_atomic(supervisor.config_path, minimal_config(tmp_path / "data", registry_port))
    registry = supervisor.registry()
    wait_for(lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200, what="2.8 on its own listener")
    assert "no socket activation" in supervisor.log() and "holding" not in supervisor.log()
    environ = open(f"/proc/{registry.pid}/environ", "rb").read().split(b"\0")
    assert b"BERTH_SUPERVISE_SOCKET=1" not in environ and not any(e.startswith(b"LISTEN_FDS") for e in environ)


# ---- its command line ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_usage_and_the_environment_and_exits(flag, tmp_path):
    """It used to ignore its arguments and wait for /etc/berth/config.yml."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    env["BERTH_CONFIG"] = str(tmp_path / "never" / "config.yml")  # never written: a wait would hang the test
    done = subprocess.run([sys.executable, "-m", "berth_supervise", flag], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: berth-supervise")
    for variable in ("BERTH_CONFIG", "BERTH_REGISTRY_BIN", "BERTH_STATE_DIR", "BERTH_HANDOVER", "BERTH_LISTEN_ADDR",
                     "BERTH_DEBUG_PORTS", "BERTH_DEBUG_HOST"):
        assert variable in done.stdout
    assert not (tmp_path / "never").exists()


def test_each_command_prints_the_installed_version(tmp_path):
    """berth-supervise, berth-agent and berth-operator answer --version with the package's version."""
    import importlib.metadata

    version = importlib.metadata.version("berth")
    env = {**os.environ, "BERTH_CONFIG": str(tmp_path / "never" / "config.yml")}
    for module, name in (("berth_supervise", "berth-supervise"), ("berth_agent.cli", "berth-agent"),
                         ("berth_operator.cli", "berth-operator")):
        done = subprocess.run([sys.executable, "-m", module, "--version"], env=env, capture_output=True, text=True,
                              timeout=60)
        assert (done.returncode, done.stdout.strip()) == (0, f"{name} {version}"), (module, done.stderr)
    assert not (tmp_path / "never").exists()


def test_an_unknown_argument_is_refused_with_the_usage(tmp_path):
    env = {**os.environ, "BERTH_CONFIG": str(tmp_path / "config.yml")}
    done = subprocess.run([sys.executable, "-m", "berth_supervise", "serve"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "usage: berth-supervise" in done.stderr and "takes no arguments, not 'serve'" in done.stderr
