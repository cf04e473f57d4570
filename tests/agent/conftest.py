"""Shared fixtures of the agent tests (pipeline and sources engineers both add here; never delete)."""

from __future__ import annotations

import logging

import pytest

from support.common.polling import until
from support.common.ports import free_port
from support.registries.supervisor import supervisors


@pytest.fixture(autouse=True)
def _restore_logging_levels():
    """setup_json_logging sets the root level (tests pass DEBUG) and quiets library loggers: a test that calls it
    must not change which records the next test on the same worker captures."""
    names = ("", "urllib3", "kubernetes", "watchdog", "aiohttp.access")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture
def registry_port() -> int:
    return free_port()


@pytest.fixture
def supervisor_factory(tmp_path):
    """Start berth-supervise (config in tmp_path/config) and stop it, and whatever it started, afterwards."""
    yield from supervisors(tmp_path / "config")


# ---- sources and reporting (sources engineer) ----


class ChangeCollector:
    """An Emit for the source tests: thread-safe, records every Change, and lets a test wait for one."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self.changes: list = []

    def __call__(self, change) -> None:  # sources call this from their own threads
        with self._lock:
            self.changes.append(change)

    def snapshot(self) -> list:
        with self._lock:
            return list(self.changes)

    def clear(self) -> None:
        with self._lock:
            self.changes.clear()

    async def wait_for(self, predicate, timeout: float = 20.0):
        """The first recorded Change matching `predicate`, polling; generous timeout, never a timing claim."""
        def first():
            return next((change for change in self.snapshot() if predicate(change)), None)

        return await until(first, lambda: f"a matching change; saw {self.snapshot()!r}", timeout)


@pytest.fixture
def changes() -> ChangeCollector:
    return ChangeCollector()


@pytest.fixture
def health():
    from berth_agent.core.health import Health

    return Health()


@pytest.fixture
def dist() -> tuple[str, str]:
    """(major, registry binary) the `pod` runs: Debian's 2.8. A test runs on both majors with
    `@pytest.mark.parametrize("dist", support.registries.registry.registry_binaries())` (3.x skips without its
    binary)."""
    from support.registries.supervisor import REGISTRY_BIN

    return ("2", REGISTRY_BIN)


@pytest.fixture
def pod(tmp_path, dist):
    """A registry pod on this machine (agent subprocess + berth-supervise + the registry); stopped afterwards."""
    from support.registries.pod import RegistryPod

    registry_pod = RegistryPod(tmp_path / "pod", binary=dist[1])
    yield registry_pod
    registry_pod.stop()
