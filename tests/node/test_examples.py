"""Every file under examples/ on the real node.

Each example is applied as its header tells a user to, in a namespace of its own: first what the header says to
make, then `kubectl apply -f` of the file (or of its folder: examples/dockerhub-mirror/, examples/corporate-cache/).

- The Secrets: the header's own `kubectl create secret ...` lines, run as written with placeholder values (a
  `$(...)` becomes a random hex string; `--from-file=htpasswd` and `--from-file=key.json` read placeholder files of
  those names). A header that names another Secret, or another key, than its Registry gives a Missing* reason
  here and fails the test.
- What the cluster itself would have: the CRDs of the optional APIs the Registry uses (COSI, prometheus-operator,
  the vendored ones other tiers install), the COSI classes it names, the COSI BucketClaim and BucketAccess it says
  exist, the claim `persistentVolumeClaim` names, and for `storageClass` that StorageClass with a volume for the
  claim Berth makes (the node has no provisioner: a class without one and a hostPath volume bound ahead, as a
  cluster of local volumes has them). The example itself is never changed.

Then, all of them waited on together: an example reaches Ready (every replica it asks for ready and the current
generation applied), unless its header has one line saying what it gives where its cloud is missing:

    # Without <what is missing>: Ready=False, reason <Reason> ("<a phrase of the Ready message>").

optionally followed by `; Degraded=True, reason <Reason> ("<a phrase>")` clauses: then exactly those conditions,
for the current generation. The reasons there were read from this test's runs, not guessed.

examples/local/ is not a cluster manifest: registry.yaml is what `bash examples/local/run` (README's command 1)
reads by default, which this test checks, and the API server validates it against the CRD (a server-side dry run,
strict fields). oci_image.py writes the image README's push-pull block pushes: that block runs here against the
in-memory example's Service. `run` itself is tests/agent/e2e/test_local_example.py's (it needs no cluster).

An example with a fixed nodePort (the Docker Hub mirror's 30500, as pull-through-cache.md's hosts.toml names)
runs alone on the node (node_exclusive): test_nodeport_pull.py's walkthrough takes the same port.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pathlib
import re
import secrets
import shlex
import subprocess
import tarfile
import time
from typing import Any

import bcrypt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from support.clusters.apiserver import install_cosi_crds, install_monitoring_crds
from support.clusters.node import Node
from support.clusters.node_berth import (
    REGISTRIES,
    REPO,
    condition,
    create_once,
    filesystem_claim,
    registry,
    registry_ready,
    service_url,
    storage_class_volume,
    wait_for,
)
from support.common.doc_commands import commands
from support.registries.registry import http_get, read_oci_image

EXAMPLES = REPO / "examples"
LOCAL = EXAMPLES / "local"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")  # what `kubectl apply -f DIR` reads
SETTLE_SECONDS = 600  # from the last apply until every example shows its end state (a loaded 2-core machine)
_CLAUSE = r'(?:Ready|Progressing|Degraded)=(?:True|False), reason [A-Za-z]+(?: \("[^"]+"\))?'
# "# Without X: Ready=False, reason Xyz ("phrase"); Degraded=True, reason Abc ("phrase"). Free words after."
WITHOUT = re.compile(rf"^# Without (?P<what>[^:]+): (?P<clauses>{_CLAUSE}(?:; {_CLAUSE})*)(?P<rest>\W.*)?$")
CLAUSE = re.compile(r'(?P<type>Ready|Progressing|Degraded)=(?P<status>True|False), reason (?P<reason>[A-Za-z]+)'
                    r'(?: \("(?P<phrase>[^"]+)"\))?')
COSI_DRIVER = "cosi.example.com"  # no driver runs: the classes name one, as a cluster's admin makes them


# ------------------------------------------------------------------------------------------ the examples

@dataclasses.dataclass(frozen=True)
class Clause:
    type: str
    status: str
    reason: str
    phrase: str | None


@dataclasses.dataclass
class Example:
    name: str  # the file's stem, or the folder's name
    path: pathlib.Path  # what `kubectl apply -f` is given
    registry_file: pathlib.Path
    registry: dict[str, Any]
    header: list[str]  # the Registry file's leading comment lines
    files: list[pathlib.Path]  # every file under examples/ this example covers
    namespace: str = ""
    applied_at: float = 0.0
    settled_after: float | None = None
    seen: str = ""  # the conditions last read

    @property
    def replicas(self) -> int:
        return self.registry["spec"].get("replicas", 1)

    @property
    def without(self) -> tuple[str, list[Clause]] | None:
        """The header's "Without ...:" line: what is missing here, and the conditions the example then shows."""
        lines = [WITHOUT.match(line) for line in self.header if line.startswith("# Without ")]
        assert all(lines), f"{self.registry_file}: a Without line not in the form this module's docstring gives"
        assert len(lines) <= 1, f"{self.registry_file}: more than one Without line"
        if not lines:
            return None
        clauses = [Clause(m["type"], m["status"], m["reason"], m["phrase"])
                   for m in CLAUSE.finditer(lines[0]["clauses"])]
        assert clauses[0].type == "Ready", f"{self.registry_file}: the Without line names Ready first"
        assert any(c.phrase for c in clauses), f"{self.registry_file}: the Without line quotes no message"
        return lines[0]["what"], clauses

    @property
    def expected(self) -> str:
        without = self.without
        if without is None:
            return f"Ready ({self.replicas} of {self.replicas})"
        return "; ".join(f"{c.type}={c.status} {c.reason}" for c in without[1])


def documents(path: pathlib.Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def header(path: pathlib.Path) -> list[str]:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def manifests(directory: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in MANIFEST_SUFFIXES)


def example_of(path: pathlib.Path) -> Example:
    """A file of one Registry, or a folder `kubectl apply -f` takes whole: its one Registry and what goes with it."""
    files = manifests(path) if path.is_dir() else [path]
    found = [(file, doc) for file in files for doc in documents(file) if doc.get("kind") == "Registry"]
    assert len(found) == 1, f"{path}: {len(found)} Registries (one an example)"
    ((registry_file, document),) = found
    return Example(name=path.stem if path.is_file() else path.name, path=path, registry_file=registry_file,
                   registry=document, header=header(registry_file), files=files)


def all_examples() -> list[Example]:
    """Every example a cluster takes: each *.yaml at the top, each folder but local/."""
    paths = [p for p in sorted(EXAMPLES.iterdir()) if (p.is_file() and p.suffix in MANIFEST_SUFFIXES)
             or (p.is_dir() and p != LOCAL)]
    return [example_of(path) for path in paths]


def needs_a_cloud(example: Example) -> list[str]:
    """What in the spec a bare node cannot give: a cloud's storage, a cloud identity, nodes labelled for it, an
    upstream on the internet (the node's pods resolve no name)."""
    spec = example.registry["spec"]
    storage = spec["config"]["storage"]
    needs = [f"storage.{key}" for key in ("s3", "azure", "gcs", "objectStorage") if key in storage]
    needs += ["serviceAccount.annotations"] if (spec.get("serviceAccount") or {}).get("annotations") else []
    needs += ["pod.nodeSelector"] if (spec.get("pod") or {}).get("nodeSelector") else []
    needs += ["config.proxy"] if spec["config"].get("proxy") else []  # its upstream (Docker Hub)
    return needs


def fixed_node_port(example: Example) -> bool:
    return bool((example.registry["spec"].get("service") or {}).get("nodePort"))


# ------------------------------------------------------------------------------- what a cluster would have

def placeholder_file(name: str) -> bytes:
    """The placeholder content of a file a header's `--from-file=` reads."""
    if name == "htpasswd":  # `htpasswd -B -c htpasswd alice`: bcrypt, as Distribution requires
        return b"alice:" + bcrypt.hashpw(b"placeholder", bcrypt.gensalt(rounds=4)) + b"\n"
    if name == "key.json":  # `gcloud iam service-accounts keys create key.json`: a service account key's shape
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        return json.dumps({
            "type": "service_account", "project_id": "my-project", "private_key_id": secrets.token_hex(20),
            "private_key": pem, "client_email": "registry@my-project.iam.gserviceaccount.com",
            "client_id": "100000000000000000000", "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": "https://oauth2.googleapis.com/token"}).encode()
    raise AssertionError(f"a header's kubectl reads a file {name!r} this test has no placeholder for")


def secret_commands(lines: list[str]) -> list[list[str]]:
    """The header's `kubectl create secret ...` commands, a trailing backslash joining the next line, each
    `$(...)` replaced by a placeholder (hex: a valid base64 key and a valid http secret alike)."""
    found, pending = [], None
    for line in lines:
        text = line.lstrip("#").strip()
        if pending is not None:
            pending += " " + text
        elif text.startswith("kubectl create secret "):
            pending = text
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        found.append(shlex.split(re.sub(r"\$\([^()]*\)", secrets.token_hex(32), pending)))
        pending = None
    assert pending is None, f"a command of the header ends in a backslash: {pending}"
    return found


def create_secrets(node: Node, example: Example, workdir: pathlib.Path) -> list[str]:
    """Runs the header's commands in the example's namespace; returns the Secrets' names."""
    made = []
    for args in secret_commands(example.header):
        for arg in args:
            if arg.startswith("--from-file="):
                source = arg.removeprefix("--from-file=").split("=")[-1]
                (workdir / source).write_bytes(placeholder_file(pathlib.Path(source).name))
        result = subprocess.run([*args, f"--kubeconfig={node.kubeconfig}", "-n", example.namespace], cwd=workdir,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"{example.name}: {shlex.join(args)}: {result.stderr}"
        made.append(args[4])
    return made


def cosi_objects(node: Node, namespace: str, storage: dict[str, Any]) -> None:
    """The COSI classes the spec names (cluster-wide, as an admin installs them with a driver) and the BucketClaim
    and BucketAccess it says exist (in its namespace). No driver runs: none is ever provisioned."""
    group = "objectstorage.k8s.io/v1alpha1"
    if name := storage.get("bucketClass"):
        create_once(node, {"apiVersion": group, "kind": "BucketClass", "metadata": {"name": name},
                           "driverName": COSI_DRIVER, "deletionPolicy": "Retain"})
    if name := storage.get("bucketAccessClass"):
        create_once(node, {"apiVersion": group, "kind": "BucketAccessClass", "metadata": {"name": name},
                           "driverName": COSI_DRIVER, "authenticationType": "Key"})
    if claim := storage.get("bucketClaim"):
        node.api.create({"apiVersion": group, "kind": "BucketClaim",
                         "metadata": {"name": claim, "namespace": namespace},
                         "spec": {"bucketClassName": "s3-standard", "protocols": ["S3"]}})
        if access := storage.get("bucketAccess"):
            node.api.create({"apiVersion": group, "kind": "BucketAccess",
                             "metadata": {"name": access, "namespace": namespace},
                             "spec": {"bucketClaimName": claim, "bucketAccessClassName": "s3-key-access",
                                      "credentialsSecretName": f"{access}-credentials", "protocol": "S3"}})


def prepare(node: Node, example: Example, workdir: pathlib.Path) -> None:
    """What the example's header and the cluster provide before it is applied."""
    spec, ns = example.registry["spec"], example.namespace
    storage = spec["config"]["storage"]
    if (filesystem := storage.get("filesystem")) is not None:
        if claim := filesystem.get("persistentVolumeClaim"):
            filesystem_claim(node, ns, claim, access_mode="ReadWriteOnce")
        if storage_class := filesystem.get("storageClass"):
            name = example.registry["metadata"]["name"]
            storage_class_volume(node, ns, f"{name}-data", storage_class, filesystem["size"])
    if (object_storage := storage.get("objectStorage")) is not None:
        install_cosi_crds(node.api)
        cosi_objects(node, ns, object_storage)
    if (spec.get("monitoring") or {}).get("serviceMonitor") is not None:
        install_monitoring_crds(node.api)
    create_secrets(node, example, workdir)


# ----------------------------------------------------------------------------------------------- waiting

def describe(obj: dict[str, Any]) -> str:
    parts = []
    for kind in ("Ready", "Degraded", "Progressing"):
        found = condition(obj, kind)
        if found:
            parts.append(f"{kind}={found.get('status')} {found.get('reason')}: {found.get('message', '')[:300]}")
    return " | ".join(parts) or "no conditions"


def settled(node: Node, example: Example) -> bool:
    """The example shows its end state for its current generation: Ready, or exactly its header's conditions."""
    name = example.registry["metadata"]["name"]
    obj = registry(node, example.namespace, name)
    example.seen = describe(obj)
    without = example.without
    if without is None:
        return registry_ready(node, example.namespace, name, example.replicas)
    ready = condition(obj, "Ready")
    if ready.get("observedGeneration") != obj["metadata"]["generation"]:
        return False
    if ready.get("status") == "True" and not registry_ready(node, example.namespace, name, example.replicas):
        return False
    for clause in without[1]:
        found = condition(obj, clause.type)
        if (found.get("status"), found.get("reason")) != (clause.status, clause.reason):
            return False
        if clause.phrase is not None and clause.phrase not in found.get("message", ""):
            return False
    return True


def wait_together(node: Node, examples: list[Example]) -> None:
    deadline = time.monotonic() + SETTLE_SECONDS
    pending = list(examples)
    while pending:
        for example in list(pending):
            if settled(node, example):
                example.settled_after = time.monotonic() - example.applied_at
                pending.remove(example)
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(2)


def table(examples: list[Example]) -> str:
    rows = []
    for example in examples:
        took = f"{example.settled_after:.0f} s" if example.settled_after is not None else "NOT SETTLED"
        rows.append(f"  {example.name:26} expected {example.expected:55} {took:>12}\n      seen: {example.seen}")
    return "\n".join(rows)


def delete_namespaces(node: Node, names: list[str], timeout: float = 300) -> None:
    """Node.delete_namespace for every namespace at once: each deleted, its pods waited out (their logs kept), then
    the volumes bound to its claims (cluster-scoped, Retain: the namespace does not take them)."""
    began = time.monotonic()
    for name in names:
        node.keep_pod_logs(name)  # the kubelet removes a deleted pod's logs with it
        node.api.delete("v1/namespaces", None, name)
    left = list(names)
    while left:
        for name in list(left):
            node.keep_pod_logs(name)  # and what they said while stopping
            if not node.api.list("v1/pods", name):
                left.remove(name)
        if left and time.monotonic() - began > timeout:
            raise AssertionError(f"namespaces {left}: pods still there after {timeout} s")
        time.sleep(1)
    for volume in node.api.list("v1/persistentvolumes"):
        if ((volume["spec"].get("claimRef") or {}).get("namespace")) in names:
            node.api.delete("v1/persistentvolumes", None, volume["metadata"]["name"])
    print(f"{len(names)} namespaces and their pods gone in {time.monotonic() - began:.1f} s")


def prove(node: Node, examples: list[Example], tmp_path: pathlib.Path) -> list[str]:
    """Apply every example (prepared first), wait for them together, print the outcome; returns the namespaces
    (the caller frees them). Fails naming each example that did not reach what it documents."""
    began = time.monotonic()
    namespaces = []
    try:
        for example in examples:
            example.namespace = node.namespace("ex")
            namespaces.append(example.namespace)
            workdir = tmp_path / example.name
            workdir.mkdir()
            prepare(node, example, workdir)
            target = f"{example.path}/" if example.path.is_dir() else str(example.path)
            node.kubectl("apply", "-n", example.namespace, "-f", target)
            example.applied_at = time.monotonic()
        print(f"{len(examples)} examples applied in {time.monotonic() - began:.0f} s")
        wait_together(node, examples)
        print(f"outcomes ({time.monotonic() - began:.0f} s since the first apply):\n{table(examples)}")
        failed = [example.name for example in examples if example.settled_after is None]
        assert not failed, f"not as documented after {SETTLE_SECONDS} s: {failed}\n{table(examples)}"
        # End states: each still holds once all are there.
        changed = [example.name for example in examples if not settled(node, example)]
        assert not changed, f"left the documented state: {changed}\n{table(examples)}"
    except BaseException:
        delete_namespaces(node, namespaces)
        raise
    return namespaces


# ------------------------------------------------------------------------------------------------- tests

def check_coverage(examples: list[Example]) -> None:
    """Every file under examples/ is covered here, and every header's Without line and kubectl lines parse."""
    covered = {file for example in examples for file in example.files}
    covered |= {LOCAL / "registry.yaml", LOCAL / "run", LOCAL / "oci_image.py"}
    every = {p for p in EXAMPLES.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert every <= covered, f"files under examples/ no test here covers: {sorted(map(str, every - covered))}"
    for example in examples:
        if needs := needs_a_cloud(example):
            assert example.without, f"{example.registry_file} needs {needs}: its header says what it gives without"
        for args in secret_commands(example.header):
            assert args[:3] == ["kubectl", "create", "secret"] and len(args) > 4, args
    assert {example.name for example in examples} >= {"inmemory", "full", "dockerhub-mirror", "corporate-cache"}


@pytest.mark.timeout(1800)  # the first node test of a run waits for the node's start, images and all
def test_every_example_reaches_ready_or_exactly_what_its_header_documents(
        kube_node: Node, berth_image: str, tmp_path: pathlib.Path) -> None:
    node = kube_node
    check_coverage(all_examples())
    examples = [example for example in all_examples() if not fixed_node_port(example)]
    began = time.monotonic()
    namespaces = prove(node, examples, tmp_path)
    try:
        # examples/local/oci_image.py: README's push-pull block, against the in-memory example's Service.
        inmemory = next(example for example in examples if example.name == "inmemory")
        host = service_url(node, inmemory.namespace, "scratch").removeprefix("http://")
        wait_for(lambda: _answers(f"http://{host}/v2/"), "the in-memory example's Service answering", 60, node)
        for command in commands("local-run-push-pull"):
            command = command.replace("127.0.0.1:5000", host).replace("/tmp/", f"{tmp_path}/")
            result = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=120,
                                    env={k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"})
            assert result.returncode == 0, f"{command}\n{result.stderr}"
        # skopeo compressed the layer on the way in (README's copy keeps no digests): compare what it holds.
        pulled = read_oci_image(tmp_path / "hello-pulled")
        [layer] = [pulled.blobs[digest] for digest in pulled.layer_digests]
        with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
            assert tar.extractfile("hello.txt").read() == b"hello from Berth\n"

        # examples/local/registry.yaml: what `bash examples/local/run` reads unless told otherwise, and a Registry
        # the API server admits (schema, CEL rules, strict fields), though only the agent on a machine runs it.
        run = (LOCAL / "run").read_text()
        assert 'registry_file="${BERTH_REGISTRY_FILE:-$repo/examples/local/registry.yaml}"' in run
        local = node.namespace("ex")
        namespaces.append(local)
        said = node.kubectl("apply", "--dry-run=server", "--validate=strict", "-n", local, "-f",
                            str(LOCAL / "registry.yaml"))
        assert said.strip() == "registry.berth.dev/local created (server dry run)", said
        assert node.api.get(REGISTRIES, local, "local") is None
    finally:
        delete_namespaces(node, namespaces)
    print(f"test duration: {time.monotonic() - began:.0f} s")


@pytest.mark.node_exclusive
@pytest.mark.timeout(1800)  # the first node test of a run waits for the node's start, images and all
def test_an_example_on_a_fixed_node_port_runs_alone_and_holds_it(
        kube_node: Node, berth_image: str, tmp_path: pathlib.Path) -> None:
    """The Docker Hub mirror: its Service on nodePort 30500 (what pull-through-cache.md's hosts.toml names), alone
    on the node since test_nodeport_pull.py's walkthrough takes the same port. With no Docker Hub here it does
    not serve (its header says why), so only the Service and the address Berth reports are checked."""
    node = kube_node
    examples = [example for example in all_examples() if fixed_node_port(example)]
    assert [example.name for example in examples] == ["dockerhub-mirror"]
    began = time.monotonic()
    namespaces = prove(node, examples, tmp_path)
    try:
        for example in examples:
            name = example.registry["metadata"]["name"]
            port = example.registry["spec"]["service"]["nodePort"]
            service = node.api.get("v1/services", example.namespace, name)
            assert service["spec"]["type"] == "NodePort" and service["spec"]["ports"][0]["nodePort"] == port
            assert registry(node, example.namespace, name)["status"].get("externalAddress") == f"NODE:{port}"
    finally:
        delete_namespaces(node, namespaces)
    print(f"test duration: {time.monotonic() - began:.0f} s")


def _answers(url: str) -> bool:
    try:
        http_get(url, timeout=2)
        return True
    except OSError:
        return False
