"""docs/design.md is a map, and the decisions are records: §1.3, "Where to change what", has its rows and every path
it names is in the tree (a path in angle brackets is a file the change adds); the map stays short; every record in
docs/decisions/ says its context, its decision and its consequences; neither cites an issue number."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"
DECISIONS = REPO / "docs" / "decisions"
ROWS = ("a new storage driver", "a new managed kind", "the 3.x handover", "a new condition reason")
MAX_LINES = 800
SECTIONS = ("## Context", "## Decision", "## Consequences")
ISSUE = re.compile(r"\bissues? #?\d+|\(#\d+\)", re.IGNORECASE)  # `distribution#2422` is upstream's, not ours


def _section() -> str:
    text = DESIGN.read_text()
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


def test_the_design_is_a_map_of_at_most_800_lines():
    lines = len(DESIGN.read_text().splitlines())
    assert lines <= MAX_LINES, f"docs/design.md has {lines} lines: move history and detail to docs/decisions/"


def missing_sections(text: str) -> list[str]:
    """The record's sections that are absent or out of order (each a heading line of its own)."""
    headings = [line.strip() for line in text.splitlines() if line.startswith("## ")]
    found = [heading for heading in headings if heading in SECTIONS]
    return [section for section in SECTIONS if section not in found] or ([] if found == list(SECTIONS) else found)


def test_every_decision_record_has_context_decision_and_consequences():
    records = sorted(DECISIONS.glob("*.md"))
    assert len(records) >= 30, [record.name for record in records]
    incomplete = {record.name: gaps for record in records if (gaps := missing_sections(record.read_text()))}
    assert incomplete == {}


def test_a_record_without_its_sections_is_found():
    assert missing_sections("# 9. X\n\n## Context\nwhy\n\n## Decision\nwhat\n\n## Consequences\nso\n") == []
    assert missing_sections("# 9. X\n\n## Context\nwhy\n\n## Decision\nwhat\n") == ["## Consequences"]
    assert missing_sections("# 9. X\n\n## Decision\n\n## Context\n\n## Consequences\n") == [
        "## Decision", "## Context", "## Consequences"]


def test_every_record_is_numbered_once_and_titled_with_its_number():
    records = sorted(DECISIONS.glob("*.md"))
    numbers = [int(record.name[:4]) for record in records]
    assert numbers == list(range(1, len(records) + 1)), [record.name for record in records]
    titles = [record.read_text().splitlines()[0] for record in records]
    assert all(title.startswith(f"# {number}. ") for number, title in zip(numbers, titles)), titles


def test_the_map_and_the_records_cite_no_issue_number():
    texts = {DESIGN.name: DESIGN.read_text()} | {record.name: record.read_text() for record in DECISIONS.glob("*.md")}
    cited = [f"{name}:{number}: {line.strip()}" for name, text in texts.items()
             for number, line in enumerate(text.splitlines(), start=1) if ISSUE.search(line)]
    assert cited == []
    assert ISSUE.search("the first: issue 48's retirement bound") and ISSUE.search("(issues 21 and 48)")
    assert not ISSUE.search("distribution#2422, kiwigrid/k8s-sidecar#85")
