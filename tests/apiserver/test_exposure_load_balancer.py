"""A LoadBalancer Service with no controller, on the real API server: berth-operator (deploy/'s RBAC,
its own token) makes it; the test then writes status.loadBalancer.ingress through the status subresource as a
cloud controller would, first an ip, then a hostname. status.externalAddress and `kubectl get reg -o wide`'s
External column (the CRD's additionalPrinterColumns, evaluated by the API server: a Table request, as kubectl
makes) report what was written and, before anything was, no load balancer address: only the node port the API
server allocated (a LoadBalancer Service is a NodePort Service too; kube-proxy serves that port on every node).
Back to ClusterIP, nothing is claimed at all.
"""

from __future__ import annotations

import json

import urllib3

from support.clusters.apiserver import KubeApiServer, api_path
from support.clusters.apiserver_identities import start_operator
from support.clusters.operator_harness import REGISTRIES_PATH
from support.common.polling import wait_for

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"  # what kubectl get asks for


def registry(namespace: str) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
            "metadata": {"name": "edge", "namespace": namespace},
            "spec": {"config": {"storage": {"inmemory": {}}}, "service": {"type": "LoadBalancer"}}}


def wide_columns(api: KubeApiServer, namespace: str, name: str) -> dict[str, object]:
    """The Registry as `kubectl get reg NAME -o wide` prints it: column name -> cell, from the server's Table."""
    http = urllib3.PoolManager(ca_certs=str(api.ca_file), cert_reqs="CERT_REQUIRED")
    answer = http.request("GET", api.url + api_path(REGISTRIES_PATH, namespace, name),
                          headers={"Authorization": f"Bearer {api.admin_token}", "Accept": TABLE}, retries=False)
    assert answer.status == 200, answer.data[:500]
    table = json.loads(answer.data)
    assert table["kind"] == "Table"
    [row] = table["rows"]
    return {column["name"]: cell for column, cell in zip(table["columnDefinitions"], row["cells"], strict=True)}


def external(api: KubeApiServer, namespace: str) -> str | None:
    return (api.get(REGISTRIES_PATH, namespace, "edge").get("status") or {}).get("externalAddress")


def write_load_balancer(api: KubeApiServer, namespace: str, ingress: list[dict]) -> None:
    """As a cloud controller does: the Service's status subresource, nothing else."""
    written = api.patch("v1/services", namespace, "edge", {"status": {"loadBalancer": {"ingress": ingress}}},
                        subresource="status")
    seen = written["status"]["loadBalancer"].get("ingress", [])  # the server adds ipMode: VIP to an ip
    assert [{k: v for k, v in e.items() if k != "ipMode"} for e in seen] == ingress


def test_the_load_balancer_address_is_reported_once_written_and_not_before(kube_apiserver, apiserver_namespace,
                                                                          tmp_path):
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns))
    operator, _ = start_operator(api, "berth-operator-0", tmp_path, [ns])
    try:
        svc = wait_for(lambda: api.get("v1/services", ns, "edge"), "the LoadBalancer Service", 90)
        assert svc["spec"]["type"] == "LoadBalancer"
        assert svc["status"] == {"loadBalancer": {}}  # no controller: nothing written
        node_port = svc["spec"]["ports"][0]["nodePort"]
        wait_for(lambda: external(api, ns) == f"NODE:{node_port}", f"status.externalAddress NODE:{node_port}", 60)
        columns = wide_columns(api, ns, "edge")
        assert columns["External"] == f"NODE:{node_port}"
        assert columns["URL"] == f"http://edge.{ns}.svc:5000"  # status.url stays the in-cluster URL

        write_load_balancer(api, ns, [{"ip": "203.0.113.7"}])
        wait_for(lambda: external(api, ns) == "203.0.113.7:5000", "status.externalAddress of the ip", 60)
        assert wide_columns(api, ns, "edge")["External"] == "203.0.113.7:5000"

        write_load_balancer(api, ns, [{"hostname": "lb-1.elb.example.com"}])
        wait_for(lambda: external(api, ns) == "lb-1.elb.example.com:5000", "status.externalAddress of the hostname",
                 60)
        columns = wide_columns(api, ns, "edge")
        assert columns["External"] == "lb-1.elb.example.com:5000"
        assert columns["URL"] == f"http://edge.{ns}.svc:5000"

        # The controller takes its address back (the load balancer is gone): the claim goes with it.
        write_load_balancer(api, ns, [])
        wait_for(lambda: external(api, ns) == f"NODE:{node_port}", "status.externalAddress back to the node port", 60)
        assert wide_columns(api, ns, "edge")["External"] == f"NODE:{node_port}"

        # Back to ClusterIP: no address from outside, and the column is empty.
        api.patch(REGISTRIES_PATH, ns, "edge", {"spec": {"service": None}})
        wait_for(lambda: external(api, ns) is None, "status.externalAddress gone", 60)
        assert wide_columns(api, ns, "edge")["External"] in (None, "")
    finally:
        operator.stop()
