"""The suite's layout for worksteal (support.common.schedule): every test once, the node tier's exclusive tests at the
head of the first block, its shared tests at the tails of the others, each module's tests in their order in every
block."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from support.common.schedule import block_sizes, laid_out


@dataclasses.dataclass(frozen=True)
class Item:
    path: pathlib.Path
    name: str
    exclusive: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "node_exclusive" and self.exclusive else None


def collection() -> list[Item]:
    items = [Item(pathlib.Path(f"/r/tests/agent/test_{m}.py"), f"a{m}-{i}") for m in range(7) for i in range(9)]
    items += [Item(pathlib.Path(f"/r/tests/node/test_{m}.py"), f"n{m}-{i}", exclusive=(m == 1 and i < 2))
              for m in range(4) for i in range(3)]
    return items + [Item(pathlib.Path("/r/tests/agent/render/test_x.py"), f"r{i}") for i in range(20)]


def test_blocks_are_what_worksteal_hands_out() -> None:
    assert block_sizes(95, 4) == [23, 24, 24, 24]
    assert block_sizes(3, 4) == [0, 1, 1, 1]


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_the_node_tier_heads_the_first_block_and_tails_the_others(workers: int) -> None:
    items = collection()
    ordered = laid_out(items, workers)
    assert sorted(ordered, key=items.index) == items
    sizes = block_sizes(len(items), workers)
    blocks = [ordered[sum(sizes[:index]):sum(sizes[:index + 1])] for index in range(workers)]
    assert [item.name for item in blocks[0][:2]] == ["n1-0", "n1-1"]
    assert not any("tests/node/" in str(item.path) for item in blocks[0][2:])
    for block in blocks[1:]:
        kinds = ["tests/node/" in str(item.path) for item in block]
        assert kinds == sorted(kinds) and any(kinds), [item.name for item in block]
    for block in blocks:  # what one worker runs: each module's tests in their order
        for module in {item.path for item in block}:
            assert [i for i in block if i.path == module] == [i for i in items if i in block and i.path == module]


def test_one_worker_or_no_node_test_keeps_the_collection() -> None:
    items = collection()
    assert laid_out(items, 1) == items
    others = [item for item in items if "tests/node/" not in str(item.path)]
    assert laid_out(others, 4) == others
