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
(d) No tracked file cites an issue number ("issue 29", "Issues 38 and 48", "(issue\n# 26)", "(#48)"): a comment or a
    doc says what the number meant (a decision record, a design.md section, an upstream.md anchor, the fact, or a
    date). An upstream project's issue keeps its project's name (distribution#2422) and is not ours.
(e) Every design.md section cited anywhere ("docs/design.md §4.3", "§4.3, §4.5", "design.md section 3",
    "[design, section 5.6]") is a numbered heading of docs/design.md ("## 4." or "### 4.3").
(f) Every repository path named without backticks (from one of ROOTS, ending in a file's extension) exists too; a
    cited `docs/decisions/...` record is one of them.
(g) A path relative to a package (`restart/procfs.py`, `berth_supervise/notify.py`) names a file of the tree.
Each allowance below names its file and what it excuses, with the reason, and goes when what it excuses goes.
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

ISSUE = re.compile(r"\bissues?[\s#]+\d|\(#\d+\)", re.IGNORECASE)
# test_design_map spells out the examples its own scanner of design.md and the records must find.
ALLOWED_ISSUES = {
    ("tests/deploy/test_design_map.py",
     'assert ISSUE.search("the first: issue 48\'s retirement bound") and ISSUE.search("(issues 21 and 48)")'),
}

DESIGN = REPO / "docs" / "design.md"
SECTION_HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", re.MULTILINE)
SECTION_NUMBER = r"\d+(?:\.\d+)*"
CITED_SECTION = re.compile(rf"\bdesign(?:\.md)?,?\s+(?:§\s*|section\s+)({SECTION_NUMBER})"
                           rf"((?:\s*(?:,|and)\s*§\s*{SECTION_NUMBER})*)|\bdesign\.md\s+(\d+\.\d+)")
MORE_SECTIONS = re.compile(rf"§\s*({SECTION_NUMBER})")

EXTENSIONS = ("py", "md", "yaml", "yml", "json", "txt", "toml", "sh")
BARE_PATH = re.compile(rf"(?<![\w./<-])((?:{'|'.join(ROOTS)})/[\w./-]*?\.(?:{'|'.join(EXTENSIONS)}))(?![\w/-])")
# Paths of Distribution's repository, not ours: the configuration references the golden configs were reviewed against.
UPSTREAM_PATHS = {"docs/content/about/configuration.md", "docs/configuration.md"}
# Made-up paths that other scanners' tests feed to their scanner.
ALLOWED_PATHS = {
    ("tests/deploy/test_code_sizes.py", "agent/berth_api/x.py"),
    ("tests/deploy/test_code_sizes.py", "agent/berth_agent/x.py"),
    ("tests/deploy/test_doc_links.py", "docs/page.md"),
}

MODULE_PATH = re.compile(r"(?<![\w./<>-])([A-Za-z_][\w-]*/(?:[\w-]+/)*[\w-]+\.py)(?![\w/-])")
ALLOWED_MODULE_PATHS = {
    ("agent/berth_agent/core/deferred.py", "aiohttp/__init__.py"),  # aiohttp's own file, not ours
    ("docs/design.md", "path/to/module.py"),  # the form a name takes in §1.4's table of functions kept long
    ("docs/decisions/0040-agent-api-client-on-the-standard-library.md", "kube/lazy.py"),  # what the record removed
}


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


def _line_of(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def issue_citations(texts: dict[str, str]) -> list[str]:
    found: dict[str, None] = {}
    for name, text in texts.items():
        lines = text.splitlines()
        for match in ISSUE.finditer(text) if name != SELF else ():
            number = _line_of(text, match.start())
            if (name, lines[number - 1].strip()) not in ALLOWED_ISSUES:
                found[f"{name}:{number}: {lines[number - 1].strip()}"] = None
    return list(found)


def unknown_sections(texts: dict[str, str], known: set[str]) -> list[str]:
    problems = []
    for name, text in texts.items():
        for match in CITED_SECTION.finditer(text) if name != SELF else ():
            cited = [match.group(1) or match.group(3), *MORE_SECTIONS.findall(match.group(2) or "")]
            problems += [f"{name}:{_line_of(text, match.start())}: design.md §{section} is not a section of "
                         "docs/design.md" for section in cited if section not in known]
    return problems


def missing_bare_paths(texts: dict[str, str], root: Path = REPO) -> list[str]:
    return [f"{name}:{_line_of(text, match.start())}: {path} is not in the tree"
            for name, text in texts.items() if name != SELF
            for match in BARE_PATH.finditer(text)
            if (path := match.group(1)) not in UPSTREAM_PATHS and (name, path) not in ALLOWED_PATHS
            and not (root / path).exists()]


def unresolved_module_paths(texts: dict[str, str], tracked: set[str]) -> list[str]:
    """Paths relative to a package that end no tracked path. A diff (.patch) names its files a/... and b/..."""
    ends = {known.split("/", cut)[-1] for known in tracked for cut in range(known.count("/") + 1)}
    return [f"{name}:{_line_of(text, match.start())}: {path} is no file of the tree"
            for name, text in texts.items() if name != SELF and not name.endswith(".patch")
            for match in MODULE_PATH.finditer(text)
            if (path := match.group(1)).split("/")[0] not in ROOTS and (name, path) not in ALLOWED_MODULE_PATHS
            and path not in ends]


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


def test_no_file_cites_an_issue_number():
    assert issue_citations(tracked_texts()) == []


def test_the_issue_pattern_finds_a_citation_and_spares_upstream_issues():
    texts = {"operator/x.py": "# as measured (issue 12)\n# a long comment (issue\n# 26)\n",
             "docs/x.md": "Issues 38 and 48: lost events. See issue #7, or (#48).\n",
             "docs/y.md": "distribution#2422, kiwigrid/k8s-sidecar#85 (and PR #150); the issue of the day; issuer 3\n",
             "tests/deploy/test_design_map.py": 'assert ISSUE.search("the first: issue 48\'s retirement bound") and '
                                                'ISSUE.search("(issues 21 and 48)")\n'}
    assert issue_citations(texts) == ["operator/x.py:1: # as measured (issue 12)",
                                      "operator/x.py:2: # a long comment (issue",
                                      "docs/x.md:1: Issues 38 and 48: lost events. See issue #7, or (#48)."]


def test_every_cited_design_section_exists():
    known = set(SECTION_HEADING.findall(DESIGN.read_text(encoding="utf-8")))
    assert {"1", "1.1", "3", "4.5", "5.9"} <= known, sorted(known)
    cited = sum(1 for text in tracked_texts().values() for _ in CITED_SECTION.finditer(text))
    assert cited > 50, f"too few design.md sections cited ({cited}): is the pattern right?"
    assert unknown_sections(tracked_texts(), known) == []


def test_an_unknown_design_section_is_found():
    known = set(SECTION_HEADING.findall("# Berth\n## 1. Components\n### 1.1 Map\n## 4. Flows\n### 4.3 Restart\n"))
    assert known == {"1", "1.1", "4", "4.3"}
    texts = {"agent/a.py": '"""The restart (docs/design.md §4.3, §4.9 and §1.1)."""\n# (design.md 4.2)\n',
             "docs/guide/x.md": "[design, section 5.6](../design.md); the design, §4.3; design.md section 1\n"}
    assert unknown_sections(texts, known) == ["agent/a.py:1: design.md §4.9 is not a section of docs/design.md",
                                              "agent/a.py:2: design.md §4.2 is not a section of docs/design.md",
                                              "docs/guide/x.md:1: design.md §5.6 is not a section of docs/design.md"]


def test_every_path_named_without_backticks_exists():
    assert missing_bare_paths(tracked_texts()) == []


def test_a_missing_bare_path_is_found(tmp_path: Path):
    (tmp_path / "docs" / "decisions").mkdir(parents=True)
    (tmp_path / "docs" / "decisions" / "0001-a.md").write_text("")
    texts = {"agent/a.py": "# docs/decisions/0001-a.md and docs/decisions/0002-gone.md; tests/api/test_types.py.\n",
             "docs/x.md": "[up](../docs/gone.md), <docs/new.md>, docs/*.md, Distribution's docs/configuration.md\n"}
    assert missing_bare_paths(texts, tmp_path) == ["agent/a.py:1: docs/decisions/0002-gone.md is not in the tree",
                                                   "agent/a.py:1: tests/api/test_types.py is not in the tree"]


def test_every_path_relative_to_a_package_names_a_file():
    assert unresolved_module_paths(tracked_texts(), set(tracked_texts())) == []


def test_a_module_path_that_names_no_file_is_found():
    tracked = {"agent/berth_agent/restart/procfs.py", "agent/berth_supervise/notify.py"}
    texts = {"agent/a.py": "# restart/procfs.py, berth_supervise/notify.py, supervisor/restarter.py, procfs.py\n",
             "bench/results/x.patch": "--- a/agent/berth_agent/restart/gone.py\n"}
    assert unresolved_module_paths(texts, tracked) == ["agent/a.py:1: supervisor/restarter.py is no file of the tree"]


def test_every_allowance_still_excuses_something():
    """An allowance whose line or path went must go too, so it never excuses a new citation."""
    texts = tracked_texts()
    stale = [(name, line) for name, line in sorted(ALLOWED_ISSUES) if line not in texts.get(name, "")]
    stale += [(name, path) for name, path in sorted(ALLOWED_PATHS | ALLOWED_MODULE_PATHS)
              if path not in texts.get(name, "")]
    stale += [("(upstream)", path) for path in sorted(UPSTREAM_PATHS) if not any(path in t for t in texts.values())]
    assert stale == []
