"""The code blocks of README.md and docs/, and the markers that say who runs them, so that the docs cannot rot.

The convention (docs/guide/develop.md, "How the commands in these pages are tested"): an HTML comment on the line
right before a fenced block says what becomes of it.

- `<!-- run: ID -->`: a test runs it (or reads it, for a file's contents): the test names ID and takes the block
  from here with `block(ID)`, so the page and the test cannot drift apart. The same ID on several blocks means
  the same text shown twice (README.md and a guide page): the copies must be identical.
- `<!-- needs: WHAT -->`: it cannot run here; WHAT says what it needs (a cloud account, root on a fresh machine).

Every shell block must carry one of the two (tests/deploy/test_doc_commands.py).
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[3]
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
MARKER = re.compile(r"^<!--\s*(run|needs):\s*(.*?)\s*-->\s*$")
RUN_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its marker (kind `run`/`needs` and value, or None) and text."""

    path: pathlib.Path
    line: int  # 1-based line of the opening fence
    language: str
    kind: str | None
    value: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path}:{self.line}"

    @property
    def is_shell(self) -> bool:
        return self.language in SHELL_LANGUAGES


def doc_files(root: pathlib.Path = REPO) -> list[pathlib.Path]:
    """README.md and every Markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def parse(text: str, path: pathlib.Path) -> tuple[list[Block], list[str]]:
    """The fenced blocks of one page, and the problems of its markers (a marker with no block after it, an
    unknown kind, a malformed ID)."""
    blocks: list[Block] = []
    problems: list[str] = []
    lines = text.split("\n")
    pending: tuple[int, str, str] | None = None  # a marker waiting for its block: (line, kind, value)
    index = 0
    while index < len(lines):
        line = lines[index]
        marker = MARKER.match(line.strip())
        fence = FENCE.match(line)
        if marker:
            if pending:
                problems.append(f"{path}:{pending[0]}: a marker with no code block right after it")
            pending = (index + 1, marker.group(1), marker.group(2))
            if marker.group(1) == "run" and not RUN_ID.match(marker.group(2)):
                problems.append(f"{path}:{index + 1}: run ID {marker.group(2)!r} is not lower-case words and dashes")
            if marker.group(1) == "needs" and not marker.group(2):
                problems.append(f"{path}:{index + 1}: a needs: marker must say what the block needs")
        elif fence:
            end = index + 1
            indent, ticks = fence.group(1), fence.group(2)
            while end < len(lines) and not lines[end].strip().startswith(ticks):
                end += 1
            kind, value = (pending[1], pending[2]) if pending and pending[0] == index else (None, "")
            if pending and pending[0] != index:
                problems.append(f"{path}:{pending[0]}: a marker with no code block right after it")
            body = [text_line[len(indent):] if text_line.startswith(indent) else text_line.lstrip()
                    for text_line in lines[index + 1:end]]
            blocks.append(Block(path, index + 1, fence.group(3).lower(), kind, value, "\n".join(body) + "\n"))
            pending = None
            index = end
        elif pending and line.strip():
            problems.append(f"{path}:{pending[0]}: a marker with no code block right after it")
            pending = None
        index += 1
    if pending:
        problems.append(f"{path}:{pending[0]}: a marker with no code block right after it")
    return blocks, problems


def all_blocks(root: pathlib.Path = REPO) -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    problems: list[str] = []
    for path in doc_files(root):
        found, wrong = parse(path.read_text(encoding="utf-8"), path)
        blocks += found
        problems += wrong
    return blocks, problems


def block(run_id: str) -> str:
    """The text of the block marked `<!-- run: run_id -->` (the same in every place it appears)."""
    texts = {b.text for b in all_blocks()[0] if b.kind == "run" and b.value == run_id}
    assert texts, f"no block in README.md or docs/ is marked <!-- run: {run_id} -->"
    assert len(texts) == 1, f"the blocks marked run: {run_id} differ"
    return texts.pop()


def commands(run_id: str) -> list[str]:
    """The block's commands, one per line as a shell reads them: a trailing backslash joins the next line,
    blank lines and `#` comments are left out."""
    joined = re.sub(r"\\\n\s*", "", block(run_id))
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def page(relative: str) -> str:
    return (REPO / relative).read_text(encoding="utf-8")


def section(relative: str, heading: str) -> str:
    """The text under `heading` (a Markdown heading's words) up to the next heading of the same or a higher
    level."""
    text = page(relative)
    match = re.search(rf"^(#+) {re.escape(heading)}\s*$", text, re.M)
    assert match, f"{relative} has no heading {heading!r}"
    level = len(match.group(1))
    rest = text[match.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[:end.start()] if end else rest
