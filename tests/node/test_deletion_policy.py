"""The deletion policy of the claim Berth makes from `filesystem.storageClass`, on the real node, where the controller
manager's garbage collector deletes what a deleted Registry owned.

- Retain (the default): delete a Registry holding a pushed image; once its Deployment and pods are gone, the claim
  is still there, Bound to the same volume. Create the Registry again: it mounts that claim and the image pulls,
  same digest.
- Delete: the claim goes with the Registry.

The node has no provisioner: a StorageClass without one (`kubernetes.io/no-provisioner`) and a PersistentVolume
of that class bound ahead to the claim Berth will make (`claimRef`), on a host directory.
"""

from __future__ import annotations

import os
import pathlib
import tempfile

from support.clusters.node import Node
from support.clusters.node_berth import REGISTRIES, create_registry, registry_pods, service_url, wait_for
from support.registries.registry import make_oci_image, pull_image, push_image

CLASS = "berth-static"


def static_volume(node: Node, namespace: str, claim: str) -> pathlib.Path:
    """A StorageClass without a provisioner (once) and a 1Gi ReadWriteOnce volume of it, bound ahead to `claim`."""
    if node.api.get("storage.k8s.io/v1/storageclasses", None, CLASS) is None:
        try:
            node.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": CLASS},
                             "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"})
        except Exception as error:  # noqa: BLE001 - another worker's test made it meanwhile
            if getattr(error, "status", None) != 409:
                raise
    path = pathlib.Path(tempfile.mkdtemp(prefix=f"berth-pv-{namespace}-", dir=node.state.root))
    os.chown(path, 65532, 65532)  # hostPath gets no fsGroup: the registry (65532) owns its data
    node.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-{claim}"},
                     "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                              "persistentVolumeReclaimPolicy": "Retain", "storageClassName": CLASS,
                              "hostPath": {"path": str(path), "type": "Directory"},
                              "claimRef": {"namespace": namespace, "name": claim}}})
    return path


def spec(policy: str | None = None) -> dict:
    filesystem = {"storageClass": CLASS, "size": "1Gi", **({"deletionPolicy": policy} if policy else {})}
    return {"image": "docker.io/library/registry:3", "config": {"storage": {"filesystem": filesystem}}}


def claim(node: Node, namespace: str, name: str) -> dict | None:
    return node.api.get("v1/persistentvolumeclaims", namespace, name)


def delete_registry(node: Node, namespace: str, name: str) -> None:
    """Delete the Registry and wait for the collector to remove what it owned: its Deployment and its pods."""
    node.api.delete(REGISTRIES, namespace, name)
    wait_for(lambda: node.api.get("apps/v1/deployments", namespace, name) is None
             and not registry_pods(node, namespace, name), f"Registry {name}'s Deployment and pods gone", 120, node)


def test_retain_keeps_the_claim_and_a_registry_made_again_pulls_the_image(kube_node: Node, berth_image: str,
                                                                          node_namespace: str,
                                                                          tmp_path: pathlib.Path) -> None:
    ns = node_namespace
    data = static_volume(kube_node, ns, "keep-data")
    create_registry(kube_node, ns, "keep", spec())
    before = claim(kube_node, ns, "keep-data")
    assert "ownerReferences" not in before["metadata"], before["metadata"]
    image = make_oci_image(tmp_path / "image")
    host = service_url(kube_node, ns, "keep").removeprefix("http://")
    push_image(image, host, "team/app:v1")

    delete_registry(kube_node, ns, "keep")
    kept = claim(kube_node, ns, "keep-data")
    assert kept is not None and not kept["metadata"].get("deletionTimestamp"), "the retained claim was deleted"
    assert kept["metadata"]["uid"] == before["metadata"]["uid"] and kept["status"]["phase"] == "Bound"
    assert any(data.rglob("link")), "the registry's data left the volume"

    create_registry(kube_node, ns, "keep", spec())
    assert claim(kube_node, ns, "keep-data")["metadata"]["uid"] == before["metadata"]["uid"]
    host = service_url(kube_node, ns, "keep").removeprefix("http://")
    pulled = pull_image(host, "team/app:v1", tmp_path / "pulled")
    assert pulled.manifest_digest == image.manifest_digest and pulled.blobs == image.blobs


def test_delete_takes_the_claim_with_the_registry(kube_node: Node, berth_image: str, node_namespace: str) -> None:
    ns = node_namespace
    static_volume(kube_node, ns, "drop-data")
    create_registry(kube_node, ns, "drop", spec("Delete"))
    owned = claim(kube_node, ns, "drop-data")
    registry_uid = kube_node.api.get(REGISTRIES, ns, "drop")["metadata"]["uid"]
    assert [ref["uid"] for ref in owned["metadata"]["ownerReferences"]] == [registry_uid]

    delete_registry(kube_node, ns, "drop")
    wait_for(lambda: claim(kube_node, ns, "drop-data") is None, "the claim collected under Delete", 120, kube_node)
