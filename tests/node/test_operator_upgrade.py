"""Berth's own upgrade: `kubectl set image` on deploy/berth-operator, as any upgrade does, changes every
registry pod's template (the agent is the operator's image). A one-replica Registry on a ReadWriteOnce claim under
a probe through its Service (a new connection every 20 ms, no retry) and an 8 s upload: nothing refused, nothing
failed (before: 18.2 s down, 786 refused). It runs alone on the node (node_exclusive): it rolls every Registry."""

from __future__ import annotations

import os
import time
import urllib.parse

import pytest

from support.clusters.node import Node
from support.clusters.node_berth import (
    OPERATOR_NAMESPACE,
    OPERATOR_SELECTOR,
    create_registry,
    deployment_available,
    filesystem_claim,
    operator_pods,
    pods,
    ready,
    registry_pods,
    service_url,
    wait_for,
)
from support.traffic.new_connections import NewConnectionLoop
from support.traffic.upload import SlowUpload

pytestmark = [pytest.mark.node_exclusive, pytest.mark.timeout(2400)]


def _operator_image(node: Node) -> str:
    deployment = node.api.get("apps/v1/deployments", OPERATOR_NAMESPACE, "berth-operator")
    return next(c["image"] for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "operator")


def _set_operator_image(node: Node, image: str) -> None:
    node.kubectl("-n", OPERATOR_NAMESPACE, "set", "image", "deploy/berth-operator", f"operator={image}")
    # Every operator pod on it, none of the other left: a pod of the old image still leading after the Deployment
    # says available made the next test's Registry with the old agent image (an exclusive test after this one found
    # its pod replaced once the operator was installed again).
    wait_for(lambda: deployment_available(node, OPERATOR_NAMESPACE, "berth-operator", 2)
             and _operator_image(node) == image
             and (found := operator_pods(node)) is not None
             and len(pods(node, OPERATOR_NAMESPACE, OPERATOR_SELECTOR)) == 2
             and all(c["image"] == image for pod in found for c in pod["spec"]["containers"]),
             f"the operator's pods all on {image}", 240, node)


def test_the_operators_upgrade_rolls_a_readwriteonce_registry_with_nothing_refused(
        kube_node: Node, berth_image: str, node_namespace: str) -> None:
    ns = node_namespace
    filesystem_claim(kube_node, ns, "data", access_mode="ReadWriteOnce")
    create_registry(kube_node, ns, "kept", {
        "image": "docker.io/library/registry:3", "http": {"drainTimeout": "30s"},
        "config": {"storage": {"filesystem": {"persistentVolumeClaim": "data"}}}})
    (old,) = registry_pods(kube_node, ns, "kept")
    original = _operator_image(kube_node)
    upgraded = f"{original}-next"
    kube_node.tag_image(original, upgraded)
    url = service_url(kube_node, ns, "kept")
    parts = urllib.parse.urlsplit(url)
    probe = NewConnectionLoop(parts.hostname, parts.port, pause=0.02).start()
    upload = SlowUpload(url, "demo/slow", os.urandom(512 * 1024), seconds=8).start()
    try:
        assert upload.in_flight.wait(30), "the upload did not start"
        began = time.monotonic()
        _set_operator_image(kube_node, upgraded)

        def upgraded_pod() -> bool:
            found = registry_pods(kube_node, ns, "kept")
            return any(p["metadata"]["uid"] != old["metadata"]["uid"] and ready(p)
                       and any(c["image"] == upgraded for c in p["spec"]["containers"]) for p in found)

        wait_for(upgraded_pod, "the registry pod on the new Berth image", 300, kube_node)
        serving = time.monotonic() - began
        wait_for(lambda: len(kube_node.api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]) == 1,
                 "the old registry pod gone", 240, kube_node)
        upload.join(120)
    finally:
        counts = probe.stop()
        _set_operator_image(kube_node, original)
    print(f"operator upgrade: the registry's new pod served {serving:.1f} s after `kubectl set image`; through the "
          f"Service {counts.answered} answered, {counts.refused} refused, {counts.closed_without_response} closed "
          f"without a response, {counts.failed} failed; upload {upload.error or 'completed'}")
    assert upload.error is None and upload.read_back() == upload.data, (upload.error, upload.statuses)
    assert counts.refused == 0 and counts.failed == 0 and counts.closed_without_response == 0, counts
    assert counts.answered > 100, counts
