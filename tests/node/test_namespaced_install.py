"""The namespaced install (deploy/namespaced/) on the real node, from a clean copy of the checkout's
`crds/` and `deploy/`, by docs/guide/install.md's commands as written: the image set as "Build the image" says
(`newName`/`newTag` in deploy/base/kustomization.yaml), then the `install-namespaced` block (team-a and team-b) and,
at the end, the `uninstall-namespaced` block.

- The operator's two pods are Ready, one holds the Lease; the install has no `berth-operator` ClusterRole, and the
  operator's ServiceAccount may list Secrets in team-a (its tenant Role) but not in a namespace it does not watch.
- A Registry in team-a (`registry:3`, in memory) with `spec.networkPolicy` is Ready and serves a push and a pull
  through its Service; its NetworkPolicy exists as Berth builds it (admitted by the node's real API server, owned by
  the Registry). A plain Registry in team-b is Ready too. A Registry in a third namespace is left alone: no status,
  no Deployment, seconds after the others are Ready.
- Nothing the operator asked was refused (the API server's audit log, from the install to the uninstall), and its
  pods' logs have no Forbidden or 403 in them.
- The documented uninstall removes the operator and its grants only: the Registries stay, team-a's pod keeps its
  UID and restart counts, and it serves the pushed image again.

Only the NetworkPolicy object is tested, not what it admits: the node's CNI (the bridge plugin) enforces no
NetworkPolicy, so the pushes and pulls from the host would pass whatever the policy said; nothing here asserts that
traffic is blocked or let through because of it (docs/guide/exposure.md says so).

It replaces the cluster-wide operator every other node test relies on, so it runs alone (node_exclusive): it
uninstalls it first with the documented `kubectl delete -k deploy` and always installs it again (`finally`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth_api import Registry
from berth_operator.builders import ClusterFacts, network_policy
from support.clusters.node import GATEWAY, Node
from support.clusters.node_berth import (
    OPERATOR_NAMESPACE,
    REGISTRIES,
    REPO,
    create_registry,
    deployment_available,
    install_berth,
    lease_holder,
    operator_pods,
    registry,
    registry_pods,
    registry_ready,
    restart_counts,
    service_url,
    uninstall_berth,
    wait_for,
)
from support.common.doc_commands import commands
from support.registries.registry import make_oci_image, pull_image, push_image

WATCHED = ("team-a", "team-b")  # install-namespaced's block names them literally
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:berth-operator"
POLICIES = "networking.k8s.io/v1/networkpolicies"
CLUSTER_ROLES = "rbac.authorization.k8s.io/v1/clusterroles"
PLAIN = {"image": "docker.io/library/registry:3", "config": {"storage": {"inmemory": {}}}}
# Who would reach the registry if the node enforced it: its own namespace, team-b, and the node (the host pushes
# and pulls through the Service from the bridge's address); the metrics ports from a monitoring namespace.
NETWORK_POLICY = {
    "from": [{"podSelector": {}},
             {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-b"}}},
             {"ipBlock": {"cidr": f"{GATEWAY}/32"}}],
    "metricsFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
}


def _sh(node: Node, command: str, cwd: Path, timeout: float = 300) -> str:
    """One of install.md's commands as written, run by bash in the copy of the checkout with the node's kubectl."""
    done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "KUBECONFIG": node.kubeconfig})
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    return done.stdout


def _checkout(node: Node, home: Path) -> Path:
    """A clean copy of the install files, the image pointed at the node's Berth image as install.md's "Build the
    image" says (`images:` `newName`, `newTag` in deploy/base/kustomization.yaml)."""
    checkout = home / "checkout"
    for part in ("crds", "deploy"):
        shutil.copytree(REPO / part, checkout / part)
    name, _, tag = node.images["berth"].rpartition(":")
    path = checkout / "deploy" / "base" / "kustomization.yaml"
    kustomization = yaml.safe_load(path.read_text())
    (image,) = kustomization["images"]
    image.update(newName=name, newTag=tag)
    path.write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return checkout


def _audit_log(node: Node) -> Path:
    """The node's API server's audit log (support.clusters.apiserver writes one, every request at Metadata level)."""
    (found,) = [Path(d) / "audit.log" for d in node.state.dirs if (Path(d) / "audit.log").is_file()]
    return found


def _requests(log: Path, since: int, user: str) -> tuple[int, list[str]]:
    """How many requests `user` made, in the audit log after byte `since`, and those RBAC refused."""
    seen, refused = set(), []
    with log.open() as lines:
        lines.seek(since)
        for line in lines:
            if f'"{user}"' not in line or not line.endswith("\n"):
                continue
            entry = json.loads(line)
            if entry["user"]["username"] != user:
                continue
            seen.add(entry["auditID"])
            status = (entry.get("responseStatus") or {}).get("code")
            if ((entry.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
                    or status == 403):
                refused.append(f"{entry['verb']} {entry['requestURI']} -> {status}")
    return len(seen), refused


def _namespace_gone(node: Node, name: str) -> bool:
    return node.api.get("v1/namespaces", None, name) is None


def _operator_namespace_settled(node: Node) -> bool:
    """Gone or not terminating: an install may go on (a terminating namespace refuses new objects)."""
    found = node.api.get("v1/namespaces", None, OPERATOR_NAMESPACE)
    return found is None or not found["metadata"].get("deletionTimestamp")


def _fresh_namespace(node: Node, name: str) -> None:
    """`name` created anew (one a stopped earlier run left is deleted first)."""
    if not _namespace_gone(node, name):
        node.delete_namespace(name)
        wait_for(lambda: _namespace_gone(node, name), f"the namespace {name} gone", 300, node)
    node.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _can_i(node: Node, verb: str, resource: str, namespace: str) -> str:
    return node.kubectl("auth", "can-i", verb, resource, "-n", namespace, f"--as={OPERATOR_USER}",
                        check=False).strip()


def _as_built(reg: dict[str, Any], image: str) -> dict[str, Any]:
    model = Registry.model_validate({"apiVersion": reg["apiVersion"], "kind": reg["kind"],
                                     "metadata": {k: reg["metadata"][k] for k in ("name", "namespace", "uid")},
                                     "spec": reg["spec"]})
    built = network_policy.build(model, ClusterFacts(image))
    assert built is not None
    return built


@pytest.mark.node_exclusive
@pytest.mark.timeout(1500)
def test_the_documented_namespaced_install_serves_its_namespaces_only_and_builds_the_network_policy(
        kube_node: Node, berth_image: str, tmp_path: Path) -> None:
    node = kube_node
    checkout = _checkout(node, tmp_path)
    (cluster_uninstall,) = commands("uninstall")  # kubectl delete -k deploy
    created: list[str] = []
    uninstalled = False
    timings: dict[str, float] = {}
    try:
        timings["cluster-wide uninstall"] = uninstall_berth(node, cluster_uninstall)
        for namespace in WATCHED:
            _fresh_namespace(node, namespace)
            created.append(namespace)
        unwatched = node.namespace("unwatched")
        created.append(unwatched)

        audit = _audit_log(node)
        audit_from = audit.stat().st_size
        began = time.monotonic()
        for command in commands("install-namespaced"):
            _sh(node, command, checkout)
        assert (checkout / "deploy/namespaced/namespaces.env").read_text() == "WATCH_NAMESPACE=team-a,team-b\n"
        wait_for(lambda: deployment_available(node, OPERATOR_NAMESPACE, "berth-operator", 2),
                 "the namespaced operator's 2 pods Ready", 240, node)
        pods = wait_for(lambda: operator_pods(node), "the operator's 2 pods Ready, none stopping", 120, node)
        names = {pod["metadata"]["name"] for pod in pods}
        holder = wait_for(lambda: (h := lease_holder(node)) in names and h, "one operator pod leading", 60, node)
        timings["namespaced install to a leader"] = time.monotonic() - began
        for pod in pods:
            (container,) = pod["spec"]["containers"]
            assert container["image"] == node.images["berth"], container["image"]
            assert "--all-namespaces" not in container["args"], container["args"]
            assert any(e["name"] == "WATCH_NAMESPACE" for e in container["env"]), container["env"]

        # No ClusterRole reaches a Secret: the tenant Role grants them in team-a, nothing does elsewhere.
        assert node.api.get(CLUSTER_ROLES, None, "berth-operator") is None
        assert node.api.get(CLUSTER_ROLES, None, "berth-operator-cluster-reads") is not None
        assert _can_i(node, "list", "secrets", "team-a") == "yes"
        assert _can_i(node, "list", "secrets", unwatched) == "no"
        assert _can_i(node, "get", "secrets", "kube-system") == "no"

        node.api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                         "metadata": {"name": "ignored", "namespace": unwatched}, "spec": PLAIN})
        node.api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                         "metadata": {"name": "plain", "namespace": "team-b"}, "spec": PLAIN})
        began = time.monotonic()
        reg = create_registry(node, "team-a", "fenced", {**PLAIN, "networkPolicy": NETWORK_POLICY})
        timings["team-a Registry Ready and answering"] = time.monotonic() - began
        wait_for(lambda: registry_ready(node, "team-b", "plain"), "the team-b Registry Ready", 180, node)

        # A push and a pull through the Service.
        host = service_url(node, "team-a", "fenced").removeprefix("http://")
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, host, "demo/fenced:1")
        pulled = pull_image(host, "demo/fenced:1", tmp_path / "pulled")
        assert pulled.manifest_digest == image.manifest_digest and pulled.blobs == image.blobs

        # The NetworkPolicy, as Berth builds it, admitted by the API server and owned by the Registry. Not enforced
        # on this node (the bridge CNI plugin has no NetworkPolicy support): nothing is said about traffic.
        made = node.api.get(POLICIES, "team-a", "fenced")
        assert made is not None, "no NetworkPolicy team-a/fenced"
        built = _as_built(reg, node.images["berth"])
        assert made["spec"] == built["spec"], (made["spec"], built["spec"])
        assert built["metadata"]["labels"].items() <= made["metadata"]["labels"].items()
        (owner,) = made["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Registry", "fenced", reg["metadata"]["uid"])
        assert node.api.get(POLICIES, "team-b", "plain") is None, "spec.networkPolicy is off by default"

        # The third namespace is not watched: its Registry is left alone.
        time.sleep(5)
        ignored = registry(node, unwatched, "ignored")
        assert "status" not in ignored, ignored.get("status")
        assert node.api.get("apps/v1/deployments", unwatched, "ignored") is None
        assert node.api.list("v1/services", unwatched) == []

        # Nothing refused: the audit log, and both pods' logs (the standby's too).
        asked, refused = _requests(audit, audit_from, OPERATOR_USER)
        assert asked > 0, f"no request of {OPERATOR_USER} in {audit}"
        assert refused == [], refused[:10]
        for name in sorted(names):
            log = node.kubectl("logs", "-n", OPERATOR_NAMESPACE, name)
            assert log.strip(), f"{name} logged nothing"
            assert not re.search(r"forbidden| 403\b", log, re.IGNORECASE), f"{name}:\n{log[-3000:]}"

        # The documented uninstall: the operator and its grants go; the Registries stay and serve.
        (before,) = registry_pods(node, "team-a", "fenced")
        began = time.monotonic()
        for command in commands("uninstall-namespaced"):
            _sh(node, command, checkout)
        wait_for(lambda: _namespace_gone(node, OPERATOR_NAMESPACE), f"the namespace {OPERATOR_NAMESPACE} gone",
                 240, node)
        uninstalled = True
        timings["namespaced uninstall"] = time.monotonic() - began
        assert node.api.get(CLUSTER_ROLES, None, "berth-operator-cluster-reads") is None
        for namespace in WATCHED:
            assert node.api.get("rbac.authorization.k8s.io/v1/roles", namespace, "berth-operator") is None
        for namespace, name in (("team-a", "fenced"), ("team-b", "plain"), (unwatched, "ignored")):
            assert node.api.get(REGISTRIES, namespace, name) is not None, f"{namespace}/{name} went"
        assert node.api.get(POLICIES, "team-a", "fenced") is not None
        (after,) = registry_pods(node, "team-a", "fenced")
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert restart_counts(after) == restart_counts(before), (restart_counts(before), restart_counts(after))
        again = pull_image(host, "demo/fenced:1", tmp_path / "pulled-again")
        assert again.blobs == image.blobs
        print(f"namespaced install: leader {holder}, {asked} requests of the operator audited, none refused; "
              + "; ".join(f"{what} {seconds:.1f} s" for what, seconds in timings.items()))
    finally:
        try:
            if not uninstalled:  # stopped half way: take the namespaced operator away before the cluster-wide one
                node.kubectl("delete", "--ignore-not-found", "--wait=true", "-k",
                             str(checkout / "deploy" / "namespaced"), check=False, timeout=300)
            for namespace in created:
                node.delete_namespace(namespace)
        finally:
            wait_for(lambda: _operator_namespace_settled(node), f"the namespace {OPERATOR_NAMESPACE} gone", 300, node)
            install_berth(node)  # whatever happened: every other node test needs its operator
