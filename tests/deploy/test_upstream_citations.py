"""What comments, docstrings and docs rest on is in the repository: the upstream facts in docs/upstream.md, cited
by anchor, and paths that exist.

(a) No tracked file cites the notes kept outside the repository, nor the `shared` directory beside the checkout
    (the patterns are OUTSIDE). A few lines of runtime code really use that directory (where the project's own
    machines keep the Distribution 3 and Kubernetes binaries) without sending a reader there for facts: ALLOWED
    lists them, each by file and exact line. Every line is searched, code included, so a citation cannot hide in a
    string either. This file is not searched by (a) and (c): it spells the patterns and their examples out.
(b) Every `docs/upstream.md#<anchor>` cited anywhere (or `upstream.md#<anchor>` from a page beside it) names an
    anchor of docs/upstream.md: an explicit `<a id>` or a heading.
(c) Every repository path that a comment or a doc names in backticks (`agent/...`, `operator/...`, `tests/...`,
    `docs/...`, `deploy/...`, `bench/...`, `examples/...`, `crds/...`) exists. A backtick span counts when it is the
    path alone (optionally with `:function`, `:line` or `#anchor`); a path in angle brackets or with a wildcard is a
    file to be added or a pattern, not a name.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from deploy.test_doc_links import anchors, prose_lines

REPO = Path(__file__).resolve().parents[2]
SELF = Path(__file__).resolve().relative_to(REPO).as_posix()
UPSTREAM = REPO / "docs" / "upstream.md"

OUTSIDE = re.compile(r"\.\./shared\b|field[- ]notes", re.IGNORECASE)
# Runtime code, not citations: .ci/run exports the binaries' paths when the shared directory exists (the tests skip,
# saying why, without them); support.clusters and support.registries name that default in their skip messages.
ALLOWED = {
    (".ci/run", "if [ -x ../shared/dist/registry-v3.1.1 ]; then"),
    (".ci/run", 'export BERTH_REGISTRY3_BIN="$(cd ../shared/dist && pwd)/registry-v3.1.1"'),
    (".ci/run", "if [ -f ../shared/k8s/kube-apiserver-v1.36.1.xz ]; then"),
    (".ci/run", 'export BERTH_KUBE_APISERVER_XZ="$(cd ../shared/k8s && pwd)/kube-apiserver-v1.36.1.xz"'),
    ("tests/support/clusters/apiserver.py",
     'return f"no kube-apiserver: {where} (.ci/run exports it from ../shared/k8s)"'),
    ("tests/support/clusters/apiserver.py",
     'raise RuntimeError(f"{xz} does not decompress to the {name} of ../shared/k8s (SHA-256 "'),
    ("tests/support/clusters/control_plane.py",
     'return f"no {name}-{VERSION}.xz beside {apiserver_xz()} (../shared/k8s has them)"'),
    ("tests/support/clusters/node.py",
     'return f"no {name}-v1.36.1.xz beside the kube-apiserver\'s (../shared/k8s has them)"'),
    ("tests/support/clusters/images.py",
     'missing.append(f"${REGISTRY3_ENV} (.ci/run exports ../shared/dist/registry-v3.1.1)")'),
    ("tests/support/registries/registry.py",
     'NO_REGISTRY3 = "BERTH_REGISTRY3_BIN is unset: no Distribution 3 binary (.ci/run sets it from ../shared/dist)"'),
}

ROOTS = ("agent", "operator", "tests", "docs", "deploy", "bench", "examples", "crds")
CITED_ANCHOR = re.compile(r"upstream\.md#([A-Za-z0-9_-]+)")
SPAN = re.compile(r"`([^`\n]+)`")
NAMED_PATH = re.compile(rf"<?((?:{'|'.join(ROOTS)})/[\w./-]*?)>?(?:(?::|::)[\w.]+|#[\w-]+)?[.,;:]?")


@cache
def tracked_texts() -> dict[str, str]:
    """Every tracked file that is text, by its path in the repository."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout: {error}")
    texts = {}
    for name in filter(None, listing.decode().split("\0")):
        path = REPO / name
        if path.is_file() and b"\0" not in (raw := path.read_bytes()):
            texts[name] = raw.decode("utf-8", errors="replace")
    assert len(texts) > 300, "git ls-files found too few files: the scan would prove nothing"
    return texts


def outside_citations(texts: dict[str, str]) -> list[str]:
    return [f"{name}:{number}: {line.strip()}"
            for name, text in texts.items() if name != SELF
            for number, line in enumerate(text.splitlines(), start=1)
            if OUTSIDE.search(line) and (name, line.strip()) not in ALLOWED]


def missing_paths(texts: dict[str, str], root: Path = REPO) -> list[str]:
    problems = []
    for name, text in texts.items():
        if name == SELF:
            continue
        if name.endswith(".md"):  # a fenced block is a program, not prose: its backticks are the shell's
            text = "\n".join(prose_lines(text, inline_code=True))
        for span in SPAN.finditer(text):
            named = NAMED_PATH.fullmatch(span.group(1).strip())
            if named is None or span.group(1).strip().startswith("<") or "*" in named.group(1):
                continue
            path = named.group(1).rstrip(".")
            if not (root / path).exists():
                problems.append(f"{name}:{text.count(chr(10), 0, span.start()) + 1}: `{path}` is not in the tree")
    return problems


def test_nothing_cites_what_lies_outside_the_repository():
    assert outside_citations(tracked_texts()) == []


def test_the_allowed_lines_are_still_there():
    """A line of ALLOWED that changed or went must leave the list, so it never excuses a new citation."""
    texts = tracked_texts()
    stale = [(name, line) for name, line in sorted(ALLOWED)
             if line not in {text_line.strip() for text_line in texts.get(name, "").splitlines()}]
    assert stale == []


def test_the_outside_pattern_finds_a_citation():
    texts = {"operator/x.py": "# as the notes say (field-notes §3)\n", "docs/x.md": "see `../shared/k8s/README.md`\n",
             ".ci/run": "if [ -x ../shared/dist/registry-v3.1.1 ]; then\n"}
    assert outside_citations(texts) == ["operator/x.py:1: # as the notes say (field-notes §3)",
                                        "docs/x.md:1: see `../shared/k8s/README.md`"]


def test_every_cited_anchor_is_in_upstream_md():
    known = anchors(UPSTREAM)
    cited = {(name, anchor) for name, text in tracked_texts().items() for anchor in CITED_ANCHOR.findall(text)}
    assert len(cited) > 50, f"too few citations of docs/upstream.md found ({len(cited)}): is the pattern right?"
    assert sorted((name, anchor) for name, anchor in cited if anchor not in known) == []


def test_upstream_md_gives_each_fact_a_source():
    """Each anchored fact says where it comes from: an upstream file or document, or what was measured and when."""
    sections = re.split(r'<a id="[^"]+"></a>', UPSTREAM.read_text(encoding="utf-8"))[1:]
    assert len(sections) > 40
    unsourced = [section.strip().splitlines()[0] for section in sections
                 if not re.search(r"Source|Measured|measured|Seen|seen|\d{4}-\d{2}", section)]
    assert unsourced == []


def test_every_path_named_in_backticks_exists():
    assert missing_paths(tracked_texts()) == []


def test_a_missing_path_is_found(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("")
    texts = {"docs/a.md": "`docs/here.md`, `docs/gone.md#part`, `<docs/new.md>`, `docs/*.md`\n\n```\n`docs/x`\n```\n",
             "operator/b.py": "# see `tests/nowhere.py:test_it` and `operator/gone.py`.\n"}
    assert missing_paths(texts, tmp_path) == ["docs/a.md:1: `docs/gone.md` is not in the tree",
                                              "operator/b.py:1: `tests/nowhere.py` is not in the tree",
                                              "operator/b.py:1: `operator/gone.py` is not in the tree"]
