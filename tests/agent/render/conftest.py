"""Fixtures for the rendering tests: the real registry and moto S3 from tests/support."""

import pytest

from support.registries.registry import (
    registry_binaries,
)


@pytest.fixture(params=registry_binaries())
def dist(request) -> tuple[str, str]:
    """(major, registry binary): a test using it runs on Distribution 2.8 and on the real 3.x (which skips, saying
    why, without BERTH_REGISTRY3_BIN). Render with `distribution=dist[0]`, start with `binary=dist[1]`."""
    return request.param
