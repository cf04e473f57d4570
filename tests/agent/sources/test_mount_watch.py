"""MountWatcher against real directories laid out as the kubelet's AtomicWriter lays them out."""

from __future__ import annotations

import asyncio
import contextlib
import errno

import pytest
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

from berth_agent.sources.mount_watch import MountWatcher
from support.common.polling import until
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.registries.sources import running


async def _wait_watching(watcher, path, timeout=10.0):
    await until(lambda: path in watcher.watched, lambda: f"{path} watched (watching {watcher.watched})", timeout)


def _from(source):
    return lambda change: change.source == source


@pytest.mark.asyncio
async def test_secret_swap_is_seen(tmp_path, health, changes):
    root = tmp_path / "mounts"
    write_secret_dir(root / "cosi", {"BucketInfo": '{"v": 1}'})
    write_secret_dir(root / "htpasswd", {"htpasswd": "alice:x"})
    watcher = MountWatcher(root, health, resync_seconds=3600)
    async with running(watcher, changes):
        await _wait_watching(watcher, root / "cosi")
        assert not watcher.polling
        assert swap_secret_dir(root / "cosi", {"BucketInfo": '{"v": 2}'})
        await changes.wait_for(_from("mount:cosi"))
        # Only the swapped volume reports: the other directory saw nothing.
        assert not [c for c in changes.snapshot() if c.source == "mount:htpasswd"]
        assert health.live_ok()


@pytest.mark.asyncio
async def test_reading_the_files_is_not_a_change(tmp_path, health, changes):
    """The pipeline reads what it watches; opens and reads must not count as changes (or it would loop)."""
    root = tmp_path / "mounts"
    (root / "tls").mkdir(parents=True)
    (root / "tls" / "tls.crt").write_text("plain file, as outside Kubernetes")
    watcher = MountWatcher(root, health, resync_seconds=3600)
    async with running(watcher, changes):
        await _wait_watching(watcher, root / "tls")
        for _ in range(5):
            (root / "tls" / "tls.crt").read_text()
        (root / "tls" / "tls.crt").write_text("new content")  # a marker that must arrive after the reads
        await changes.wait_for(_from("mount:tls"))
        await asyncio.sleep(0.3)  # let any stray event of the reads arrive, were there one
        seen = [c for c in changes.snapshot() if c.source == "mount:tls"]
        # The write gives modified + closed-after-write events; 5 reads would add at least 10 more.
        assert 1 <= len(seen) <= 4, seen


@pytest.mark.asyncio
async def test_directory_created_after_start_is_watched(tmp_path, health, changes):
    root = tmp_path / "mounts"
    root.mkdir()
    watcher = MountWatcher(root, health, resync_seconds=3600)
    async with running(watcher, changes):
        await _wait_watching(watcher, root)
        write_secret_dir(root / "redis", {"password": "one"})
        await changes.wait_for(_from("mount:redis"))
        await _wait_watching(watcher, root / "redis")
        changes.clear()
        assert swap_secret_dir(root / "redis", {"password": "two"})
        await changes.wait_for(_from("mount:redis"))


@pytest.mark.asyncio
async def test_unknown_directories_are_ignored(tmp_path, health, changes):
    root = tmp_path / "mounts"
    root.mkdir()
    watcher = MountWatcher(root, health, resync_seconds=3600)
    async with running(watcher, changes):
        await _wait_watching(watcher, root)
        (root / "not-a-source").mkdir()
        write_secret_dir(root / "tls", {"tls.crt": "c"})  # a marker that must arrive after the other one
        await changes.wait_for(_from("mount:tls"))
        assert all(c.source == "mount:tls" for c in changes.snapshot())
        assert root / "not-a-source" not in watcher.watched


def _inotify_exhausted():
    # What watchdog raises at an inotify limit (docs/upstream.md#watchdog-inotify-limits).
    raise OSError(errno.EMFILE, "Too many open files")


@pytest.mark.asyncio
async def test_polling_fallback_when_inotify_is_exhausted(tmp_path, health, changes):
    root = tmp_path / "mounts"
    write_secret_dir(root / "cosi", {"BucketInfo": '{"v": 1}'})
    watcher = MountWatcher(root, health, resync_seconds=3600, observer_factory=_inotify_exhausted, poll_seconds=0.2)
    async with running(watcher, changes):
        await _wait_watching(watcher, root / "cosi")
        assert watcher.polling
        assert swap_secret_dir(root / "cosi", {"BucketInfo": '{"v": 2}'})
        await changes.wait_for(_from("mount:cosi"))
        write_secret_dir(root / "tls", {"tls.crt": "c"})
        await changes.wait_for(_from("mount:tls"))


@pytest.mark.asyncio
async def test_polling_fallback_when_start_fails(tmp_path, health, changes):
    """The limit can also hit when the observer starts its watches, not only when it is made."""

    class ExhaustedObserver(PollingObserver):
        def start(self):
            raise OSError(errno.ENOSPC, "inotify watch limit reached")

    root = tmp_path / "mounts"
    write_secret_dir(root / "http-secret", {"secret": "a"})
    watcher = MountWatcher(root, health, resync_seconds=3600, observer_factory=ExhaustedObserver, poll_seconds=0.2)
    async with running(watcher, changes):
        await _wait_watching(watcher, root / "http-secret")
        assert watcher.polling
        assert swap_secret_dir(root / "http-secret", {"secret": "b"})
        await changes.wait_for(_from("mount:http-secret"))


@pytest.mark.asyncio
async def test_forced_polling_sees_a_swap(tmp_path, health, changes):
    root = tmp_path / "mounts"
    write_secret_dir(root / "htpasswd", {"htpasswd": "a"})
    watcher = MountWatcher(root, health, resync_seconds=3600, force_polling=True, poll_seconds=0.2)
    async with running(watcher, changes):
        await _wait_watching(watcher, root / "htpasswd")
        assert swap_secret_dir(root / "htpasswd", {"htpasswd": "b"})
        await changes.wait_for(_from("mount:htpasswd"))


@pytest.mark.asyncio
async def test_periodic_resync(tmp_path, health, changes):
    root = tmp_path / "mounts"
    root.mkdir()
    watcher = MountWatcher(root, health, resync_seconds=0.2)
    async with running(watcher, changes):
        await changes.wait_for(_from("resync"))
        changes.clear()
        await changes.wait_for(_from("resync"))  # again: it repeats
        assert {change.source for change in changes.snapshot()} == {"resync"}  # nothing mounted: nothing else said


@pytest.mark.asyncio
async def test_missing_root_appears_later(tmp_path, health, changes):
    root = tmp_path / "mounts"
    watcher = MountWatcher(root, health, resync_seconds=0.2)
    async with running(watcher, changes):
        await changes.wait_for(_from("resync"))
        write_secret_dir(root / "cosi", {"BucketInfo": "{}"})
        # Picked up by the resync, which also reports the new directory itself.
        await changes.wait_for(_from("mount:cosi"))
        await _wait_watching(watcher, root / "cosi")
        assert watcher.watched == {root, root / "cosi"}  # the root that appeared, and the directory in it


@pytest.mark.asyncio
async def test_liveness_registered_and_released(tmp_path, health, changes):
    root = tmp_path / "mounts"
    root.mkdir()
    watcher = MountWatcher(root, health, resync_seconds=3600)
    async with running(watcher, changes):
        await _wait_watching(watcher, root)
        assert "mounts" in health.registered()
    assert "mounts" not in health.registered()  # stopped on purpose: no longer counts against /livez


@pytest.mark.asyncio
async def test_directory_deleted_and_made_again_is_watched_again(tmp_path, health, changes):
    import shutil

    root = tmp_path / "mounts"
    write_secret_dir(root / "tls", {"tls.crt": "one"})
    watcher = MountWatcher(root, health, resync_seconds=3600)
    async with running(watcher, changes):
        await _wait_watching(watcher, root / "tls")
        shutil.rmtree(root / "tls")  # its watch dies with it (IN_DELETE_SELF)
        await until(lambda: root / "tls" not in watcher.watched, "tls no longer watched", 10)
        write_secret_dir(root / "tls", {"tls.crt": "two"})
        await changes.wait_for(_from("mount:tls"))
        await _wait_watching(watcher, root / "tls")  # re-armed by the rescan the root's event asked for
        changes.clear()
        assert swap_secret_dir(root / "tls", {"tls.crt": "three"})
        await changes.wait_for(_from("mount:tls"))  # seen by the new watch, not by a resync (an hour away)


class _Clock:
    now = 1000.0

    def __call__(self):
        return self.now


class _DeadObserver(PollingObserver):
    """An observer whose dispatch thread ends at once: what a crash in watchdog's thread looks like."""

    def run(self):
        return


@pytest.mark.parametrize("factory, alive", [(PollingObserver, True), (_DeadObserver, False)])
@pytest.mark.asyncio
async def test_liveness_follows_the_observer_thread(tmp_path, changes, factory, alive):
    from berth_agent.core.health import Health

    clock = _Clock()
    health = Health(clock=clock)
    root = tmp_path / "mounts"
    root.mkdir()
    watcher = MountWatcher(root, health, resync_seconds=3600, tick_seconds=0.05, observer_factory=factory)
    async with running(watcher, changes):
        await until(lambda: "mounts" in health.registered(), "the mount watcher registered in health", 10)
        await asyncio.sleep(0.2)
        clock.now += 10_000  # far past the allowed silence; a live watcher beats again at its next tick
        if alive:
            await until(health.live_ok, "the watcher live", 10)
        else:
            await asyncio.sleep(0.3)  # several ticks, none of which may beat
            assert not health.live_ok() and health.stale_loops()[0].startswith("mounts (silent")


class _ObserverAtItsLimit(Observer):
    """inotify that has room for the watches made at start, and none for any added later (ENOSPC)."""

    def schedule(self, *args, **kwargs):
        if self.is_alive():
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().schedule(*args, **kwargs)


@pytest.mark.asyncio
async def test_limit_reached_after_start_falls_back_to_polling(tmp_path, health, changes):
    root = tmp_path / "mounts"
    write_secret_dir(root / "cosi", {"BucketInfo": "1"})
    # Resync every second: the root's inotify watch is added by the observer's emitter thread a moment after
    # start, and a directory created before it is live is found by the resync (as in a pod), not by an event.
    watcher = MountWatcher(root, health, resync_seconds=1, observer_factory=_ObserverAtItsLimit,
                           poll_seconds=0.2)
    async with running(watcher, changes):
        await _wait_watching(watcher, root / "cosi")
        assert not watcher.polling
        write_secret_dir(root / "tls", {"tls.crt": "one"})  # its watch hits the limit
        await until(lambda: watcher.polling, "the watcher polling", 10)
        await _wait_watching(watcher, root / "tls")
        changes.clear()
        assert swap_secret_dir(root / "tls", {"tls.crt": "two"})
        await changes.wait_for(_from("mount:tls"))
        assert swap_secret_dir(root / "cosi", {"BucketInfo": "2"})  # the earlier directory is still watched
        await changes.wait_for(_from("mount:cosi"))


@pytest.mark.asyncio
async def test_cancel_while_starting_leaves_no_watch_threads(tmp_path, health, changes):
    """Cancelled while its observer is still starting in a worker thread: everything is stopped anyway."""
    import threading

    started = threading.Event()
    release = threading.Event()

    class SlowStartingObserver(PollingObserver):
        def start(self):
            started.set()
            release.wait(30)  # still starting when the cancel arrives
            super().start()

    root = tmp_path / "mounts"
    write_secret_dir(root / "cosi", {"BucketInfo": "1"})
    before = set(threading.enumerate())
    watcher = MountWatcher(root, health, resync_seconds=3600, observer_factory=SlowStartingObserver)
    task = asyncio.create_task(watcher.run(changes))
    await asyncio.to_thread(started.wait, 30)
    task.cancel()
    await asyncio.sleep(0.1)
    release.set()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert "mounts" not in health.registered()
    await until(lambda: not [t for t in set(threading.enumerate()) - before if t.is_alive()
                             and t.name != "asyncio_0" and not t.name.startswith("asyncio_")],
                "the watcher's threads gone", 10)


@pytest.mark.asyncio
async def test_a_cancel_that_lands_with_a_rescan_still_stops_the_watcher(tmp_path, health, changes):
    """On Python 3.11, asyncio.wait_for swallows a cancel that arrives as the awaited event is set; the watcher
    then ran for ever and the agent could not stop. Set the event and cancel in the same loop iteration."""
    root = tmp_path / "mounts"
    (root / "cosi").mkdir(parents=True)
    for attempt in range(5):
        watcher = MountWatcher(root, health, resync_seconds=3600)
        task = asyncio.create_task(watcher.run(changes))
        await _wait_watching(watcher, root / "cosi")
        for _ in range(attempt):
            await asyncio.sleep(0)
        watcher._rescan.set()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=10)
        assert done, f"the watcher ignored the cancel (attempt {attempt})"
