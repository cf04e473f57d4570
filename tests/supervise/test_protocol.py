"""berth_supervise.protocol names every file, marker and signal the agent and berth-supervise share, and writes and
reads each: both programs use every name, each line reads back as written, berth-supervise marks its registries as
the agent expects, and the names agree with the pod contract."""

from __future__ import annotations

import ast
import os
import re
import signal
from pathlib import Path

import pytest

import berth_agent
from berth_supervise import main, protocol

SUPERVISE = Path(protocol.__file__).parent
AGENT = Path(berth_agent.__file__).parent


def _protocol_functions() -> dict[str, str]:
    source = Path(protocol.__file__).read_text()
    return {node.name: ast.get_source_segment(source, node) or ""
            for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}


def _uses(code: str) -> str:
    """`code` and the bodies of the protocol functions it calls (and they call in turn): where a file name it
    reads or writes is spelled."""
    bodies = _protocol_functions()
    called: set[str] = set()
    callers = [code]
    while callers:
        found = {name for name in bodies if name not in called and any(re.search(rf"\b{name}\(", c) for c in callers)}
        called |= found
        callers = [bodies[name] for name in found]
    return "\n".join([code, *(bodies[name] for name in sorted(called))])


def test_every_shared_name_is_one_both_programs_read_or_write():
    supervisor = _uses("\n".join(p.read_text() for p in SUPERVISE.glob("*.py") if p.name != "protocol.py"))
    agent = _uses("\n".join(p.read_text() for p in AGENT.rglob("*.py")))
    shared = {key: value for key, value in vars(protocol).items() if key.endswith("_NAME")}
    assert len(shared) >= 14
    for key, value in shared.items():
        if key not in ("CONFIG_NAME", "HANDOVER_NAME"):  # these two arrive in berth-supervise's settings, as paths
            assert re.search(rf"\b{key}\b", supervisor), f"{key} = {value!r}: berth-supervise never uses it"
        assert re.search(rf"\b{key}\b", agent), f"{key} = {value!r}: the agent never uses it"


def test_the_markers_are_what_berth_supervise_puts_in_its_registry_s_environment():
    def environment(held_socket: bool) -> set[bytes]:
        return {f"{key}={value}".encode() for key, value in protocol.markers(held_socket=held_socket).items()}

    assert environment(held_socket=False) == {protocol.HANDOVER_MARKER, protocol.GC_MARKER}
    assert environment(held_socket=True) == {protocol.HANDOVER_MARKER, protocol.GC_MARKER, protocol.SOCKET_MARKER}
    assert protocol.SOCKET_MARKER == b"BERTH_SUPERVISE_SOCKET=1"
    code = Path(main.__file__).read_text()
    assert "protocol.markers(held_socket=held)" in code and "held = self.group.listener is not None" in code


def test_the_signals_are_the_ones_berth_supervise_acts_on():
    from berth_supervise.signals import WATCHED

    agent_signals = {protocol.HANDOVER_SIGNAL, protocol.GC_SIGNAL, protocol.HELD_SOCKET_SIGNAL}
    assert agent_signals == {signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP}
    assert agent_signals <= set(WATCHED)
    code = Path(main.__file__).read_text()
    for name in ("HANDOVER_SIGNAL", "GC_SIGNAL", "HELD_SOCKET_SIGNAL"):
        assert f"sig == protocol.{name}:" in code, name


def test_berth_supervise_spells_the_config_name_as_the_pod_contract_does():
    # berth-supervise cannot import berth_api (pydantic: megabytes in every pod), so the protocol repeats this one.
    from berth_agent.render import paths
    from berth_api import pod
    from berth_supervise import settings

    assert protocol.CONFIG_NAME == pod.CONFIG_NAME
    assert protocol.S3_CREDENTIALS_NAME == paths.S3_CREDENTIALS_FILE  # the renderer writes what the registry is shown
    assert settings.DEFAULT_CONFIG == f"{pod.CONFIG_DIR}/{pod.CONFIG_NAME}"
    assert settings.Settings.from_env({}).handover == Path(pod.CONFIG_DIR) / protocol.HANDOVER_NAME


def test_temporary_s3_credentials_beside_the_config_are_what_every_registry_process_is_shown(tmp_path):
    from berth_supervise.spawn import registry_env

    config = tmp_path / "config.yml"
    base = {"PATH": "/usr/bin", "AWS_ACCESS_KEY_ID": "AKIAFROMTHEPOD", "AWS_SECRET_ACCESS_KEY": "x",
            "AWS_ROLE_ARN": "arn:aws:iam::1:role/r", "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token"}
    assert registry_env(base, config) == base  # long-lived keys are in config.yml: the environment as it is
    (tmp_path / "s3").mkdir()
    (tmp_path / protocol.S3_CREDENTIALS_NAME).write_text("[default]\n")
    assert registry_env(base, config) == {"PATH": "/usr/bin",
                                          "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "s3" / "credentials")}
    assert "registry_env(self.env, self.config)" in (SUPERVISE / "gc_child.py").read_text()  # garbage-collect too


# ---- each file reads back as written --------------------------------------------------------------------------


def test_the_handover_file_names_the_registries_and_the_bound(tmp_path):
    path = protocol.handover_path(tmp_path / "config.yml")
    assert path == tmp_path / "handover"
    assert protocol.read_handover(path) is None and protocol.handover_names(path, 41) == (False, None)
    protocol.write_handover(path, [(43, 900), (41, 800)])
    assert path.read_text() == "41 800\n43 900\n"  # the line berth-supervise has always read
    assert os.stat(path).st_mode & 0o777 == 0o644  # the registry container's user reads it
    assert protocol.read_handover(path) == ({(41, 800), (43, 900)}, False)
    assert protocol.handover_names(path, 43) == (True, False)
    assert protocol.handover_names(path, 42) == (False, False)  # a late signal for another registry: nothing
    assert protocol.handover_names(path, None) == (False, None)  # no registry runs
    protocol.write_handover(path, [(41, 800)], quick=True)
    assert path.read_text() == "41 800\nquick\n"
    assert protocol.read_handover(path) == ({(41, 800)}, True) and protocol.handover_names(path, 41) == (True, True)
    assert [p.name for p in tmp_path.iterdir()] == ["handover"]  # no temporary file left
    with pytest.raises(OSError):  # the agent's write fails loudly
        protocol.write_handover(tmp_path / "missing" / "handover", [(41, 800)])


def test_the_supervisor_s_pid_and_the_last_exit(tmp_path):
    assert protocol.read_supervisor_pid(tmp_path) is None and protocol.read_exit_line(tmp_path) == ""
    protocol.write_supervisor_pid(tmp_path, 1234)
    assert protocol.read_supervisor_pid(tmp_path) == 1234
    (tmp_path / protocol.OUTPUT_NAME).write_bytes(b"level=fatal msg=boom\n")
    protocol.record_exit(tmp_path, 77, 1, 2.9)
    assert protocol.read_exit_line(tmp_path) == "77 1 2"
    assert protocol.parse_exit(protocol.read_exit_line(tmp_path)) == (77, 1, 2)
    assert (tmp_path / protocol.PREVIOUS_OUTPUT_NAME).read_bytes() == b"level=fatal msg=boom\n"
    assert (tmp_path / protocol.OUTPUT_NAME).read_bytes() == b""  # the next start begins on an empty file
    assert protocol.parse_exit("") is None and protocol.parse_exit("77 1") is None
    protocol.record_exit(tmp_path / "missing", 77, 1, 2.0)  # berth-supervise's writes fail quietly


def test_the_exit_history_numbers_every_exit_and_keeps_the_last_ones(tmp_path):
    assert protocol.read_exit_history(tmp_path) == []
    for pid in range(1, protocol.EXIT_HISTORY_LINES + 11):
        protocol.record_exit(tmp_path, pid, 137 if pid % 2 else 1, pid % 3)
    history = protocol.read_exit_history(tmp_path)
    assert len(history) == protocol.EXIT_HISTORY_LINES
    assert history[0] == (11, 11, 137, 2) and history[-1] == (74, 74, 1, 2)
    assert [seq for seq, *_ in history] == list(range(11, 75))
    (tmp_path / protocol.EXIT_HISTORY_NAME).write_text("garbage\n3 4 5\n75 80 1 0\n")
    assert protocol.read_exit_history(tmp_path) == [(75, 80, 1, 0)]  # what does not parse is skipped


def test_the_current_registry_and_its_metrics_port(tmp_path):
    assert protocol.read_current(tmp_path) is None
    protocol.write_current(tmp_path, 51, 5001)
    assert (tmp_path / protocol.METRICS_NAME).read_text() == "51 5001\n"
    assert protocol.read_current(tmp_path) == (51, 5001)
    protocol.write_current(tmp_path, 52, None)
    assert protocol.read_current(tmp_path) == (52, None)
    for text in ("52", "x 5001", "52 0", "52 70000", "52 5001 9"):
        (tmp_path / protocol.METRICS_NAME).write_text(text + "\n")
        assert protocol.read_current(tmp_path) is None, text
    protocol.write_current(tmp_path / "missing", 51, 5001)


def test_the_notification_events_dropped(tmp_path):
    assert protocol.read_dropped(tmp_path) == {}
    protocol.write_dropped(tmp_path, {"hook two": 3, "audit": 12})
    assert protocol.read_dropped(tmp_path) == {"hook two": 3, "audit": 12}
    protocol.write_dropped(tmp_path / "missing", {"audit": 1})


def test_a_garbage_collect_request_and_its_answers(tmp_path):
    protocol.write_gc_request(tmp_path, "run-1", ["--delete-untagged", "--dry-run"])
    raw = (tmp_path / protocol.GC_REQUEST_NAME).read_bytes()
    assert protocol.parse_gc_request(raw) == ("run-1", ["--dry-run", "--delete-untagged"], "")
    assert protocol.parse_gc_request(b"run-2\n") == ("run-2", [], "")
    assert protocol.parse_gc_request(b"run;rm -rf /\n") == ("?", [], "a bad request id")
    assert protocol.parse_gc_request(b"run-3 --force\n") == ("run-3", [], "an unknown word")
    assert protocol.parse_gc_request(b"run-3 --dry-run --dry-run\n") == ("run-3", [], "a repeated flag")
    assert protocol.parse_gc_request(b"run-3\nrun-4\n") == ("run-3", [], "more than one line")
    assert protocol.read_gc_pid(tmp_path) is None and protocol.read_gc_result(tmp_path, "run-1") is None
    protocol.write_gc_pid(tmp_path, 4242, "run-1")
    assert protocol.read_gc_pid(tmp_path) == (4242, "run-1")
    protocol.write_gc_result(tmp_path, "run-1", 0)
    assert protocol.read_gc_result(tmp_path, "run-1") == (0, False)
    assert protocol.read_gc_result(tmp_path, "run-0") is None  # an answer to another request
    protocol.write_gc_result(tmp_path, "run-2", 2, refused=True)
    assert (tmp_path / protocol.GC_RESULT_NAME).read_text() == "run-2 2 refused\n"
    assert protocol.read_gc_result(tmp_path, "run-2") == (2, True)
    assert protocol.last_beat(tmp_path) is None
    protocol.beat(tmp_path)
    assert protocol.last_beat(tmp_path) == (tmp_path / protocol.GC_HEARTBEAT_NAME).stat().st_mtime
    protocol.remove(tmp_path / protocol.GC_RESULT_NAME)
    protocol.remove(tmp_path / protocol.GC_RESULT_NAME)  # gone already: nothing to say
    assert not (tmp_path / protocol.GC_RESULT_NAME).exists()


@pytest.mark.parametrize(("addr", "expected"), [("127.0.0.1:5000", ("127.0.0.1", 5000)), (":5000", ("", 5000)),
                                                ("[::1]:5000", ("::1", 5000)), ("0.0.0.0:0", ("0.0.0.0", 0))])
def test_an_address_is_host_and_port(addr, expected):
    assert protocol.split_addr(addr) == expected


@pytest.mark.parametrize("addr", ["5000", "host:", "host:port", "host:65536", ""])
def test_anything_else_is_refused_naming_what_it_is(addr):
    with pytest.raises(ValueError, match="--outbox-addr must be HOST:PORT or :PORT"):
        protocol.split_addr(addr, "--outbox-addr")
