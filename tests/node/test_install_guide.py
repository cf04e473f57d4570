"""docs/guide/install.md followed as written, from a clean clone, with the Berth image in a private registry:
the operator Ready and a Registry Ready, every pod of both pulling the image with a pull Secret.

1. `build-image`, in a clone of the checkout (`git clone` of HEAD): `podman login` (typed at its prompts, on a
   terminal), `podman build` of the Containerfile, `podman push`, and the `sed` that sets `newName` in
   deploy/base/kustomization.yaml. The registry is a real Distribution with htpasswd users on a loopback port
   (a pusher and a puller); containerd pulls from it over HTTP (hosts.toml, as tests/node/test_pod_fit.py does).
2. `install-pull-secret` (berth-system, the Secret, the operator's ServiceAccount naming it), then the `install`
   block: the CRD, the operator, examples/filesystem-storageclass.yaml and `kubectl get reg`, in a namespace of the
   test's own (the kubeconfig's current namespace), the StorageClass `standard` and a volume for its claim provided
   as a cluster would. The operator's 2 pods are Ready on the private image, with the Secret the ServiceAccount gave
   them; the registry served the manifest to an authenticated pull.
3. The example Registry is Degraded `ImagePullFailed` naming its agent container, the image and the registry's 401
   (the operator's Secret does not reach it, and the node's copy of the image does not help), then
   `registry-pull-secret` (the Secret in its namespace, `spec.pod.imagePullSecrets`) makes it Ready with no other
   edit; its pod runs the private image.

Only the substitutions a reader makes are made: `registry.example.com` becomes the test registry's address and
PULL_USER / PULL_PASSWORD the puller's. What this machine lacks is put around the commands, never into them:
- Docker Hub: the Containerfile's `FROM docker.io/library/python:3.11-slim-bookworm` resolves to a stand-in loaded
  into podman's storage under that name: support.clusters.images' Debian bookworm layer (python3, python3-venv, as
  every node image has it) and a small layer of our own with `python` (the Containerfile runs `python -m venv`)
  and this machine's CA bundle named by PIP_CERT (the build's pip reaches PyPI through this workplace's egress,
  which signs with its own CA; on a normal network the official image needs nothing).
- podman's own configuration, through its environment (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF,
  CONTAINERS_REGISTRIES_CONF, REGISTRY_AUTH_FILE, BUILDAH_ISOLATION): its storage under the node images' cache
  (the layers survive runs: an unchanged dependency lock reuses the pip layer), chroot isolation and the host's
  network for RUN (podman's default bridge network is 10.88.0.0/16, the node's pod network), the test registry
  marked plain HTTP.

The build runs in a module fixture, before the test takes the node alone. The test replaces the cluster-wide
operator every other node test relies on, so it is node_exclusive: the documented uninstall first, and in `finally`
the documented uninstall of its own install and the run's install put back (as test_namespaced_install.py does).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import io
import json
import os
import pathlib
import pty
import re
import select
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from support.clusters import images
from support.clusters.node import Node
from support.clusters.node_berth import (
    OPERATOR_NAMESPACE,
    REGISTRIES,
    REPO,
    condition,
    deployment_available,
    install_berth,
    operator_pods,
    registry,
    registry_pods,
    registry_ready,
    storage_class_volume,
    uninstall_berth,
    wait_for,
)
from support.common.doc_commands import commands
from support.registries.upstream import Upstream, htpasswd_upstream

PLACEHOLDER = "registry.example.com"  # install.md's registry; `platform` is the path under it
PUSHER = ("pusher", "push-s3cret")
PULLER = ("puller", "pull-s3cret")
BASE = "docker.io/library/python:3.11-slim-bookworm"  # the Containerfile's FROM
REPOSITORY = "platform/berth"
CA_BUNDLE = pathlib.Path("/etc/ssl/certs/ca-certificates.crt")
STAND_IN_RECIPE = "1"  # bumped when the stand-in's layer or config changes
# Tags that keep the cached layers from `podman image prune`: the last build's image and its build stage.
KEEP_FINAL = "localhost/berth-test/install-guide:final"
KEEP_BUILD_STAGE = "localhost/berth-test/install-guide:build-stage"
EXAMPLE = "ci-cache"  # examples/filesystem-storageclass.yaml, which the install block applies
EXAMPLE_CLAIM = f"{EXAMPLE}-data"  # the claim Berth makes from storageClass (builders/pvc.py, name)
EXAMPLE_CLASS = "standard"
EXAMPLE_SIZE = "50Gi"
SECRET = "berth-pull"  # install.md's pull Secret, in berth-system and in the Registry's namespace


# --------------------------------------------------------------------------------------------- podman

def _digest(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def stand_in_base(builder: images.Builder) -> pathlib.Path:
    """A docker-archive of BASE: the node images' Debian layer and the stand-in's own (cached like them). Its
    config has a history entry per layer: buildah refuses a base whose history lists fewer layers than it has."""
    debian = builder.debian()
    with CA_BUNDLE.open("rb") as source:
        key = _digest(STAND_IN_RECIPE, debian.key, hashlib.file_digest(source, "sha256").hexdigest())

    def build(root: pathlib.Path, log: pathlib.Path) -> None:
        (root / "usr/local/bin").mkdir(parents=True)
        (root / "usr/local/bin/python").symlink_to("/usr/bin/python3")  # the official image has `python`
        (root / "etc/ssl/certs").mkdir(parents=True)
        shutil.copy(CA_BUNDLE, root / "etc/ssl/certs/ca-certificates.crt")

    layers = [debian, builder.layer("install-guide-python", key, build)]
    archive = builder.cache / "images" / f"install-guide-python-{_digest(*(ly.diff_id for ly in layers))[:20]}.tar"
    with _locked(archive.with_suffix(".lock")):
        if not archive.is_file():
            created = "1970-01-01T00:00:00Z"
            config = {"architecture": "amd64", "os": "linux", "created": created,
                      "config": {"Env": ["PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
                                         "LANG=C.UTF-8", f"PIP_CERT={CA_BUNDLE}"], "Cmd": ["python3"]},
                      "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
                      "history": [{"created": created, "created_by": "debootstrap --variant=minbase bookworm"},
                                  {"created": created, "created_by": "python and the CA bundle (the stand-in)"}]}
            config_bytes = json.dumps(config, sort_keys=True).encode()
            config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
            names = [f"{layer.diff_id.removeprefix('sha256:')}/layer.tar" for layer in layers]
            manifest = json.dumps([{"Config": config_name, "RepoTags": [BASE], "Layers": names}]).encode()
            partial = archive.with_suffix(".partial")
            with tarfile.open(partial, "w") as out:
                for name, data in ((config_name, config_bytes), ("manifest.json", manifest)):
                    info = tarfile.TarInfo(name)
                    info.size, info.mode = len(data), 0o644
                    out.addfile(info, io.BytesIO(data))
                for name, layer in zip(names, layers):
                    out.add(layer.tar, arcname=name)
            os.replace(partial, archive)
    return archive


class _locked:
    def __init__(self, path: pathlib.Path):
        self.path = path

    def __enter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = self.path.open("a")
        fcntl.flock(self.handle, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def podman_env(conf: pathlib.Path, registry_host: str) -> dict[str, str]:
    """podman's configuration for this test, through the environment only: the commands stay as the guide has
    them. Storage under the node images' cache (the build's layers survive runs), chroot isolation and the host's
    network for RUN steps, the test registry over plain HTTP, the login in a file of the test's own."""
    cache = images.cache_dir() / "podman"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "storage.conf").write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{cache / "storage"}"\n'
                                       f'runroot = "/run/berth-test-podman"\n')
    (conf / "containers.conf").write_text(f'[containers]\nnetns = "host"\n[engine]\ncgroup_manager = "cgroupfs"\n'
                                          f'events_logger = "file"\nevents_logfile_path = "{conf / "events.log"}"\n')
    (conf / "registries.conf").write_text(f'unqualified-search-registries = []\n[[registry]]\n'
                                          f'location = "{registry_host}"\ninsecure = true\n')
    return {**os.environ, "CONTAINERS_CONF": str(conf / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf"),
            "CONTAINERS_REGISTRIES_CONF": str(conf / "registries.conf"),
            "REGISTRY_AUTH_FILE": str(conf / "auth.json"), "BUILDAH_ISOLATION": "chroot"}


def run(command: str, cwd: pathlib.Path, env: dict[str, str], timeout: float = 900) -> str:
    """One command of the guide, run by bash as a reader would type it."""
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def typed(command: str, answers: list[tuple[str, str]], cwd: pathlib.Path, env: dict[str, str],
          timeout: float = 120) -> str:
    """A command run on a terminal (a pty), each prompt answered in turn as a person types (`podman login` reads
    the password from the terminal, not from a pipe)."""
    main, child = pty.openpty()
    process = subprocess.Popen(["bash", "-c", command], stdin=child, stdout=child, stderr=child, cwd=cwd, env=env,
                               start_new_session=True)
    os.close(child)
    said, pending, deadline = b"", list(answers), time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"{command}: no end after {timeout} s:\n{said.decode(errors='replace')}")
            if select.select([main], [], [], 0.2)[0]:
                try:
                    chunk = os.read(main, 4096)
                except OSError:  # the terminal closed: the command ended
                    chunk = b""
                said += chunk
                if pending and said.rstrip().endswith(pending[0][0].encode()):
                    os.write(main, pending.pop(0)[1].encode() + b"\n")
                if not chunk:
                    break
            elif process.poll() is not None:
                break
    finally:
        os.close(main)
    text = said.decode(errors="replace")
    assert process.wait(30) == 0 and not pending, f"{command}:\n{text}"
    return text


@dataclasses.dataclass
class Built:
    checkout: pathlib.Path  # the clone, its deploy/base/kustomization.yaml pointed at the image
    image: str
    substitutions: dict[str, str]
    seconds: dict[str, float]


def substituted(command: str, substitutions: dict[str, str]) -> str:
    for placeholder, value in substitutions.items():
        command = command.replace(placeholder, value)
    return command


@pytest.fixture(scope="module")
def private(kube_node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    """The private registry: Distribution with htpasswd users (a pusher, a puller) on a loopback port, which the
    node's containerd pulls from over HTTP (hosts.toml under the node's certs.d)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is missing (tests/run's apt-get line installs it)")
    with htpasswd_upstream(tmp_path_factory.mktemp("private"), dict([PUSHER, PULLER])) as upstream:
        hosts = pathlib.Path(kube_node.state.root) / "containerd" / "certs.d" / upstream.host / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(f'server = "http://{upstream.host}"\n[host."http://{upstream.host}"]\n'
                         '  capabilities = ["pull", "resolve"]\n')
        try:
            yield upstream
        finally:
            shutil.rmtree(hosts.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def built(kube_node: Node, private: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """install.md's `build-image` block in a clean clone, before the test takes the node alone (kube_node: the
    machine's node lock is held, so no other run uses podman's storage meanwhile)."""
    home = tmp_path_factory.mktemp("guide")
    checkout = home / "berth"
    subprocess.run(["git", "clone", "--quiet", "--depth=1", f"file://{REPO}", str(checkout)], check=True,
                   capture_output=True, timeout=300)
    env = podman_env(home / "podman", private.host)
    substitutions = {PLACEHOLDER: private.host, "PULL_USER": PULLER[0], "PULL_PASSWORD": PULLER[1]}
    image = f"{private.host}/{REPOSITORY}:0.1.0"
    seconds: dict[str, float] = {}
    began = time.monotonic()
    run(f"podman load --input {stand_in_base(images.Builder())}", home, env, timeout=600)
    seconds["stand-in base loaded"] = time.monotonic() - began
    try:
        for command in commands("build-image"):
            command = substituted(command, substitutions)
            began = time.monotonic()
            if command.startswith("podman login"):
                typed(command, [("Username:", PUSHER[0]), ("Password:", PUSHER[1])], checkout, env)
            else:
                run(command, checkout, env, timeout=1500)
            seconds[command.split(" ", 2)[1] if command.startswith("podman") else "sed"] = time.monotonic() - began
    finally:
        # Keep the cache, drop the rest: the newest image and its build stage (already built: all cached) stay
        # tagged; what earlier runs left goes.
        if run(f"podman image exists {image} && echo yes || true", home, env).strip() == "yes":
            run(f"podman tag {image} {KEEP_FINAL}", home, env)
            run(f"podman build --quiet --target build -t {KEEP_BUILD_STAGE} -f Containerfile .", checkout, env,
                timeout=900)
            run(f"podman untag {image} {image}", home, env)  # that name only (without one: every name)
        run("podman image prune --force", home, env, timeout=300)
    kustomization = yaml.safe_load((checkout / "deploy/base/kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "ghcr.io/berth-dev/berth", "newName": f"{private.host}/{REPOSITORY}",
                                        "newTag": "0.1.0"}], kustomization
    assert _manifest_status(private, PUSHER) == 200, "the pushed image is not in the private registry"
    assert _manifest_status(private, None) == 401, "the private registry serves without a login"
    return Built(checkout, image, substitutions, seconds)


def _manifest_status(private: Upstream, creds: tuple[str, str] | None) -> int:
    args = ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{private.host}/{REPOSITORY}:0.1.0"]
    if creds is not None:
        args.insert(2, f"--creds={creds[0]}:{creds[1]}")
    else:
        args.insert(2, "--no-creds")
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if done.returncode == 0:
        return 200
    return 401 if ("401" in done.stderr or "unauthorized" in done.stderr.lower()) else done.returncode


# ----------------------------------------------------------------------------------------------- the node

def _kubeconfig(node: Node, namespace: str, path: pathlib.Path) -> pathlib.Path:
    """The node's kubeconfig with `namespace` current: where the reader's `kubectl apply -f` puts the example."""
    config = yaml.safe_load(pathlib.Path(node.kubeconfig).read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    return path


def _example_volume(node: Node, namespace: str) -> None:
    """What the reader's cluster has for the example: the StorageClass `standard` (without a provisioner, as
    tests/node/test_examples.py makes it; left for the run, as it does) and a volume for the claim Berth makes."""
    storage_class_volume(node, namespace, EXAMPLE_CLAIM, EXAMPLE_CLASS, EXAMPLE_SIZE)


def _pull_failed(node: Node, namespace: str) -> dict[str, Any] | None:
    found = condition(registry(node, namespace, EXAMPLE), "Degraded")
    return found if found.get("status") == "True" and found.get("reason") == "ImagePullFailed" else None


def _manifest_pulls(private: Upstream) -> int:
    return sum(1 for method, path, status in private.requests()
               if method in ("GET", "HEAD") and path.startswith(f"/v2/{REPOSITORY}/manifests/") and status == 200)


def _namespace_settled(node: Node) -> bool:
    found = node.api.get("v1/namespaces", None, OPERATOR_NAMESPACE)
    return found is None or not found["metadata"].get("deletionTimestamp")


@pytest.mark.node_exclusive
@pytest.mark.timeout(2400)
def test_install_md_as_written_from_a_private_registry_gets_the_operator_and_a_registry_ready(
        kube_node: Node, berth_image: str, built: Built, private: Upstream, node_namespace: str,
        tmp_path: pathlib.Path) -> None:
    node, ns = kube_node, node_namespace
    env = {**os.environ, "KUBECONFIG": str(_kubeconfig(node, ns, tmp_path / "kubeconfig"))}
    timings = dict(built.seconds)
    (uninstall,) = commands("uninstall")  # kubectl delete -k deploy
    mine = False
    try:
        timings["the run's operator uninstalled"] = uninstall_berth(node, uninstall)
        _example_volume(node, ns)
        pulls_before = _manifest_pulls(private)

        began = time.monotonic()
        mine = True
        outputs = [run(substituted(command, built.substitutions), built.checkout, env, timeout=300)
                   for command in [*commands("install-pull-secret"), *commands("install")]]
        assert f"registry.berth.dev/{EXAMPLE} created" in outputs[-2], outputs[-2]
        assert EXAMPLE in outputs[-1], outputs[-1]  # kubectl get reg
        wait_for(lambda: deployment_available(node, OPERATOR_NAMESPACE, "berth-operator", 2),
                 "the operator's 2 pods Ready on the private image", 300, node)
        pods = wait_for(lambda: operator_pods(node), "the operator's 2 pods Ready, none stopping", 120, node)
        timings["pull secret and install to the operator Ready"] = time.monotonic() - began
        for pod in pods:
            (container,) = pod["spec"]["containers"]
            assert container["image"] == built.image, container["image"]
            assert pod["spec"].get("imagePullSecrets") == [{"name": SECRET}], pod["spec"].get("imagePullSecrets")
        assert _manifest_pulls(private) > pulls_before, "the node pulled nothing from the private registry"

        # The example's pods run the same image (agent and registry containers), without a Secret that reaches it.
        began = time.monotonic()
        failed = wait_for(lambda: _pull_failed(node, ns), f"{EXAMPLE} Degraded ImagePullFailed", 240, node)
        timings["the example Degraded ImagePullFailed"] = time.monotonic() - began
        print(f"without its own pull secret: {failed['message']}")
        assert f"container agent cannot pull image {built.image}: " in failed["message"], failed
        assert "401" in failed["message"] or "nauthorized" in failed["message"], failed

        began = time.monotonic()
        generation = registry(node, ns, EXAMPLE)["metadata"]["generation"]
        for command in commands("registry-pull-secret"):
            run(substituted(command, built.substitutions), built.checkout, env, timeout=120)
        assert registry(node, ns, EXAMPLE)["metadata"]["generation"] == generation + 1  # that one edit only
        wait_for(lambda: registry_ready(node, ns, EXAMPLE), f"{EXAMPLE} Ready with its pull secret", 300, node)
        timings["the Registry's pull secret to Ready"] = time.monotonic() - began
        (pod,) = wait_for(lambda: len(found := registry_pods(node, ns, EXAMPLE)) == 1 and found,
                          "the failed pod gone", 120, node)
        agents = [c for c in pod["spec"]["initContainers"] if c["name"] == "agent"]
        assert [c["image"] for c in agents] == [built.image], agents
        assert pod["spec"]["imagePullSecrets"] == [{"name": SECRET}], pod["spec"]["imagePullSecrets"]
        listed = run("kubectl get reg", built.checkout, env)
        assert EXAMPLE in listed and "True" in listed, listed
    finally:
        try:
            if registry(node, ns, EXAMPLE):
                node.api.delete(REGISTRIES, ns, EXAMPLE)  # no finalizer: its objects go by owner reference
            if mine:  # this install's operator, as the uninstall removes it (whatever of it was made)
                node.kubectl("delete", "--ignore-not-found", "--wait=true", "-k", str(built.checkout / "deploy"),
                             check=False, timeout=300)
        finally:
            wait_for(lambda: _namespace_settled(node), f"the namespace {OPERATOR_NAMESPACE} gone", 300, node)
            install_berth(node)  # whatever happened: every other node test needs its operator
    print("install guide, private image: " + "; ".join(f"{what} {seconds:.1f} s" for what, seconds in timings.items()))


@pytest.mark.node_exclusive  # beside the test above, on its worker: the image is built once (the module's `built`)
def test_the_release_install_pins_the_image_built_from_the_containerfile_by_its_digest(
        built: Built, private: Upstream, tmp_path: pathlib.Path) -> None:
    """The release workflow's build job as far as it goes here (.github/workflows/release.yml): the image built from
    the Containerfile and pushed (above), then berth-install.yaml written with the digest the registry serves it by:
    the CRD first, the operator's image pinned as NAME@DIGEST."""
    inspected = subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"--creds={PUSHER[0]}:{PUSHER[1]}",
                                "--format", "{{.Digest}}", f"docker://{built.image}"],
                               capture_output=True, text=True, timeout=120, check=True)
    digest = inspected.stdout.strip()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), digest
    written = tmp_path / "berth-install.yaml"
    subprocess.run([sys.executable, str(REPO / "deploy" / "release" / "install_manifest.py"), "--image",
                    f"{private.host}/{REPOSITORY}", "--digest", digest, "-o", str(written)],
                   capture_output=True, text=True, timeout=300, check=True)
    documents = [doc for doc in yaml.safe_load_all(written.read_text()) if doc]
    assert documents[0]["kind"] == "CustomResourceDefinition"
    (deployment,) = [doc for doc in documents if doc["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{private.host}/{REPOSITORY}@{digest}", container["image"]
