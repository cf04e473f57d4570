"""Every link in README.md and docs/ resolves: a relative link names a file or directory of the
repository, and a `#anchor` names a heading of the page it points at (GitHub's slugs) or an explicit `<a id>`.
Links on the web are not fetched. Code (fenced blocks and `inline code`) is not Markdown, so no link is read in it.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from support.common.doc_commands import REPO, doc_files

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = ("http://", "https://", "mailto:")


def prose_lines(text: str, *, inline_code: bool = False) -> list[str]:
    """The page without its fenced blocks (and without its inline code unless `inline_code`): what Markdown
    renders as text and links."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else line if inline_code else re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, without punctuation, spaces made dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its words
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in prose_lines(path.read_text(encoding="utf-8"), inline_code=True):  # a heading's code is in its slug
        found.update(EXPLICIT_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(1))
            found.add(base if base not in counts else f"{base}-{counts[base]}")
            counts[base] = counts.get(base, 0) + 1
    return found


def broken_links(path: pathlib.Path, root: pathlib.Path = REPO) -> list[str]:
    problems = []
    text = path.read_text(encoding="utf-8")
    for number, line in enumerate(prose_lines(text), start=1):
        for target in LINK.findall(line):
            if target.startswith(EXTERNAL):
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not resolved.is_relative_to(root.resolve()):
                problems.append(f"{where}: points outside the repository")
            elif not resolved.exists():
                problems.append(f"{where}: no such file")
            elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
                problems.append(f"{where}: no heading or anchor #{anchor} there")
    return problems


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(path: pathlib.Path) -> None:
    assert broken_links(path) == []


def test_the_readme_links_into_every_guide_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in sorted((REPO / "docs" / "guide").glob("*.md")):
        if page.name != "README.md" and page.name != "local-run.md":
            assert f"(docs/guide/{page.name}" in readme, f"README.md does not link to docs/guide/{page.name}"


def test_the_readme_is_a_landing_page() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path: pathlib.Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## The `spec.x` field's use\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Page\n\n[ok](other.md#the-specx-fields-use) [self](#page) [gone](missing.md)\n"
                    "[bad anchor](other.md#nowhere) `[code](missing.md)` [web](https://example.com/x)\n"
                    "```sh\n[in a block](missing.md)\n```\n")
    assert broken_links(page, tmp_path) == [
        "docs/page.md:3: missing.md: no such file",
        "docs/page.md:4: other.md#nowhere: no heading or anchor #nowhere there",
    ]


def test_slugs_follow_github() -> None:
    assert slug("The operator's metrics") == "the-operators-metrics"
    assert slug("`status.garbageCollection`") == "statusgarbagecollection"
    assert slug("Install and upgrade") == "install-and-upgrade"
    assert slug("Pull over TLS through an Ingress") == "pull-over-tls-through-an-ingress"
