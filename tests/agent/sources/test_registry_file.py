"""RegistryFileWatcher (--registry-file): real files, edited in place, replaced by rename, broken and fixed."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest
import yaml

from berth_agent.sources.registry_file import RegistryFileWatcher, read_registry_file
from support.registries.sources import running

REGISTRY = {
    "apiVersion": "berth.dev/v1alpha1",
    "kind": "Registry",
    "metadata": {"name": "local", "namespace": "default"},
    "spec": {"config": {"log": {"level": "info"}, "storage": {"filesystem": {"rootdirectory": "/tmp/x"}}}},
}


def _level(change):
    return change.registry["spec"]["config"]["log"]["level"] if change.registry else None


def _with_level(level: str) -> dict:
    obj = yaml.safe_load(yaml.safe_dump(REGISTRY))
    obj["spec"]["config"]["log"]["level"] = level
    return obj


@pytest.mark.asyncio
async def test_initial_read_then_edits(tmp_path, health, changes):
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    watcher = RegistryFileWatcher(path, health, recheck_seconds=3600)
    async with running(watcher, changes):
        first = await changes.wait_for(lambda c: c.source == "registry")
        assert first.error is None and first.registry == REGISTRY

        path.write_text(yaml.safe_dump(_with_level("debug")))  # edited in place
        await changes.wait_for(lambda c: _level(c) == "debug")

        replacement = tmp_path / ".registry.yaml.swp"  # an editor's save: write aside, rename over
        replacement.write_text(yaml.safe_dump(_with_level("warn")))
        os.rename(replacement, path)
        await changes.wait_for(lambda c: _level(c) == "warn")

        # A rewrite with the same content (different formatting) is not a change.
        before = len(changes.snapshot())
        path.write_text(yaml.safe_dump(_with_level("warn"), default_flow_style=True))
        path.write_text(yaml.safe_dump(_with_level("error")))  # marker after it
        await changes.wait_for(lambda c: _level(c) == "error")
        levels = [_level(c) for c in changes.snapshot()[before:]]
        assert levels == ["error"], levels


@pytest.mark.asyncio
async def test_bad_yaml_is_an_error_naming_the_file_and_recovers(tmp_path, health, changes):
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    watcher = RegistryFileWatcher(path, health, recheck_seconds=3600)
    async with running(watcher, changes):
        await changes.wait_for(lambda c: c.registry is not None)
        planted = "s3cr3t-value-that-must-not-leak"
        path.write_text(f"spec:\n  config: {{\n    password: {planted}\n  bad: [\n")
        bad = await changes.wait_for(lambda c: c.error is not None)
        assert bad.source == "registry" and bad.registry is None
        assert str(path) in bad.error and "invalid YAML at line" in bad.error
        assert planted not in bad.error  # the file's content is never quoted
        path.write_text(yaml.safe_dump(REGISTRY))
        recovered = await changes.wait_for(lambda c: c.registry is not None and c is not changes.snapshot()[0])
        assert recovered.error is None and recovered.registry == REGISTRY


@pytest.mark.asyncio
async def test_missing_file_then_created(tmp_path, health, changes):
    path = tmp_path / "registry.yaml"
    watcher = RegistryFileWatcher(path, health, recheck_seconds=3600)
    async with running(watcher, changes):
        missing = await changes.wait_for(lambda c: c.error is not None)
        assert missing.error == f"registry file {path}: not found"
        path.write_text(yaml.safe_dump(REGISTRY))
        await changes.wait_for(lambda c: c.registry == REGISTRY)


@pytest.mark.asyncio
async def test_polling_fallback(tmp_path, health, changes):
    def exhausted():
        raise OSError(errno.EMFILE, "Too many open files")

    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    watcher = RegistryFileWatcher(path, health, observer_factory=exhausted, poll_seconds=0.2, recheck_seconds=3600)
    async with running(watcher, changes):
        await changes.wait_for(lambda c: c.registry is not None)
        assert watcher.polling
        path.write_text(yaml.safe_dump(_with_level("debug")))
        await changes.wait_for(lambda c: _level(c) == "debug")


@pytest.mark.parametrize(
    "content, expected",
    [
        ("", "is empty"),
        ("- a\n- b\n", "must hold one YAML mapping (a Registry), not a list"),
        ("a: [1, 2\n", "invalid YAML at line 2, column 1"),
        ("key: value\n\tbad: tab\n", "invalid YAML at line 2"),
    ],
)
def test_read_errors(tmp_path, content, expected):
    path = tmp_path / "r.yaml"
    path.write_text(content)
    obj, error = read_registry_file(path)
    assert obj is None and error.startswith(f"registry file {path}: ") and expected in error


def test_directory_is_an_error(tmp_path):
    assert read_registry_file(tmp_path) == (None, f"registry file {tmp_path}: is a directory")


@pytest.mark.asyncio
async def test_file_in_a_configmap_style_volume(tmp_path, health, changes):
    """The file as a mounted ConfigMap shows it: a symlink into ..data, updated by the AtomicWriter's swap."""
    from support.registries.secretdir import swap_secret_dir, write_secret_dir

    volume = write_secret_dir(tmp_path / "config-volume", {"registry.yaml": yaml.safe_dump(REGISTRY)})
    watcher = RegistryFileWatcher(volume / "registry.yaml", health, recheck_seconds=3600)
    async with running(watcher, changes):
        await changes.wait_for(lambda c: c.registry == REGISTRY)
        assert swap_secret_dir(volume, {"registry.yaml": yaml.safe_dump(_with_level("debug"))})
        await changes.wait_for(lambda c: _level(c) == "debug")


@pytest.mark.asyncio
async def test_a_cancel_that_lands_with_a_wake_still_stops_the_watcher(tmp_path, health, changes):
    """The registry file watcher's counterpart of the mount watcher's cancel test (Python 3.11 wait_for)."""
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    for attempt in range(5):
        watcher = RegistryFileWatcher(path, health, recheck_seconds=3600)
        task = asyncio.create_task(watcher.run(changes))
        await changes.wait_for(lambda c: c.source == "registry")
        changes.clear()
        for _ in range(attempt):
            await asyncio.sleep(0)
        watcher._wake.set()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=10)
        assert done, f"the watcher ignored the cancel (attempt {attempt})"


@pytest.mark.parametrize(
    "content, expected",
    [
        ("apiVersion: berth.dev/v9\nkind: Registry\nspec: {}\n", "apiVersion: must be berth.dev/v1alpha1"),
        ("apiVersion: berth.dev/v1alpha1\nkind: Deployment\nspec: {}\n", "kind: must be Registry"),
        ("kind: Registry\nspec: {}\n", "apiVersion: is missing"),
        ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
        ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
            for p, c in zip("abcdefgh", "bcdefghi")), "expands to more than 100000 YAML nodes"),
        ("spec: {}\n" + "# padding\n" * 200_000, "is larger than 1536 KiB"),
    ],
    ids=["apiVersion", "kind", "no-apiVersion", "deep", "alias-bomb", "oversize"],
)
def test_hostile_files_are_refused(tmp_path, content, expected):
    path = tmp_path / "r.yaml"
    path.write_text(content)
    obj, error = read_registry_file(path)
    assert obj is None and error.startswith(f"registry file {path}: ") and expected in error, error


def test_a_fifo_in_place_of_the_file_does_not_block(tmp_path):
    import threading

    path = tmp_path / "r.yaml"
    os.mkfifo(path)
    result: list = []
    reader = threading.Thread(target=lambda: result.append(read_registry_file(path)), daemon=True)
    reader.start()
    reader.join(30)  # a hang guard: open(2) of a FIFO without a writer never returns
    if reader.is_alive():
        with open(path, "wb"):  # a writer lets the stuck reader go
            pass
        pytest.fail("reading a FIFO blocked")
    assert result == [(None, f"registry file {path}: is a FIFO, not a regular file")]
