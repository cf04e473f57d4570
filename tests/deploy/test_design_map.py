"""docs/design.md §1.3, "Where to change what" (issue 40): its four rows are there, and every path it names is in
the tree (a path in angle brackets is a file the change adds)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROWS = ("a new storage driver", "a new managed kind", "the 3.x handover", "a new condition reason")


def _section() -> str:
    text = (REPO / "docs" / "design.md").read_text()
    start = text.index("### 1.3 Where to change what")
    return text[start:text.index("\n## ", start)]


def test_every_kind_of_change_has_its_row():
    cells = [line.split("|")[1].strip() for line in _section().splitlines() if line.startswith("| ")]
    assert all(any(cell.startswith(name) for cell in cells) for name in ROWS), cells


def test_every_file_the_map_names_is_in_the_tree():
    paths = re.findall(r"`(<?[\w./-]+/[\w./-]+>?)`", _section())
    assert len(paths) > 30, paths
    missing = [path for path in paths if not path.startswith("<") and not (REPO / path).exists()]
    assert missing == [], f"design.md §1.3 names files that are not in the tree: {missing}"
    for new in (path.strip("<>") for path in paths if path.startswith("<")):
        assert (REPO / new).parent.is_dir(), f"{new}: its folder is not in the tree"
