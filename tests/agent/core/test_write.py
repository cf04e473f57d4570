"""Atomic writes into the config volume."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from berth_agent.core.write import remove_stale, safe_join, write_atomic, write_tree


def test_writes_with_mode_0600_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "config.yml"
    assert write_atomic(target, b"version: 0.1\n")
    assert target.read_bytes() == b"version: 0.1\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["config.yml"]


def test_an_unchanged_file_is_not_rewritten(tmp_path):
    # The registry re-reads htpasswd when its mtime changes (docs/upstream.md#dist-htpasswd-live): same bytes, same
    # inode, same mtime.
    target = tmp_path / "htpasswd"
    write_atomic(target, b"user:$2y$hash\n")
    before = target.stat()
    assert not write_atomic(target, b"user:$2y$hash\n")
    after = target.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_a_wrong_mode_is_repaired(tmp_path):
    target = tmp_path / "config.yml"
    target.write_bytes(b"x")
    os.chmod(target, 0o644)
    assert write_atomic(target, b"x")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_readers_only_ever_see_a_whole_file(tmp_path):
    target = tmp_path / "config.yml"
    old, new = b"a" * 200_000, b"b" * 300_000
    write_atomic(target, old)
    seen: set[bytes] = set()
    stop = threading.Event()

    def read_loop():
        while not stop.is_set():
            seen.add(target.read_bytes())

    reader = threading.Thread(target=read_loop)
    reader.start()
    try:
        for i in range(50):
            write_atomic(target, new if i % 2 == 0 else old)
    finally:
        stop.set()
        reader.join()
    assert seen <= {old, new}


def test_write_tree_makes_subdirectories_and_reports_changes(tmp_path):
    files = {"htpasswd": b"a:b\n", "tls/tls.crt": b"CERT", "tls/tls.key": b"KEY"}
    assert sorted(write_tree(tmp_path, files)) == sorted(files)
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "tls" / "tls.key").stat().st_mode) == 0o600
    assert write_tree(tmp_path, {**files, "htpasswd": b"c:d\n"}) == ["htpasswd"]


def test_remove_stale_deletes_only_managed_files_no_longer_rendered(tmp_path):
    write_tree(tmp_path, {"tls/tls.crt": b"C", "tls/tls.key": b"K", "htpasswd": b"h"})
    (tmp_path / "other").write_text("not ours")
    removed = remove_stale(tmp_path, keep={"htpasswd"}, managed={"htpasswd", "tls/tls.crt", "tls/tls.key"})
    assert removed == ["tls/tls.crt", "tls/tls.key"]
    assert (tmp_path / "htpasswd").exists() and (tmp_path / "other").exists()


@pytest.mark.parametrize("bad", ["/etc/passwd", "../escape", "tls/../../x", ""])
def test_paths_outside_the_config_dir_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="outside the config directory"):
        safe_join(tmp_path, bad)


def test_a_full_volume_is_reported_with_the_errno_and_the_target_path(tmp_path):
    """A file size limit (RLIMIT_FSIZE, in a child process) fails write(2) as a full volume does: the report
    names the errno and config.yml, not the temp file, and never the data."""
    import subprocess
    import sys

    script = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from berth_agent.core.errors import describe_internal_error\n"
        "from berth_agent.core.write import write_atomic\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))\n"
        "try:\n"
        "    write_atomic(Path(sys.argv[1]), b'secret-data-' * 1000)\n"
        "except OSError as exc:\n"
        "    print(describe_internal_error(exc))\n"
    )
    target = tmp_path / "config.yml"
    result = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True, timeout=60)
    assert result.stdout.startswith(f"internal error OSError EFBIG writing {target} (at write.py:"), result
    assert "secret-data" not in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []  # no temp file left behind
