"""The order xdist's workers take the suite in: the node tier's long pole starts at once, beside the rest.

The node tier (tests/node) is the run's critical path: one node, tests that hold it alone (node_exclusive: an
install, an uninstall, an upgrade) one after the other, and shared ones that load the two cores with pods. Left in
collection order it came last, on whichever worker it fell to, after every other tier was done (docs/design.md
§5.8).

`--dist worksteal` first hands each worker a contiguous block of the collection, in equal counts, and a worker
that runs dry steals the back half of the longest queue. So the collection is laid out in those blocks:
- the first block starts with every node_exclusive test: its worker starts the node and runs them while the others
  run tests that never touch the node, so nothing waits on the node's lock;
- the shared node tests end the other blocks, spread evenly: they run once the exclusive ones are done, and they
  are what an idle worker steals first.
In each block every module's tests keep their order, so a worker sets a module's fixtures up once. Without xdist the
order is the collection's.
"""

from __future__ import annotations

import os
import time

import pytest


def _is_node(item: pytest.Item) -> bool:
    return "tests/node/" in str(item.path).replace("\\", "/")


def block_sizes(count: int, workers: int) -> list[int]:
    """The sizes of the blocks worksteal's first distribution hands out (pending // nodes remaining, in turn)."""
    sizes = []
    for remaining in range(workers, 0, -1):
        sizes.append((count - sum(sizes)) // remaining)
    return sizes


def laid_out(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    exclusive = [item for item in items if _is_node(item) and item.get_closest_marker("node_exclusive")]
    shared = [item for item in items if _is_node(item) and not item.get_closest_marker("node_exclusive")]
    others = [item for item in items if not _is_node(item)]
    if workers < 2 or not (exclusive or shared):
        return items
    sizes = block_sizes(len(items), workers)
    tails = [[]] + [shared[index::workers - 1] for index in range(workers - 1)]
    heads = [exclusive] + [[] for _ in range(workers - 1)]
    ordered: list[pytest.Item] = []
    taken = 0
    for size, head, tail in zip(sizes, heads, tails, strict=True):
        fill = max(0, size - len(head) - len(tail))
        ordered += head + others[taken:taken + fill] + tail
        taken += fill
    return ordered + others[taken:]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", None)
    # A worker's own `dist` option is always "no" (xdist sets it so); the controller's command line says the mode.
    if workerinput is None or not any("worksteal" in arg for arg in workerinput.get("mainargv", ())):
        return
    items[:] = laid_out(items, int(workerinput["workercount"]))


TIMELINE_ENV = "BERTH_TEST_TIMELINE"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """With BERTH_TEST_TIMELINE=FILE, each test's worker, start and end (epoch seconds) appended to FILE: where the
    run's minutes went, and whether the layout above held."""
    path = os.environ.get(TIMELINE_ENV)
    began = time.time()
    yield
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(path, "a", encoding="utf-8") as timeline:
            timeline.write(f"{worker}\t{began:.3f}\t{time.time():.3f}\t{item.nodeid}\n")
