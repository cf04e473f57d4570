"""The Gateway API and cert-manager as optional APIs (docs/decisions/0025-optional-apis.md), on a real API
server of this module's own (the worker's shared one gets CRDs installed by other tests).

A Registry with spec.gateway and spec.http.tls.issuerRef on a cluster without their CRDs is Degraded, the
message naming HTTPRoute and Certificate, their apiVersions and what to install, and the Deployment is made.
The CRDs are then installed (vendored, tests/fixtures): with the same operator process, the HTTPRoute and the
Certificate are made, Degraded goes, and the Registry waits for the Certificate's Secret (WaitingForCertificate)
until the test writes it as cert-manager would; the pods mount it as the TLS volume.
"""

from __future__ import annotations

import base64

import pytest

from support.clusters.apiserver import (
    KubeApiServer,
    install_cert_manager_crds,
    install_gateway_api_crds,
)
from support.clusters.apiserver_identities import operator_on_own_server, refused_requests
from support.common.polling import wait_for
from support.services.certs import self_signed

REGISTRIES = "berth.dev/v1alpha1/registries"
NS, NAME = "exposed", "edge"


def conditions(api: KubeApiServer) -> dict[str, dict]:
    reg = api.get(REGISTRIES, NS, NAME) or {}
    return {c["type"]: c for c in (reg.get("status") or {}).get("conditions") or ()}


def reasons(api: KubeApiServer) -> set[str]:
    return {c["reason"] for c in conditions(api).values()}


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    with operator_on_own_server(tmp_path_factory.mktemp("exposed"), [NS], (NS,)) as running:
        yield running


def test_missing_gateway_api_and_cert_manager_are_named_and_recovered_without_a_restart(bare):
    api, operator, token = bare
    api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": NAME, "namespace": NS},
                "spec": {"config": {"storage": {"inmemory": {}}},
                         "http": {"tls": {"issuerRef": {"name": "ca", "kind": "ClusterIssuer"}}},
                         "gateway": {"parentRefs": [{"name": "public"}], "hostnames": ["registry.example.com"]}}})
    try:
        wait_for(lambda: {"MissingGatewayAPI", "MissingCertManager"} & reasons(api)
                 and "HTTPRoute" in conditions(api)["Degraded"].get("message", "")
                 and "Certificate" in conditions(api)["Degraded"].get("message", ""), "Degraded naming both", 60)
    except AssertionError:
        raise AssertionError(f"{conditions(api)}\n{operator.log()[-3000:]}") from None
    message = conditions(api)["Degraded"]["message"]
    assert "HTTPRoute (gateway.networking.k8s.io/v1) is not served by this cluster: install the Gateway API" in message
    assert "Certificate (cert-manager.io/v1) is not served by this cluster: install cert-manager" in message
    assert "spec.gateway" in message and "spec.http.tls.issuerRef" in message
    deployment = wait_for(lambda: api.get("apps/v1/deployments", NS, NAME), "the Deployment", 60)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert any((v.get("secret") or {}).get("secretName") == f"{NAME}-tls" for v in volumes.values())

    install_gateway_api_crds(api)
    install_cert_manager_crds(api)
    route = wait_for(lambda: api.get("gateway.networking.k8s.io/v1/httproutes", NS, NAME), "the HTTPRoute", 60)
    assert route["spec"]["hostnames"] == ["registry.example.com"]
    cert = wait_for(lambda: api.get("cert-manager.io/v1/certificates", NS, f"{NAME}-tls"), "the Certificate", 60)
    assert cert["spec"]["secretName"] == f"{NAME}-tls"
    assert cert["spec"]["issuerRef"] == {"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert f"{NAME}.{NS}.svc" in cert["spec"]["dnsNames"]
    wait_for(lambda: not {"MissingGatewayAPI", "MissingCertManager"} & reasons(api), "Degraded gone", 60)
    wait_for(lambda: "WaitingForCertificate" in reasons(api), "WaitingForCertificate", 60)

    # cert-manager's part: the Secret of the Certificate, with the template's labels.
    pem_cert, pem_key = self_signed(f"{NAME}.{NS}.svc")
    api.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": f"{NAME}-tls", "namespace": NS,
                             "labels": cert["spec"]["secretTemplate"]["labels"],
                             "annotations": {"cert-manager.io/certificate-name": f"{NAME}-tls"}},
                "data": {"tls.crt": base64.b64encode(pem_cert).decode(),
                         "tls.key": base64.b64encode(pem_key).decode()}})
    wait_for(lambda: "WaitingForCertificate" not in reasons(api), "WaitingForCertificate gone", 60)
    assert (api.get(REGISTRIES, NS, NAME)["status"]["externalAddress"]) == "registry.example.com"

    # The field goes: its object is pruned.
    api.patch(REGISTRIES, NS, NAME, {"spec": {"gateway": None}})
    wait_for(lambda: api.get("gateway.networking.k8s.io/v1/httproutes", NS, NAME) is None, "the HTTPRoute pruned", 60)
    api.patch(REGISTRIES, NS, NAME, {"spec": {"http": {"tls": None}}})
    wait_for(lambda: api.get("cert-manager.io/v1/certificates", NS, f"{NAME}-tls") is None, "the Certificate pruned",
             60)
    assert api.get("v1/secrets", NS, f"{NAME}-tls") is not None  # cert-manager's Secret is cert-manager's to keep
    refused = refused_requests(api, token)
    assert refused == [], refused[:3]
