"""The applier on its own, without a registry: what it writes, what it leaves alone, when it refuses."""

from __future__ import annotations

from berth_agent.apply.applier import Applier, endpoint_of, restart_bound
from berth_agent.apply.last_good import load_good
from berth_agent.render import Rendered
from berth_agent.render.rendered import state_identity
from berth_supervise.protocol import CONFIG_NAME, SUPERVISOR_PID_NAME

CONFIG = b"version: 0.1\nhttp:\n  addr: 127.0.0.1:5999\n  draintimeout: 1m30s\n"


def _rendered(config: bytes = CONFIG, **files: bytes) -> Rendered:
    return Rendered(config=config, files=dict(files))


def test_the_same_render_again_is_unchanged_and_touches_nothing(tmp_path):
    applier = Applier(tmp_path)
    applier.current = _rendered(htpasswd=b"alice:x\n")
    outcome = applier.apply(_rendered(htpasswd=b"alice:x\n"))
    assert (outcome.action, outcome.ok) == ("unchanged", True)
    assert list(tmp_path.iterdir()) == []


def test_an_htpasswd_change_is_written_without_a_restart_and_kept_as_good(tmp_path):
    applier = Applier(tmp_path)
    applier.current = _rendered(htpasswd=b"alice:x\n")
    new = _rendered(htpasswd=b"alice:x\nbob:y\n")
    outcome = applier.apply(new)
    assert (outcome.action, outcome.ok, outcome.changed_files) == ("htpasswd", True, ["htpasswd"])
    assert (tmp_path / "htpasswd").read_bytes() == b"alice:x\nbob:y\n"
    assert not (tmp_path / CONFIG_NAME).exists()  # config.yml did not change: not rewritten
    assert applier.current is new and load_good(tmp_path).files == new.files


def test_a_restart_with_the_supervisor_gone_fails_and_writes_nothing(tmp_path):
    applier = Applier(tmp_path)
    applier.current = _rendered()
    (tmp_path / SUPERVISOR_PID_NAME).write_text("999999999\n")  # it wrote its pid once; that process is gone
    new = _rendered(CONFIG + b"log:\n  level: debug\n")
    outcome = applier.apply(new)
    assert (outcome.action, outcome.ok, outcome.failed_hash) == ("failed", False, new.identity)
    assert "supervisor" in outcome.detail and "not running" in outcome.detail
    assert not (tmp_path / CONFIG_NAME).exists() and applier.current is not new
    assert not applier.busy


def test_no_supervisor_pid_file_is_a_supervisor_not_started_yet(tmp_path):
    assert Applier(tmp_path).supervisor_gone() is None


def test_on_disk_reads_back_config_and_the_named_files(tmp_path):
    applier = Applier(tmp_path)
    assert applier.on_disk({"htpasswd"}) is None
    (tmp_path / CONFIG_NAME).write_bytes(CONFIG)
    (tmp_path / "htpasswd").write_bytes(b"alice:x\n")
    disk = applier.on_disk({"htpasswd", "tls/tls.crt"})
    assert (disk.config, disk.files, disk.identity) == (CONFIG, {"htpasswd": b"alice:x\n"},
                                                        state_identity(CONFIG, {"htpasswd": b"alice:x\n"}))


def test_the_state_dir_defaults_to_the_config_dir(tmp_path):
    assert Applier(tmp_path).state_dir == tmp_path
    assert Applier(tmp_path, state_dir=tmp_path / "state").state_dir == tmp_path / "state"


def test_where_and_how_long_come_from_the_parsed_render():
    rendered = _rendered()
    endpoint = endpoint_of(rendered)
    assert (endpoint.host, endpoint.port, endpoint.tls) == ("127.0.0.1", 5999, False)
    assert restart_bound(rendered) == 90.0 + 10.0  # the drain plus the start allowance
    assert endpoint_of(_rendered(b"version: 0.1\n")).port == 5000  # the registry's default addr


