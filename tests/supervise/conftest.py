"""berth-supervise's own tests: the real program, the real registry (support.registries.supervisor)."""

from __future__ import annotations

import pytest

from support.common.ports import free_port
from support.registries.supervisor import supervisors


@pytest.fixture
def registry_port() -> int:
    return free_port()


@pytest.fixture
def supervisor_factory(tmp_path):
    """Start berth-supervise (config in tmp_path/config) and stop it, and whatever it started, afterwards."""
    yield from supervisors(tmp_path / "config")
