"""One version: pyproject's `project.version` is the image tag (`newTag` in deploy/base/kustomization.yaml,
the tag install.md builds), what the three commands print for --version, and CHANGELOG.md's top version. The
release workflow refuses a git tag `vX.Y.Z` that is not this version (tests/deploy/test_workflows.py).

After a version bump, reinstall (`pip install -e .`): the commands print the installed package's version."""

from __future__ import annotations

import functools
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
COMMANDS = ("berth-operator", "berth-agent", "berth-crd")
FILES = ("pyproject.toml", "deploy/base/kustomization.yaml", "CHANGELOG.md", "docs/guide/install.md")
SEMVER = r"\d+\.\d+\.\d+"


@functools.cache
def command_versions() -> dict[str, str]:
    """`<command> --version` -> the version it prints (`berth-operator 0.1.0` -> 0.1.0), from the installed commands.
    Run side by side, and given minutes: berth-operator imports kopf before it parses its arguments, which takes over
    a minute on a loaded machine."""
    running = {}
    for command in COMMANDS:
        exe = shutil.which(command) or str(pathlib.Path(sys.executable).parent / command)
        running[command] = subprocess.Popen([exe, "--version"], stdout=subprocess.PIPE, text=True)
    found = {}
    for command, process in running.items():
        out, _ = process.communicate(timeout=600)
        assert process.returncode == 0, (command, out)
        name, _, version = out.strip().partition(" ")
        assert name == command, out
        found[f"{command} --version"] = version
    return found


def file_versions(root: pathlib.Path) -> dict[str, str]:
    """Where the version is written in the tree at root -> what is written there."""
    found = {"pyproject.toml project.version":
             tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]}
    kustomization = yaml.safe_load((root / "deploy/base/kustomization.yaml").read_text(encoding="utf-8"))
    for image in kustomization["images"]:
        found[f"deploy/base/kustomization.yaml newTag of {image['name']}"] = str(image.get("newTag", ""))
    changelog = (root / "CHANGELOG.md").read_text(encoding="utf-8")
    top = re.search(rf"^## \[({SEMVER})\]", changelog, re.M)
    found["CHANGELOG.md top version"] = top.group(1) if top else "(none)"
    install = (root / "docs/guide/install.md").read_text(encoding="utf-8")
    for i, tag in enumerate(re.findall(rf"berth:({SEMVER})\b|newTag: \"({SEMVER})\"", install)):
        found[f"docs/guide/install.md image tag #{i + 1}"] = tag[0] or tag[1]
    return found


def mismatches(found: dict[str, str]) -> list[str]:
    """The places whose version is not pyproject's, each with what it says."""
    want = found["pyproject.toml project.version"]
    return [f"{where}: {version} (pyproject.toml says {want})" for where, version in found.items() if version != want]


def test_the_version_is_semver_and_a_changelog_entry() -> None:
    version = file_versions(REPO)["pyproject.toml project.version"]
    assert re.fullmatch(SEMVER, version), version
    assert "## [Unreleased]" in (REPO / "CHANGELOG.md").read_text(encoding="utf-8")


def test_every_place_says_pyprojects_version() -> None:
    found = file_versions(REPO) | command_versions()
    assert len(found) >= 7, found  # pyproject, newTag, CHANGELOG, the three commands, install.md's tag
    assert mismatches(found) == []


@pytest.mark.parametrize("path, old, new", [
    ("pyproject.toml", 'version = "{v}"', 'version = "9.9.9"'),
    ("deploy/base/kustomization.yaml", 'newTag: "{v}"', 'newTag: "9.9.9"'),
    ("CHANGELOG.md", "## [{v}]", "## [9.9.9]"),
    ("docs/guide/install.md", "berth:{v}", "berth:9.9.9"),
])
def test_the_check_fails_when_one_place_changes(tmp_path: pathlib.Path, path: str, old: str, new: str) -> None:
    version = file_versions(REPO)["pyproject.toml project.version"]
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    commands = {f"{command} --version": version for command in COMMANDS}
    assert mismatches(file_versions(tmp_path) | commands) == []
    changed = tmp_path / path
    text = changed.read_text(encoding="utf-8")
    assert old.format(v=version) in text
    changed.write_text(text.replace(old.format(v=version), new, 1), encoding="utf-8")
    found = mismatches(file_versions(tmp_path) | commands)
    if path == "pyproject.toml":  # every other place now differs from it
        assert len(found) >= 6 and all(line.endswith("(pyproject.toml says 9.9.9)") for line in found), found
    else:
        assert len(found) == 1 and found[0].startswith(path) and ": 9.9.9 " in found[0], found


def test_the_check_fails_when_a_command_says_another_version() -> None:
    found = file_versions(REPO) | command_versions()  # a copy: command_versions() is cached
    found["berth-crd --version"] = "0.0.0"
    want = found["pyproject.toml project.version"]
    assert mismatches(found) == [f"berth-crd --version: 0.0.0 (pyproject.toml says {want})"]
