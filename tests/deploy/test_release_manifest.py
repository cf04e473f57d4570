"""berth-install.yaml, the release's one-file install: deploy/release/install_manifest.py, run as the
release workflow runs it, with a made-up digest: the CRD first, then exactly what `kubectl kustomize deploy` builds,
the operator's image pinned by digest, every document valid YAML that a second build reproduces byte for byte."""

from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "release" / "install_manifest.py"
IMAGE = "ghcr.io/example-owner/berth"
DIGEST = "sha256:" + hashlib.sha256(b"not a real image").hexdigest()


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("release") / "berth-install.yaml"
    result = run("--image", IMAGE, "--digest", DIGEST, "-o", str(out))
    assert result.returncode == 0, result.stderr
    return out.read_text(encoding="utf-8")


def script_module():
    spec = importlib.util.spec_from_file_location("install_manifest", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_crd_comes_first_then_the_operator(written: str) -> None:
    docs = [doc for doc in yaml.safe_load_all(written) if doc]
    assert docs[0]["kind"] == "CustomResourceDefinition" and docs[0]["metadata"]["name"] == "registries.berth.dev"
    assert [doc["kind"] for doc in docs].count("CustomResourceDefinition") == 1
    committed = yaml.safe_load((REPO / "crds" / "berth.dev_registries.yaml").read_text(encoding="utf-8"))
    assert docs[0]["spec"] == committed["spec"]
    built = script_module().kustomize(REPO / "deploy")
    assert [(d["kind"], d["metadata"]["name"]) for d in docs[1:]] == [(d["kind"], d["metadata"]["name"]) for d in built]
    assert all(doc.get("apiVersion") and doc["metadata"].get("name") for doc in docs)


def test_the_operator_runs_the_image_by_digest(written: str) -> None:
    docs = list(yaml.safe_load_all(written))
    [deployment] = [doc for doc in docs if doc["kind"] == "Deployment"]
    assert deployment["metadata"] == {**deployment["metadata"], "name": "berth-operator", "namespace": "berth-system"}
    images = [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert images == [f"{IMAGE}@{DIGEST}"]
    # No other reference to the image by tag is left anywhere in the file.
    assert "berth-dev/berth:" not in written and written.count(f"{IMAGE}@{DIGEST}") == 2  # the header and the pod


def test_it_is_reproducible(written: str) -> None:
    again = run("--image", IMAGE, "--digest", DIGEST)
    assert again.returncode == 0, again.stderr
    assert again.stdout == written


@pytest.mark.parametrize("image, digest, says", [
    (IMAGE, "sha256:abc", "is not sha256: and 64"),
    (IMAGE, DIGEST.upper(), "is not sha256: and 64"),
    (f"{IMAGE}:0.1.0", DIGEST, "without a tag or digest"),
    (f"{IMAGE}@{DIGEST}", DIGEST, "without a tag or digest"),
])
def test_a_bad_image_or_digest_is_refused(image: str, digest: str, says: str) -> None:
    result = run("--image", image, "--digest", digest)
    assert result.returncode == 1 and says in result.stderr and result.stdout == ""


def test_a_registry_port_is_not_a_tag() -> None:
    module = script_module()
    text = module.manifest("registry.example:5000/team/berth", DIGEST)
    assert "image: registry.example:5000/team/berth@" + DIGEST in text
