"""PvcProbe against real directories: present, mount point, size, writable; Change("pvc") on state changes."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import tempfile
from pathlib import Path

import pytest

from berth_agent.core import metrics
from berth_agent.sources.pvc import PROBE_FILE, PvcProbe, probe_path


def test_plain_directory_is_usable_but_not_mounted(tmp_path, health):
    probe = PvcProbe(tmp_path, health)
    state = probe.check()
    assert state.ok and state.present and state.writable and not state.mounted
    assert state.capacity_bytes > 0 and 0 <= state.free_bytes <= state.capacity_bytes
    assert not list(tmp_path.glob(PROBE_FILE + "*"))  # the probe file is removed again
    assert metrics.pvc_ok._value.get() == 1
    assert metrics.pvc_capacity_bytes._value.get() == state.capacity_bytes


@pytest.mark.parametrize("pod_env", [False, True], ids=["workstation", "pod"])
def test_a_plain_directory_is_one_info_line_outside_a_pod_and_a_warning_inside(tmp_path, health, caplog, monkeypatch,
                                                                               pod_env):
    # The kubelet sets KUBERNETES_SERVICE_HOST in every container; examples/local/run has none.
    if pod_env:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    else:
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    probe = PvcProbe(tmp_path, health)
    with caplog.at_level("INFO", logger="berth_agent.sources.pvc"):
        for _ in range(3):
            probe.check()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "berth_agent.sources.pvc"]
    if pod_env:
        assert lines == [("WARNING", "data path is not a mount point")]
    else:
        assert lines == [("INFO", "data path is a plain directory (no volume mounted there; expected outside "
                                  "Kubernetes)")]


def test_a_mount_point_is_reported_mounted():
    mount_point = Path("/dev/shm")  # a tmpfs mount on every Linux this runs on
    assert os.path.ismount(mount_point)
    state = probe_path(mount_point)
    assert state.mounted and state.ok


def test_missing_path_is_an_error_naming_it(tmp_path, health):
    missing = tmp_path / "registry-data"
    state = PvcProbe(missing, health).check()
    assert state.error == f"data path {missing}: does not exist"
    assert not state.ok and not state.present
    assert metrics.pvc_ok._value.get() == 0


def test_a_file_is_not_a_data_path(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    assert probe_path(path).error == f"data path {path}: is not a directory"


def _probe_as_nobody(path: str, results) -> None:
    try:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)  # root writes anywhere: drop to nobody so the permission check is real
        results.put(probe_path(Path(path)))
    except BaseException as exc:  # noqa: BLE001 - hand the failure to the test instead of hanging it
        results.put(exc)


@pytest.fixture
def open_dir():
    """A directory anyone may enter (pytest's tmp_path sits under a 0700 directory)."""
    with tempfile.TemporaryDirectory(prefix="berth-pvc-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


def _probe_without_privilege(path: Path):
    """probe_path as a user the permission bits apply to: nobody (in a forked child) when we are root."""
    if os.geteuid() != 0:
        return probe_path(path)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_probe_as_nobody, args=(str(path), results))
    child.start()
    try:
        result = results.get(timeout=60)
    finally:
        child.join(timeout=30)
    if isinstance(result, BaseException):
        raise result
    return result


def test_unwritable_path_is_an_error_naming_it(open_dir):
    data = open_dir / "data"
    data.mkdir()
    data.chmod(0o555)  # nobody may write here (root aside, hence the unprivileged probe)
    try:
        state = _probe_without_privilege(data)
    finally:
        data.chmod(0o755)
    assert state.present and not state.writable
    assert state.error == f"data path {data}: not writable (Permission denied)"
    assert state.capacity_bytes is not None  # size is still known and still reported


def test_unenterable_parent_is_an_error_naming_the_path(open_dir):
    parent = open_dir / "locked"
    (parent / "data").mkdir(parents=True)
    parent.chmod(0o700 if os.geteuid() == 0 else 0o000)
    try:
        state = _probe_without_privilege(parent / "data")
    finally:
        parent.chmod(0o755)
    assert state.error == f"data path {parent / 'data'}: cannot stat (Permission denied)"


@pytest.mark.asyncio
async def test_changes_only_when_the_state_changes(tmp_path, health, changes):
    data = tmp_path / "data"
    data.mkdir()
    probe = PvcProbe(data, health, interval=0.05)
    task = asyncio.create_task(probe.run(changes))
    try:
        while probe.last is None:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # several probes of a usable path
        assert changes.snapshot() == []  # nothing to report while it stays usable
        data.rmdir()
        await changes.wait_for(lambda c: c.source == "pvc")
        await asyncio.sleep(0.3)  # several probes of the same failure
        assert len(changes.snapshot()) == 1
        assert probe.last.error == f"data path {data}: does not exist"
        data.mkdir()
        await changes.wait_for(lambda c: len(changes.snapshot()) == 2)
        while not probe.last.ok:
            await asyncio.sleep(0.05)
        assert "pvc" in health.registered() and health.live_ok()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert "pvc" not in health.registered()


@pytest.mark.asyncio
async def test_disabled_probe_stays_quiet(tmp_path, health, changes):
    """Object storage: no PVC is mounted, and a missing data path is not news."""
    probe = PvcProbe(tmp_path / "not-mounted", health, interval=0.05, enabled=False)
    task = asyncio.create_task(probe.run(changes))
    try:
        await asyncio.sleep(0.3)
        assert changes.snapshot() == [] and probe.last is None and health.live_ok()
        probe.set_enabled(True)  # the Registry moved to filesystem storage
        await changes.wait_for(lambda c: c.source == "pvc")
        assert probe.last.error == f"data path {tmp_path / 'not-mounted'}: does not exist"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.asyncio
async def test_each_probe_is_handed_on_and_withdrawn_when_switched_off(tmp_path, health, changes):
    """on_state gets every periodic probe's state (the reporter decides what is worth a status write), and one
    None when probing is switched off, so a stale dataPath does not outlive filesystem storage."""
    seen: list = []

    async def on_state(state):
        seen.append(state)

    probe = PvcProbe(tmp_path, health, interval=0.05, on_state=on_state)
    task = asyncio.create_task(probe.run(changes))
    try:
        while len(seen) < 2:
            await asyncio.sleep(0.05)
        assert all(s is not None and s.ok and s.capacity_bytes for s in seen)
        probe.set_enabled(False)
        while seen[-1] is not None:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # several idle intervals: withdrawn once, not on every one
        assert seen.count(None) == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_concurrent_probes_of_one_path_do_not_collide(tmp_path):
    """The periodic loop and the pipeline probe at the same moment, and replicas share a ReadWriteMany volume:
    each probe writes a file of its own, so none reports the path unwritable because of another."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        states = list(pool.map(lambda _: probe_path(tmp_path), range(400)))
    assert [s.error for s in states if s.error] == []
    assert not list(tmp_path.glob(PROBE_FILE + "*"))
