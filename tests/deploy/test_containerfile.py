"""The Containerfile, checked statically (no container engine here to build it): pinned base, numeric
non-root user, both entry points, the committed lock used with --no-deps, every runtime dependency pinned."""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import pathlib
import re
import shlex
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from berth_api import Registry
from berth_operator.builders import ClusterFacts, pod

REPO = pathlib.Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "Containerfile"
LOCK = REPO / "deploy" / "requirements.lock"
BUILD_LOCK = REPO / "deploy" / "build-requirements.lock"
BASE = "docker.io/library/python:3.11-slim-bookworm"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            found.append([])
        found[-1].append((keyword, rest))
    return found


def pins(path: pathlib.Path) -> dict[str, str]:
    result = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not pinned with =="
            result[canonicalize_name(name)] = version.strip()
    return result


def run_commands() -> list[list[str]]:
    commands = []
    for keyword, rest in instructions():
        if keyword == "RUN":
            commands += [shlex.split(part) for part in rest.split("&&")]
    return commands


def test_every_stage_uses_the_pinned_base() -> None:
    for stage in stages():
        image = stage[0][1].split()[0]
        assert image == BASE, f"FROM {image}: use {BASE} (tag-pinned; add a digest where you can verify one)"


def test_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = [rest for keyword, rest in stages()[-1] if keyword == "USER"]
    assert users, "the final stage sets no USER (it would run as root)"
    user, _, group = users[-1].partition(":")
    assert user.isdigit() and int(user) != 0, "USER must be a numeric non-root uid (runAsNonRoot needs a number)"
    assert not group or (group.isdigit() and int(group) != 0)


def test_home_is_the_writable_tmp_both_pods_mount() -> None:
    """UID 65532 has no passwd entry: HOME must be set, and on the only writable path."""
    env = " ".join(rest for keyword, rest in stages()[-1] if keyword == "ENV")
    assert re.search(r"(^|\s)HOME=/tmp(\s|$)", env), "the final stage must set HOME=/tmp"
    deployment = yaml.safe_load((REPO / "deploy" / "base" / "deployment.yaml").read_text())
    operator_pod = deployment["spec"]["template"]["spec"]
    assert {"name": "tmp", "mountPath": "/tmp"} in operator_pod["containers"][0]["volumeMounts"]
    reg = Registry.model_validate({"metadata": {"name": "r", "namespace": "ns", "uid": "u"},
                                   "spec": {"config": {"storage": {"inmemory": {}}}}})
    agent = pod.agent_container(reg, ClusterFacts(agent_image="berth:test"))
    assert {"name": "tmp", "mountPath": "/tmp"} in agent["volumeMounts"]


def test_final_stage_copies_only_the_built_environment() -> None:
    copies = [rest for keyword, rest in stages()[-1] if keyword in ("COPY", "ADD")]
    assert copies == ["--from=build /opt/berth /opt/berth"]
    path = next(rest for keyword, rest in stages()[-1] if keyword == "ENV")
    assert "PATH=/opt/berth/bin:$PATH" in path


def test_installs_exactly_the_locks_then_the_project_without_dependencies() -> None:
    pips = [command for command in run_commands() if command[:1] == ["/opt/berth/bin/pip"]]
    installs = [command for command in pips if command[1] == "install"]
    assert all("--no-deps" in command for command in installs), installs
    assert ["--requirement", "/src/deploy/build-requirements.lock"] == installs[0][-2:]
    assert ["--requirement", "/src/deploy/requirements.lock"] == installs[1][-2:]
    assert installs[2][-1] == "/src" and "--no-build-isolation" in installs[2]
    assert ["/opt/berth/bin/pip", "check"] in pips
    copies = [rest for keyword, rest in stages()[0] if keyword == "COPY"]
    assert "deploy/requirements.lock deploy/build-requirements.lock /src/deploy/" in copies


def test_no_downloads_outside_pip() -> None:
    for keyword, rest in instructions():
        assert keyword != "ADD", "ADD can fetch URLs; use COPY"
        assert not re.search(r"\b(curl|wget)\b|\|\s*(ba)?sh\b", rest), rest


def test_both_entry_points_are_installed_and_smoke_tested() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for script in ("berth-agent", "berth-operator"):
        module, _, function = scripts[script].partition(":")
        assert callable(getattr(importlib.import_module(module), function)), scripts[script]
        assert [f"/opt/berth/bin/{script}", "--help"] in [command[:2] for command in run_commands()], script


def test_every_runtime_dependency_is_pinned_in_the_lock() -> None:
    locked = pins(LOCK)
    for text in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is a runtime dependency but not in {LOCK.name}"
        assert requirement.specifier.contains(locked[name], prereleases=True), f"{name}=={locked[name]} vs {text}"


def test_the_lock_holds_exactly_the_runtime_closure() -> None:
    """The same packages as the installed closure (versions may differ in a fresh test venv; regenerate with
    `python deploy/lock.py > deploy/requirements.lock` to move the pins)."""
    spec = importlib.util.spec_from_file_location("berth_deploy_lock", REPO / "deploy" / "lock.py")
    lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock)
    installed = set(lock.closure(lock.runtime_requirements()))
    locked = set(pins(LOCK))
    assert installed - locked == set(), "runtime dependencies missing from deploy/requirements.lock: regenerate it"
    assert locked - installed == set(), "deploy/requirements.lock pins what nothing requires: regenerate it"


def test_the_build_backend_is_pinned_and_satisfies_pyproject() -> None:
    backend = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    locked = pins(BUILD_LOCK)
    for text in backend:
        requirement = Requirement(text)
        assert requirement.specifier.contains(locked[canonicalize_name(requirement.name)])


def test_dockerignore_lets_every_copied_source_in() -> None:
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]

    def included(path: str) -> bool:
        verdict = True
        for pattern in patterns:
            negated = pattern.startswith("!")
            bare = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, bare) or path.startswith(bare + "/"):
                verdict = negated
        return verdict

    for keyword, rest in instructions():
        if keyword == "COPY" and not rest.startswith("--from"):
            for source in rest.split()[:-1]:
                assert included(source), f"{source} is excluded by .dockerignore"
    assert not included("tests/kube_emulator/test_api_server.py")  # the context stays small
