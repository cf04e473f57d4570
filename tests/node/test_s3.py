"""storage.s3 on a real node: a 2-replica Registry with its key in a Secret, against moto (IAM enforced)
on the node's bridge address (pods reach it there), is Ready and serves pushes and pulls through its Service."""

from __future__ import annotations

import pathlib

from support.clouds.s3 import REGION, running_moto
from support.clusters.node import GATEWAY, Node
from support.clusters.node_berth import create_registry, registry_pods, service_url
from support.registries.registry import make_oci_image, pull_image, push_image

BUCKET = "registry-data"


def test_a_two_replica_s3_registry_with_keys_from_a_secret_serves_through_its_service(
        kube_node: Node, berth_image: str, node_namespace: str, tmp_path: pathlib.Path) -> None:
    node, ns = kube_node, node_namespace
    with running_moto(tmp_path / "moto", host=GATEWAY) as moto:
        key = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        node.api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-keys", "namespace": ns},
                         "stringData": {"AWS_ACCESS_KEY_ID": key.access_key_id,
                                        "AWS_SECRET_ACCESS_KEY": key.secret_access_key}})
        create_registry(node, ns, "s3", {
            "image": "docker.io/library/registry:3.1.1", "replicas": 2,
            "config": {"storage": {
                "s3": {"bucket": BUCKET, "region": REGION, "regionEndpoint": moto.endpoint,
                       "credentials": {"secretName": "s3-keys"}, "chunkSize": 5242880},
                "redirect": {"disabled": True}}},  # presigned URLs fail under IAM (docs/upstream.md#parts-moto)
        }, replicas=2)
        assert len(registry_pods(node, ns, "s3")) == 2
        host = service_url(node, ns, "s3").removeprefix("http://")
        for tag in ("1", "2"):
            image = make_oci_image(tmp_path / f"image{tag}", layer_size=256 * 1024)
            push_image(image, host, f"demo/app:{tag}")
            for turn in range(4):  # through the Service: both replicas answer some of these
                assert pull_image(host, f"demo/app:{tag}", tmp_path / f"pulled{tag}-{turn}").blobs == image.blobs
        assert any(k.endswith("/data") for k in moto.list_objects(BUCKET))
