"""The node tier: every test here runs pods on the run's one real node (support.node)."""

from __future__ import annotations

import pytest

from support.node import Node
from support.node_berth import install_berth


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/node/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.node)
            item.add_marker(pytest.mark.timeout(900))


@pytest.fixture(scope="session")
def berth_image(kube_node: Node) -> str:
    """Berth installed by `kubectl apply -k deploy` with the image set (once per worker; apply is idempotent)."""
    return install_berth(kube_node)


@pytest.fixture
def node_namespace(kube_node: Node) -> str:
    return kube_node.namespace()
