"""kube/client.py and kube/config.py against the real kube-apiserver (support.clusters.apiserver): TLS verified
against its CA, a bearer token from a kubeconfig, the pod's ServiceAccount files (a rotated token), a client
certificate, and the API server's own answers (a merge patch of the status subresource, a watch resumed from a
list). A watch's 410, a cut connection and the timeouts: test_client.py, against kmock."""

from __future__ import annotations

import base64
import ssl

import pytest
import yaml

from berth_agent.kube.api import MERGE_PATCH, describe_api_error, registry_path
from berth_agent.kube.client import ApiClient, ApiError, api_path
from berth_agent.kube.config import from_kubeconfig, in_cluster
from support.clusters.apiserver import KubeApiServer
from support.services.certs import private_ca_and_leaf

SECRETS = "/api/v1/namespaces/{namespace}/secrets"
SELF_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def registry(namespace: str) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "reg", "namespace": namespace},
            "spec": {"config": {"storage": {"inmemory": {}}}}}


def who(client: ApiClient) -> str:
    review = client.request("POST", SELF_REVIEW, body={"apiVersion": "authentication.k8s.io/v1",
                                                       "kind": "SelfSubjectReview"})
    return review["status"]["userInfo"]["username"]


def test_a_kubeconfig_token_over_verified_tls(kube_apiserver, apiserver_namespace):
    client = ApiClient(from_kubeconfig([kube_apiserver.kubeconfig]))
    assert who(client) == "admin"
    kube_apiserver.create(registry(apiserver_namespace))
    listing = client.request("GET", registry_path(apiserver_namespace), query={"fieldSelector": "metadata.name=reg"})
    assert [item["metadata"]["name"] for item in listing["items"]] == ["reg"]
    patched = client.request("PATCH", registry_path(apiserver_namespace, "reg", "status"), content_type=MERGE_PATCH,
                             body={"status": {"agents": {"pod-a": {"configHash": "h"}}}})
    assert patched["status"]["agents"] == {"pod-a": {"configHash": "h"}}
    stream = client.stream(registry_path(apiserver_namespace), {
        "watch": True, "fieldSelector": "metadata.name=reg", "timeoutSeconds": 1, "allowWatchBookmarks": True,
        "resourceVersion": listing["metadata"]["resourceVersion"]}, timeout=(5, 20))
    events = [(event["type"], event["object"]["metadata"].get("name")) for event in stream]
    assert ("MODIFIED", "reg") in events  # the status patch, resumed from the list's resourceVersion
    assert len(client._idle) == 1  # the watch ended cleanly: its TLS connection is kept for the next call
    with pytest.raises(ApiError) as missing:
        client.request("GET", registry_path(apiserver_namespace, "planted-name"))
    assert (missing.value.status, missing.value.reason) == (404, "Not Found")
    assert "planted" not in str(missing.value) + repr(missing.value)


def test_the_pods_service_account_files(kube_apiserver, apiserver_namespace, tmp_path):
    root = tmp_path / "serviceaccount"
    root.mkdir()
    (root / "ca.crt").write_bytes(kube_apiserver.ca_file.read_bytes())
    (root / "token").write_text(kube_apiserver.admin_token)
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(kube_apiserver.port)}
    client = ApiClient(in_cluster(environ, root))
    assert who(client) == "admin"
    # A rotated token is used from the next call on (a ServiceAccount's, which RBAC here lets read nothing).
    kube_apiserver.create({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": "agent", "namespace": apiserver_namespace}})
    (root / "token").write_text(kube_apiserver.service_account_token(apiserver_namespace, "agent"))
    assert who(client) == f"system:serviceaccount:{apiserver_namespace}:agent"
    with pytest.raises(ApiError) as forbidden:
        client.request("GET", api_path(SECRETS, namespace=apiserver_namespace))
    assert describe_api_error(forbidden.value) == "API answered 403 Forbidden"


def test_a_server_outside_the_trusted_ca_is_refused(kube_apiserver, tmp_path):
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(private_ca_and_leaf()[0])
    config = yaml.safe_load(kube_apiserver.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["certificate-authority"] = str(other_ca)
    (tmp_path / "config").write_text(yaml.safe_dump(config))
    with pytest.raises(ssl.SSLCertVerificationError) as refused:
        ApiClient(from_kubeconfig([tmp_path / "config"])).request("GET", "/api")
    assert describe_api_error(refused.value) == "cannot reach the API server (SSLCertVerificationError)"
    config["clusters"][0]["cluster"] = {"server": kube_apiserver.url, "insecure-skip-tls-verify": True}
    (tmp_path / "config").write_text(yaml.safe_dump(config))
    assert who(ApiClient(from_kubeconfig([tmp_path / "config"]))) == "admin"


def test_a_client_certificate_from_kubeconfig_data_and_files(tmp_path):
    """kube-apiserver with --client-ca-file: the certificate's common name is the user (no token sent)."""
    ca, cert, key = private_ca_and_leaf()  # the leaf's common name is 127.0.0.1
    (tmp_path / "client-ca.pem").write_bytes(ca)
    (tmp_path / "client.crt").write_bytes(cert)
    (tmp_path / "client.key").write_bytes(key)
    with KubeApiServer(extra_args=(f"--client-ca-file={tmp_path / 'client-ca.pem'}",)) as server:
        cluster = {"server": server.url, "certificate-authority": str(server.ca_file)}
        users = {"data": {"client-certificate-data": base64.b64encode(cert).decode(),
                          "client-key-data": base64.b64encode(key).decode()},
                 "files": {"client-certificate": "client.crt", "client-key": "client.key"}}
        for name, user in users.items():
            path = tmp_path / f"kubeconfig-{name}"
            path.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
            assert who(ApiClient(from_kubeconfig([path]))) == "127.0.0.1", name
