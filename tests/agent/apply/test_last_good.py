"""last_good: the copy of the last config verified good, and how a damaged copy is refused."""

from __future__ import annotations

import json
import stat

from berth_agent.apply.last_good import GOOD_DIR, MARKER_NAME, load_good, save_good
from berth_agent.render import Rendered


def _rendered(config: bytes = b"version: 0.1\n", **files: bytes) -> Rendered:
    return Rendered(config=config, files=dict(files))


def test_what_is_saved_loads_back_whole(tmp_path):
    good = _rendered(b"version: 0.1\nhttp:\n  addr: :5000\n", htpasswd=b"alice:x\n", **{"tls/tls.crt": b"CERT"})
    save_good(tmp_path, good)
    back = load_good(tmp_path)
    assert back is not None
    assert (back.config, back.files, back.identity) == (good.config, good.files, good.identity)
    assert back.listen_addr == ":5000"  # parsed on first use, from the copy


def test_nothing_saved_is_none(tmp_path):
    assert load_good(tmp_path) is None


def test_a_newer_save_replaces_the_older_copy(tmp_path):
    first, second = _rendered(b"version: 0.1\n# one\n"), _rendered(b"version: 0.1\n# two\n")
    save_good(tmp_path, first)
    save_good(tmp_path, second)
    assert load_good(tmp_path).identity == second.identity
    assert sorted(p.name for p in (tmp_path / GOOD_DIR).iterdir() if p.is_dir()) == [second.identity]


def test_saving_the_same_config_again_writes_nothing(tmp_path):
    good = _rendered()
    save_good(tmp_path, good)
    marker = tmp_path / GOOD_DIR / MARKER_NAME
    before = marker.stat().st_mtime_ns
    save_good(tmp_path, good)
    assert marker.stat().st_mtime_ns == before


def test_a_copy_that_does_not_match_its_marker_is_refused(tmp_path):
    good = _rendered(htpasswd=b"alice:x\n")
    save_good(tmp_path, good)
    (tmp_path / GOOD_DIR / good.identity / "htpasswd").write_bytes(b"mallory:y\n")
    assert load_good(tmp_path) is None


def test_a_marker_naming_another_hash_or_no_config_is_refused(tmp_path):
    good = _rendered()
    save_good(tmp_path, good)
    marker = tmp_path / GOOD_DIR / MARKER_NAME
    document = json.loads(marker.read_text())
    marker.write_text(json.dumps({**document, "files": {}}))
    assert load_good(tmp_path) is None  # no config.yml named
    marker.write_text("not json")
    assert load_good(tmp_path) is None


def test_the_copy_is_ours_alone(tmp_path):
    good = _rendered(htpasswd=b"alice:x\n")
    save_good(tmp_path, good)
    for path in (tmp_path / GOOD_DIR).rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
