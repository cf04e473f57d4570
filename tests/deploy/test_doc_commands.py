"""The docs cannot rot: every shell block in README.md and docs/ is either run by a named test
(`<!-- run: ID -->`, the test reads it with support.common.doc_commands.block(ID)) or says what it needs that this
machine lacks (`<!-- needs: ... -->`); every `run:` ID is named by a test; blocks sharing an ID are identical.
The convention: docs/guide/develop.md, "How the commands in these pages are tested".
"""

from __future__ import annotations

import pathlib
import re

from support.common import doc_commands
from support.common.doc_commands import REPO, all_blocks, parse

# Where a test names the IDs it runs: every test file and support module, but not the checker and the parser.
SELF = {pathlib.Path(__file__).resolve(), pathlib.Path(doc_commands.__file__).resolve()}


def test_the_markers_are_well_formed() -> None:
    assert all_blocks()[1] == []


def test_every_shell_block_is_run_by_a_test_or_says_what_it_needs() -> None:
    blocks = all_blocks()[0]
    assert [b.where for b in blocks if b.is_shell and b.kind is None] == []
    assert any(b.kind == "run" for b in blocks) and any(b.kind == "needs" for b in blocks)


def run_ids_named_by_tests(root: pathlib.Path = REPO / "tests") -> set[str]:
    """The string literals of the test files that read the docs through support.common.doc_commands."""
    named: set[str] = set()
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        reads_docs = re.search(r"^from support\.common(\.doc_commands| import doc_commands)", text, re.M)
        if path.resolve() not in SELF and reads_docs:
            named.update(re.findall(r"""["']([a-z0-9][a-z0-9-]*)["']""", text))
    return named


def test_every_run_id_is_named_by_a_test() -> None:
    ids = {b.value for b in all_blocks()[0] if b.kind == "run"}
    assert sorted(ids - run_ids_named_by_tests()) == []


def test_blocks_sharing_an_id_are_the_same_text() -> None:
    texts: dict[str, set[str]] = {}
    for b in all_blocks()[0]:
        if b.kind == "run":
            texts.setdefault(b.value, set()).add(b.text)
    assert {run_id: len(found) for run_id, found in texts.items() if len(found) > 1} == {}


def test_the_check_finds_an_unmarked_block_and_a_stray_marker(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "page.md"
    text = ("# A page\n\n<!-- run: start -->\n```sh\nbash start\n```\n\n```sh\nunmarked\n```\n\n"
            "1. A step:\n\n   <!-- needs: a cloud account -->\n   ```bash\n   aws s3 ls \\\n     s3://b\n   ```\n\n"
            "<!-- run: Not An Id -->\n\nprose, not a block\n\n```yaml\nkey: value\n```\n")
    blocks, problems = parse(text, page)
    assert [(b.line, b.language, b.kind, b.value, b.text) for b in blocks] == [
        (4, "sh", "run", "start", "bash start\n"),
        (8, "sh", None, "", "unmarked\n"),
        (15, "bash", "needs", "a cloud account", "aws s3 ls \\\n  s3://b\n"),
        (24, "yaml", None, "", "key: value\n")]
    assert problems == [f"{page}:20: run ID 'Not An Id' is not lower-case words and dashes",
                        f"{page}:20: a marker with no code block right after it"]


def test_commands_join_continued_lines_and_drop_comments(monkeypatch) -> None:
    monkeypatch.setattr(doc_commands, "block", lambda run_id: "# a comment\nkubectl create x \\\n  --y=z\n\nls\n")
    assert doc_commands.commands("any") == ["kubectl create x --y=z", "ls"]


def test_an_id_no_test_names_is_found(tmp_path: pathlib.Path) -> None:
    (tmp_path / "test_x.py").write_text('from support.common.doc_commands import block\n\nblock("install")\n')
    (tmp_path / "test_y.py").write_text('print("local-run-start")\n')  # not a test that reads the docs
    assert "install" in run_ids_named_by_tests(tmp_path)
    assert "local-run-start" not in run_ids_named_by_tests(tmp_path)
