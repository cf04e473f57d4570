"""What a new user applies to a fresh cluster works as-is.

- `kubectl apply -f crds/` reads only the CRD (kubectl takes every *.yaml, *.yml and *.json of a directory;
  a Kustomization object there fails with "no matches for kind"), and `kubectl apply -k crds` builds it.
- Every file under examples/ applies to a fresh cluster on which Berth is installed: each object is a Registry
  or a built-in kind, and no object names a namespace the same file does not create.
- deploy/kustomization.yaml has the `newName` and `newTag` docs/guide/install.md tells the user to set.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
KUBECTL_FILE_SUFFIXES = (".yaml", ".yml", ".json")  # what `kubectl apply -f DIR` reads
# What a fresh cluster serves once `kubectl apply -k deploy` has run: the built-in kinds an example may hold,
# and the CRD's kind.
APPLIABLE = {("berth.dev/v1alpha1", "Registry"), ("v1", "Namespace"), ("v1", "Secret"),
             ("v1", "PersistentVolumeClaim"), ("v1", "ConfigMap")}


def kubectl_reads(directory: pathlib.Path, *, recursive: bool) -> list[pathlib.Path]:
    paths = directory.rglob("*") if recursive else directory.iterdir()
    return sorted(p for p in paths if p.is_file() and p.suffix in KUBECTL_FILE_SUFFIXES)


def documents(path: pathlib.Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def test_kubectl_apply_f_crds_reads_only_the_crd() -> None:
    read = kubectl_reads(REPO / "crds", recursive=False)
    assert read, "crds/ holds no manifest"
    for path in read:
        for doc in documents(path):
            assert (doc["apiVersion"], doc["kind"]) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition"), \
                f"`kubectl apply -f crds/` would send {doc['kind']} from {path.name}"


def test_kubectl_apply_k_crds_builds_the_crd() -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (1.30+) must be on PATH"
    result = subprocess.run([kubectl, "kustomize", str(REPO / "crds")], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    built = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert [(d["kind"], d["metadata"]["name"]) for d in built] == [("CustomResourceDefinition", "registries.berth.dev")]


EXAMPLE_FILES = kubectl_reads(REPO / "examples", recursive=True)


def test_there_are_examples() -> None:
    names = {str(p.relative_to(REPO)) for p in EXAMPLE_FILES}
    assert {"examples/full.yaml", "examples/local/registry.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[str(p.relative_to(REPO)) for p in EXAMPLE_FILES])
def test_example_applies_to_a_fresh_cluster_as_is(path: pathlib.Path) -> None:
    docs = documents(path)
    assert docs
    created = {d["metadata"]["name"] for d in docs if (d["apiVersion"], d["kind"]) == ("v1", "Namespace")}
    for doc in docs:
        assert (doc["apiVersion"], doc["kind"]) in APPLIABLE, f"{doc['kind']}: not served by a fresh cluster"
        namespace = (doc.get("metadata") or {}).get("namespace")
        assert namespace is None or namespace in created, \
            f"{doc['kind']} {doc['metadata']['name']} names namespace {namespace!r}, which a fresh cluster lacks"


def test_deploy_image_has_new_name_and_new_tag_to_point_at_a_build() -> None:
    kustomization = yaml.safe_load((REPO / "deploy" / "base" / "kustomization.yaml").read_text())  # both installs
    [image] = kustomization["images"]
    assert image["name"] == "ghcr.io/berth-dev/berth"  # what deploy/base/deployment.yaml names
    assert image["newName"] and image["newTag"]
