"""The registry pod fits the user's cluster, on the real node:

- scheduling: a nodeSelector no node matches, then a taint on the node, each named in the Registry's conditions
  with the scheduler's own message; removing the selector, then adding the toleration, makes it Ready;
- a spec.image tag that does not exist: Degraded naming the image and the kubelet's pull error, and fixing the tag
  recovers it;
- a private image: a Berth Registry with htpasswd auth, reached through a NodePort, serves the registry image; a
  second Registry's spec.image points at it, without imagePullSecrets first (the pull error is named), then with
  them (Ready, no other edit);
- an egress proxy: a pull-through cache whose upstream only a real HTTP proxy (tinyproxy) can reach; its log shows
  the registry's upstream requests and the agent's pre-flight, and pulls through the cache work.

The private mirror is shared by the cases of this module (one Registry, the image pushed once).
The taint is on the run's only node: pods other tests create while it is there (a few seconds) wait for it to go.
"""

from __future__ import annotations

import base64
import calendar
import json
import pathlib
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from support.clusters import images
from support.clusters.node import GATEWAY, POD_CIDR, Node
from support.clusters.node_berth import (
    REGISTRIES,
    condition,
    create_registry,
    node_turn_lock,
    registry,
    registry_ready,
    service_url,
    wait_for,
)
from support.registries.registry import make_oci_image, pull_image, push_archive, push_image, running_registry
from support.registries.upstream import htpasswd
from support.services.tinyproxy import running_tinyproxy

INMEMORY = {"config": {"storage": {"inmemory": {}}}}
USER = ("puller", "pull-s3cret")
SCHEDULE_BOUND = 10.0  # seconds from the scheduler's verdict to the Registry's
PULL_BOUND = 30.0  # seconds from the Registry's creation to Degraded naming the pull error


def create(node: Node, namespace: str, name: str, spec: dict) -> float:
    node.api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                     "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    return time.monotonic()


def patch(node: Node, namespace: str, name: str, spec: dict) -> None:
    node.api.patch(REGISTRIES, namespace, name, {"spec": spec})


def degraded(node: Node, namespace: str, name: str, reason: str) -> dict | None:
    found = condition(registry(node, namespace, name), "Degraded")
    return found if found.get("status") == "True" and found.get("reason") == reason else None


def ready(node: Node, namespace: str, name: str) -> bool:
    return registry_ready(node, namespace, name)


def unschedulable_since(node: Node, namespace: str, name: str) -> float | None:
    """Epoch seconds of the scheduler's Unschedulable verdict on the Registry's pod (its condition's time)."""
    for pod in node.api.list("v1/pods", namespace):
        if pod["metadata"].get("labels", {}).get("app.kubernetes.io/instance") != name:
            continue
        for cond in pod["status"].get("conditions") or ():
            if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return calendar.timegm(time.strptime(cond["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ"))
    return None


def said_within(node: Node, namespace: str, name: str, reason: str, bound: float) -> str:
    """The Registry's Degraded message once it names `reason`; asserts the Registry said it within `bound` seconds
    of the scheduler (by the pod condition's own time, second resolution)."""
    found = wait_for(lambda: degraded(node, namespace, name, reason), f"{name} Degraded {reason}", 60, node)
    seen = time.time()
    since = wait_for(lambda: unschedulable_since(node, namespace, name), "the pod's Unschedulable condition", 10)
    print(f"{name}: Degraded {reason} {seen - since:.1f} s after the scheduler's verdict")
    assert seen - since <= bound + 1, f"the Registry said it {seen - since:.1f} s after the scheduler"
    return found["message"]


def scheduled(node: Node, namespace: str, name: str) -> bool:
    """Whether a pod of the Registry's newest template is bound to the node."""
    return any(pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp")
               and pod["spec"].get("tolerations") and any(t.get("key", "").startswith("berth-test/")
                                                          for t in pod["spec"]["tolerations"])
               for pod in node.api.list("v1/pods", namespace)
               if pod["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == name)


def test_a_node_selector_no_node_matches_then_a_taint_each_named_and_undone(kube_node: Node, berth_image: str,
                                                                           node_namespace: str) -> None:
    """One case, selector then taint, so that the taint (on the run's only node) never meets this case's selector
    pod; the taint stays only until the tolerating pod is bound (a few seconds)."""
    node, ns = kube_node, node_namespace
    create(node, ns, "placed", {**INMEMORY, "pod": {"nodeSelector": {"berth-test/pool": "absent"}}})
    message = said_within(node, ns, "placed", "Unschedulable", SCHEDULE_BOUND)
    assert re.search(r"cannot be scheduled: 0/1 nodes are available: .*node affinity/selector", message), message
    assert condition(registry(node, ns, "placed"), "Ready")["reason"] == "Unschedulable"
    patch(node, ns, "placed", {"pod": {"nodeSelector": None}})
    wait_for(lambda: ready(node, ns, "placed"), "placed Ready once the selector is gone", 180, node)
    assert condition(registry(node, ns, "placed"), "Degraded")["status"] == "False"

    key = f"berth-test/{ns}"
    node.kubectl("taint", "node", node.name, f"{key}=yes:NoSchedule")
    try:
        create(node, ns, "tainted", INMEMORY)
        message = said_within(node, ns, "tainted", "Unschedulable", SCHEDULE_BOUND)
        assert re.search(r"0/1 nodes are available: 1 node\(s\) had untolerated taint", message), message
        patch(node, ns, "tainted", {"pod": {"tolerations": [
            {"key": key, "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]}})
        wait_for(lambda: scheduled(node, ns, "tainted"), "the tolerating pod bound to the node", 60, node)
    finally:
        node.kubectl("taint", "node", node.name, f"{key}-", check=False)
    wait_for(lambda: ready(node, ns, "tainted"), "tainted Ready with the toleration", 180, node)


# ----------------------------------------------------------------------------------- a private mirror

@dataclass
class Mirror:
    address: str  # NODE_IP:NODE_PORT
    namespace: str

    def image(self, reference: str) -> str:
        return f"{self.address}/{reference}"


def pull_secret(address: str) -> dict:
    auth = base64.b64encode(f"{USER[0]}:{USER[1]}".encode()).decode()
    config = {"auths": {address: {"username": USER[0], "password": USER[1], "auth": auth}}}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": "mirror-pull"},
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}}


@pytest.fixture(scope="module")
def mirror(kube_node: Node, berth_image: str) -> Iterator[Mirror]:
    """A Berth Registry with htpasswd auth behind a NodePort, holding the registry image as private/registry and
    private/other (tag 3.1.1); containerd told to pull from it over HTTP (hosts.toml, as docs/guide/exposure.md's
    walkthrough). It holds the node's turn (shared) for the module's life: an exclusive test that swaps or removes the
    operator (an upgrade, an install) would roll this in-memory Registry's pod by Recreate, and what it holds with it
    (a CI run's later cases found the node port refusing, then the pushed tags gone)."""
    with node_turn_lock(kube_node, exclusive=False):
        yield from _mirror(kube_node)


def _mirror(node: Node) -> Iterator[Mirror]:
    ns = node.namespace("mirror")
    node.api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "users", "namespace": ns},
                     "data": {"htpasswd": base64.b64encode(htpasswd(dict([USER]))).decode()}})
    create(node, ns, "mirror", {**INMEMORY, "service": {"type": "NodePort"},
                                "config": {"storage": {"inmemory": {}},
                                           "auth": {"htpasswd": {"secret": {"name": "users", "field": "htpasswd"}}}}})
    wait_for(lambda: ready(node, ns, "mirror"), "the mirror Ready", 180, node)
    external = wait_for(lambda: registry(node, ns, "mirror")["status"].get("externalAddress"), "its node port", 30)
    address = f"{GATEWAY}:{external.removeprefix('NODE:')}"
    archive = images.Builder().private_registry().archive  # not the preloaded image's ID (images.py says why)
    wait_for(lambda: _answers(f"http://{address}/v2/"), f"the node port {address}", 60, node)
    for repository in ("private/registry", "private/other"):
        push_archive(archive, address, f"{repository}:3.1.1", creds=USER)
    hosts = pathlib.Path(node.state.root) / "containerd" / "certs.d" / address / "hosts.toml"
    hosts.parent.mkdir(parents=True, exist_ok=True)
    hosts.write_text(f'server = "http://{address}"\n[host."http://{address}"]\n  capabilities = ["pull", "resolve"]\n')
    try:
        yield Mirror(address, ns)
    finally:
        shutil.rmtree(hosts.parent, ignore_errors=True)
        node.delete_namespace(ns)


def _answers(url: str) -> bool:
    from support.registries.registry import http_get
    try:
        return http_get(url, timeout=2).status in (200, 401)
    except OSError:
        return False


def test_a_tag_that_does_not_exist_is_named_and_fixing_it_recovers(kube_node: Node, mirror: Mirror,
                                                                   node_namespace: str) -> None:
    node, ns = kube_node, node_namespace
    node.api.create({**pull_secret(mirror.address), "metadata": {"name": "mirror-pull", "namespace": ns}})
    wrong = mirror.image("private/registry:3.9.99-no-such-tag")
    began = create(node, ns, "wrongtag", {**INMEMORY, "image": wrong, "pod": {"imagePullSecrets": [
        {"name": "mirror-pull"}]}})
    found = wait_for(lambda: degraded(node, ns, "wrongtag", "ImagePullFailed"), "wrongtag Degraded", 120, node)
    took = time.monotonic() - began
    print(f"wrong tag: Degraded ImagePullFailed {took:.1f} s after creation: {found['message']}")
    assert f"container registry-binary cannot pull image {wrong}: " in found["message"], found
    assert re.search(r"(ErrImagePull|ImagePullBackOff): .*not found", found["message"]), found
    assert took <= PULL_BOUND, f"Degraded only {took:.1f} s after creation"
    patch(node, ns, "wrongtag", {"image": mirror.image("private/registry:3.1.1")})
    wait_for(lambda: ready(node, ns, "wrongtag"), "wrongtag Ready with the right tag", 180, node)


def test_a_private_image_needs_the_pull_secret_and_recovers_when_it_is_added(kube_node: Node, mirror: Mirror,
                                                                            node_namespace: str) -> None:
    node, ns = kube_node, node_namespace
    node.api.create({**pull_secret(mirror.address), "metadata": {"name": "mirror-pull", "namespace": ns}})
    # Without the secret (an image reference no pod on this node has pulled: containerd has nothing to reuse).
    image = mirror.image("private/other:3.1.1")
    create(node, ns, "nosecret", {**INMEMORY, "image": image})
    found = wait_for(lambda: degraded(node, ns, "nosecret", "ImagePullFailed"), "nosecret Degraded", 120, node)
    print(f"without imagePullSecrets: {found['message']}")
    assert f"cannot pull image {image}: " in found["message"]
    assert re.search(r"401|[Uu]nauthorized", found["message"]), found
    generation = registry(node, ns, "nosecret")["metadata"]["generation"]
    patch(node, ns, "nosecret", {"pod": {"imagePullSecrets": [{"name": "mirror-pull"}]}})
    assert registry(node, ns, "nosecret")["metadata"]["generation"] == generation + 1  # that one edit only
    wait_for(lambda: ready(node, ns, "nosecret"), "nosecret Ready once the secret is named", 180, node)
    # With it from the start.
    create(node, ns, "withsecret", {**INMEMORY, "image": mirror.image("private/registry:3.1.1"),
                                    "pod": {"imagePullSecrets": [{"name": "mirror-pull"}]}})
    wait_for(lambda: ready(node, ns, "withsecret"), "withsecret Ready", 180, node)


# ------------------------------------------------------------------------------------- an egress proxy

def test_a_pull_through_cache_reaches_its_upstream_only_through_the_egress_proxy(
        kube_node: Node, berth_image: str, node_namespace: str, tmp_path: pathlib.Path) -> None:
    """The upstream listens on the host's 127.0.0.1, by a name only the host resolves (the node's name, which
    /etc/hosts maps to a loopback address): a pod cannot reach it, tinyproxy (on the node's bridge address) can.
    Go's net/http, and the agent's pre-flight like it, proxies a request by name (it never proxies localhost)."""
    node, ns = kube_node, node_namespace
    if node.name == "localhost":
        pytest.skip("this machine's name does not resolve to a loopback address: no name only the host resolves")
    config = (b"version: 0.1\nlog: {level: info}\nstorage: {filesystem: {rootdirectory: %s}}\n"
              b"http: {addr: ':5000'}\n" % str(tmp_path / "upstream-data").encode())
    with running_tinyproxy(tmp_path / "proxy", listen=GATEWAY, allow=("127.0.0.1", POD_CIDR)) as proxy, \
            running_registry(config, tmp_path / "upstream", binary=str(images.registry3_binary())) as upstream:
        push_image(make_oci_image(tmp_path / "app", layer_size=64 * 1024), upstream, "team/app:1.0",
                   docker_format=True)
        pushed = pull_image(upstream, "team/app:1.0", tmp_path / "direct")  # what the upstream serves
        remote = f"http://{node.name}:{upstream.port}"
        # Ready, and its Service answering from the host (kube-proxy's rules follow the pods).
        create_registry(node, ns, "cache", {**INMEMORY, "image": "docker.io/library/registry:3.1.1",
                                            "env": [{"name": "HTTP_PROXY", "value": proxy.url},
                                                    {"name": "HTTPS_PROXY", "value": proxy.url},
                                                    {"name": "NO_PROXY", "value": ".svc,10.96.0.0/16"}],
                                            "config": {"storage": {"inmemory": {}}, "proxy": {"remoteURL": remote}}})
        pulled = pull_image(service_url(node, ns, "cache").removeprefix("http://"), "team/app:1.0",
                            tmp_path / "pulled")
        assert pulled.manifest_digest == pushed.manifest_digest
        assert pulled.blobs == pushed.blobs
        requests = proxy.requests()
        print("proxied:", *requests, sep="\n  ")
        assert f"GET {remote}/v2/ HTTP/1.1" in requests  # the registry's start and the agent's pre-flight
        assert any(re.match(rf"(GET|HEAD) {re.escape(remote)}/v2/team/app/manifests/1\.0 ", r) for r in requests)
        # Who asked: the upstream's access log names each client. A pod cannot reach the upstream but through the
        # proxy, so these came through it: the agent's pre-flight, and the registry's Go client for the manifest.
        lines = [line for line in upstream.log().splitlines() if "http.request.useragent" in line]
        assert any('useragent="berth-agent preflight"' in line for line in lines), lines[-20:]
        assert any("/v2/team/app/manifests/1.0" in line and "useragent=Go-http-client" in line
                   for line in lines), lines[-20:]
