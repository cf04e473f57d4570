"""The node tier: every test here runs pods on the run's one real node (support.clusters.node)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from support.clusters.node import Node
from support.clusters.node_berth import install_berth, node_turn_lock


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/node/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.node)
            item.add_marker(pytest.mark.timeout(900))


@pytest.fixture(scope="session")
def berth_image(kube_node: Node) -> str:
    """Berth installed by `kubectl apply -k crds` then `kubectl apply -k deploy` with the image set (once per
    worker; apply is idempotent).
    In the node's turn: a worker's first test sets this up before its own turn, and its apply would put the
    operator's image back under an upgrade running alone (a CI run's upgrade timed out on that)."""
    with node_turn_lock(kube_node, exclusive=False):
        return install_berth(kube_node)


@pytest.fixture(autouse=True)
def node_turn(kube_node: Node, request: pytest.FixtureRequest) -> Iterator[None]:
    """Node tests share the node and its operator: each holds the turn shared while it runs; an operator
    upgrade (node_exclusive) rolls every Registry on the node and holds it alone."""
    with node_turn_lock(kube_node, exclusive=request.node.get_closest_marker("node_exclusive") is not None):
        yield


@pytest.fixture
def node_namespace(kube_node: Node, namespace_cleanup: NamespaceCleanup) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards with its pods waited out: the tier's pods would
    otherwise add up over the run (about 1.4 GiB with every case's left running)."""
    name = kube_node.namespace()
    yield name
    namespace_cleanup.start(kube_node, name)


class NamespaceCleanup:
    """Node.delete_namespace in the background: a registry pod takes about 12 s to stop (its pre-stop wait and
    drain), and a test that waited for it held the node's turn meanwhile, so an exclusive test waited for every
    shared test's cleanup (25 of them: 5 min of a run). A failure is raised at the end of the worker's session."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.problems: list[str] = []

    def start(self, node: Node, name: str) -> None:
        def delete() -> None:
            try:
                seconds = node.delete_namespace(name)
                print(f"namespace {name} and its pods gone in {seconds:.1f} s")
            except Exception as error:  # reported when the session ends
                self.problems.append(f"namespace {name}: {error}")

        thread = threading.Thread(target=delete, name=f"delete-{name}", daemon=True)
        thread.start()
        self.threads.append(thread)

    def wait(self) -> list[str]:
        for thread in self.threads:
            thread.join(330)
        return self.problems + [f"{thread.name} still running" for thread in self.threads if thread.is_alive()]


@pytest.fixture(scope="session")
def namespace_cleanup() -> Iterator[NamespaceCleanup]:
    cleanup = NamespaceCleanup()
    yield cleanup
    if problems := cleanup.wait():
        pytest.fail("a test namespace was not cleaned up: " + "; ".join(problems))
