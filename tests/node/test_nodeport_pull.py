"""The NodePort walkthrough of docs/guide/exposure.md ("Pull over HTTP through a NodePort") on the real node:
a Registry with the guide's `spec.service`, an image pushed from the host with skopeo
through the node port to the guide's reference, containerd set up with the guide's `hosts.toml` (in the node's own
config_path, not /etc), and a Pod whose image is NODE:nodePort/...: containerd pulls it from Berth and the Pod runs.

The guide's own text is the input: its `spec.service`, its hosts.toml path, its TOML block (`run:
nodeport-hosts-toml`) and its push (`run: nodeport-push`), with NODE replaced by the node's address. A step the
guide gets wrong or leaves out fails here.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import tarfile
import tomllib

import yaml

from support.clusters import images
from support.clusters.node import Node
from support.clusters.node_berth import create_registry, registry, registry_pods, wait_for
from support.common.doc_commands import block, commands, section
from support.registries.registry import OCI_MANIFEST, http_get, push_image

LAYER = "application/vnd.oci.image.layer.v1.tar"  # uncompressed: a layer's digest is its diff_id


def _walkthrough() -> tuple[dict, str, str, str]:
    """From docs/guide/exposure.md's "Pull over HTTP through a NodePort": the NodePort `spec.service`, the
    hosts.toml path (under /etc/containerd/certs.d, NODE in it), the TOML block and the pushed reference."""
    text = section("docs/guide/exposure.md", "Pull over HTTP through a NodePort")
    service = yaml.safe_load(re.search(r"`spec\.service: (\{[^`]*\})`", text).group(1))
    path = re.search(r"`/etc/containerd/certs\.d/([^`]+/hosts\.toml)`", text).group(1)
    assert 'config_path = "/etc/containerd/certs.d"' in text, "the guide no longer says where config_path points"
    toml = block("nodeport-hosts-toml")
    (push,) = commands("nodeport-push")
    reference = re.fullmatch(r"skopeo copy --dest-tls-verify=false oci:\S+ docker://NODE:(\d+)/(\S+)", push)
    assert reference and int(reference.group(1)) == service["nodePort"], push
    return service, path, toml, reference.group(2)


def _runnable_layout(layout: pathlib.Path, token: str) -> str:
    """An OCI layout of the node images' busybox layer (support.clusters.images) and one layer holding `token`, whose
    command prints it and sleeps; returns the manifest digest. The token makes it unique per run: containerd
    cannot have it already."""
    busybox = images.Builder().busybox()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = f"{token}\n".encode()
        info = tarfile.TarInfo("served.txt")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes, media_type: str) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    layers = [put(busybox.tar.read_bytes(), LAYER), put(buffer.getvalue(), LAYER)]
    assert layers[0]["digest"] == busybox.diff_id, "the busybox layer's tar is not what its diff_id names"
    config = put(json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["/bin/sh", "-c", "cat /served.txt && exec sleep 3600"]},
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]}}).encode(),
        "application/vnd.oci.image.config.v1+json")
    manifest = put(json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config,
                               "layers": layers}).encode(), OCI_MANIFEST)
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
    return manifest["digest"]


def _node_address(node: Node) -> str:
    addresses = node.api.get("v1/nodes", None, node.name)["status"]["addresses"]
    return next(a["address"] for a in addresses if a["type"] == "InternalIP")


def test_the_guides_nodeport_walkthrough_a_pod_runs_an_image_berth_serves(
        kube_node: Node, berth_image: str, node_namespace: str, tmp_path: pathlib.Path) -> None:
    service, hosts_path, hosts_toml, reference = _walkthrough()
    assert service["type"] == "NodePort", service
    create_registry(kube_node, node_namespace, "apps", {"service": service, "config": {"storage": {"inmemory": {}}}})
    node_port = service["nodePort"]
    assert registry(kube_node, node_namespace, "apps")["status"].get("externalAddress") == f"NODE:{node_port}"
    node_ip = _node_address(kube_node)
    address = f"{node_ip}:{node_port}"
    # The node port from the host (kube-proxy's rules, nodePortAddresses = the node's address).
    wait_for(lambda: _answers(f"http://{address}/v2/"), f"the node port {address} answering", 60, kube_node)

    token = os.urandom(8).hex()
    digest = _runnable_layout(tmp_path / "app", token)
    push_image(tmp_path / "app", address, reference)  # the guide's skopeo copy oci:... docker://NODE:PORT/team/app:1.0

    # containerd as the guide sets it up, in this node's own config_path (the node's containerd config has it
    # in the CRI registry section, as the guide says).
    config = tomllib.loads((pathlib.Path(kube_node.state.root) / "containerd" / "config.toml").read_text())
    certs_d = pathlib.Path(config["plugins"]["io.containerd.grpc.v1.cri"]["registry"]["config_path"])
    hosts_file = certs_d / hosts_path.replace("NODE", node_ip)
    hosts_file.parent.mkdir(parents=True)
    hosts_file.write_text(hosts_toml.replace("NODE", node_ip))
    try:
        image = f"{address}/{reference}"
        kube_node.api.create({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": node_namespace},
            "spec": {"containers": [{"name": "app", "image": image}], "terminationGracePeriodSeconds": 1}})
        pod = wait_for(lambda: _running(kube_node, node_namespace, "app"), f"the Pod running {image}", 120, kube_node)
    finally:
        shutil.rmtree(hosts_file.parent)
    (status,) = pod["status"]["containerStatuses"]
    assert status["imageID"].endswith(digest), status  # what containerd pulled is what was pushed to Berth
    logs = wait_for(lambda: kube_node.kubectl("logs", "-n", node_namespace, "app").strip(), "the Pod's output", 30)
    assert logs == token, logs
    # The pull went through the registry: its pod logged the manifest request by digest or tag.
    (registry_pod,) = registry_pods(kube_node, node_namespace, "apps")
    served = kube_node.kubectl("logs", "-n", node_namespace, registry_pod["metadata"]["name"], "-c", "registry")
    repository, tag = reference.rsplit(":", 1)
    assert re.search(rf"/v2/{re.escape(repository)}/manifests/({re.escape(tag)}|sha256:)", served), served[-3000:]


def _answers(url: str) -> bool:
    try:
        return http_get(url, timeout=2).status == 200
    except OSError:
        return False


def _running(node: Node, namespace: str, name: str) -> dict | None:
    pod = node.api.get("v1/pods", namespace, name) or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    waiting = [s["state"]["waiting"] for s in statuses if "waiting" in s.get("state", {})]
    if any(w.get("reason") in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName") for w in waiting):
        raise AssertionError(f"containerd could not pull the image: {waiting}")
    return pod if statuses and all(s.get("ready") for s in statuses) else None
