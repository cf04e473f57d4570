"""The registry's first error line, as quoted in failure messages: found, and scrubbed of what could be secret."""

from __future__ import annotations

from berth_agent.restart.registry_output import first_error, keep_bounded, scrub


def test_scrub_drops_userinfo_key_values_and_long_runs():
    line = ('time="2026-11-30T14:37:03Z" level=fatal msg="redis: dial redis://alice:hunter2@10.0.0.9:6379 '
            'failed; password=hunter2 token: abc; key AKIAIOSFODNN7EXAMPLE0123456789abcdef"')
    text = scrub(line)
    for secret in ("hunter2", "alice", "AKIAIOSFODNN7EXAMPLE0123456789abcdef", "abc;"):
        assert secret not in text, text
    assert text.startswith("level=fatal") and "redis://<redacted>@10.0.0.9:6379" in text
    assert len(scrub("x" * 1000 + " y")) <= 300


def test_first_error_prefers_the_last_exited_registry_and_skips_info_lines(tmp_path):
    (tmp_path / "registry-output").write_text('level=info msg="listening on 127.0.0.1:5000"\n')
    assert first_error(tmp_path) is None
    (tmp_path / "registry-output.1").write_text(
        'level=info msg="redis not configured"\n'
        'level=fatal msg="listen tcp 127.0.0.2:5000: bind: address already in use"\n')
    assert first_error(tmp_path) == 'level=fatal msg="listen tcp 127.0.0.2:5000: bind: address already in use"'


def test_the_output_file_is_kept_bounded(tmp_path):
    path = tmp_path / "registry-output"
    path.write_bytes(b"x" * 100)
    keep_bounded(tmp_path, limit=200)
    assert path.stat().st_size == 100
    keep_bounded(tmp_path, limit=50)
    assert path.stat().st_size == 0
