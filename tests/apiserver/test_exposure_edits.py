"""Each field of spec.service, spec.ingress and spec.gateway edited on its own (each field edit touches
only its object), on the real API server with berth-operator (deploy/'s RBAC, its own token).

After each edit has been reconciled (status.observedGeneration), the audit log holds the operator's writes since
the edit: exactly the intended object's (a server-side apply patch, which creates an object too, or a delete and
an apply where Kubernetes refuses the change in place), besides the Registry itself (status, kopf's annotations)
and Events. The Deployment is never written: its resourceVersion (no controller runs here, so nothing else
writes it) and its pod template are the ones from before the first edit. A field removed after a replacement
goes too (the replacement is applied, so Berth's apply entry owns its fields).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from berth_operator.kube.client import FIELD_MANAGER
from support.clusters.apiserver import (
    KubeApiServer,
    install_cert_manager_crds,
    install_gateway_api_crds,
)
from support.clusters.apiserver_identities import OPERATOR_USER, refused_requests, start_operator
from support.clusters.operator_harness import REGISTRIES_PATH, reconciled
from support.common.polling import wait_for

WRITES = ("create", "update", "patch", "delete")
NAME = "edited"
SERVICES, INGRESSES = "v1/services", "networking.k8s.io/v1/ingresses"
ROUTES = "gateway.networking.k8s.io/v1/httproutes"
ISSUER = {"name": "ca", "kind": "ClusterIssuer"}
Write = tuple[str, str, str]  # verb, resource, name


def registry(namespace: str, **spec: object) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
            "metadata": {"name": NAME, "namespace": namespace},
            "spec": {"config": {"storage": {"inmemory": {}}}, **spec}}


class Editor:
    """The Registry under the running operator: edit one field, wait for its reconcile, return what was written."""

    def __init__(self, api: KubeApiServer, namespace: str):
        self.api, self.ns = api, namespace
        wait_for(lambda: reconciled(api, namespace, NAME) and api.get("apps/v1/deployments", namespace, NAME),
                 "the first reconcile", 90)
        self.deployment = api.get("apps/v1/deployments", namespace, NAME)

    def edit(self, spec: dict[str, Any], path: str, shows: Callable[[dict[str, Any]], bool],
             *written: Write) -> dict[str, Any]:
        """Patch spec, wait until the object at path shows() the edit and the generation is reconciled; check the
        operator wrote exactly `written` (besides status and Events) and never the Deployment."""
        mark = self.api.audit_mark()
        generation = self.api.patch(REGISTRIES_PATH, self.ns, NAME, {"spec": spec})["metadata"]["generation"]
        live = wait_for(lambda: (obj := self.api.get(path, self.ns, NAME)) and shows(obj) and obj,
                        f"{path} after {spec}", 60)
        wait_for(lambda: (reg := reconciled(self.api, self.ns, NAME)) and reg["metadata"]["generation"] == generation,
                 f"generation {generation} reconciled", 60)
        assert self.writes(mark) == sorted(written), spec
        self.check_deployment()
        return live

    def writes(self, mark: int) -> list[Write]:
        return sorted((e["verb"], e["objectRef"]["resource"], e["objectRef"].get("name", ""))
                      for e in self.api.audit(OPERATOR_USER, since=mark)
                      if e["verb"] in WRITES and (e.get("objectRef") or {}).get("namespace") == self.ns
                      # kopf's own annotations on the Registry, its status, and Events: not objects of the Registry
                      and e["objectRef"].get("resource") not in ("events", "registries"))

    def check_deployment(self) -> None:
        now = self.api.get("apps/v1/deployments", self.ns, NAME)
        assert now["metadata"]["resourceVersion"] == self.deployment["metadata"]["resourceVersion"]
        assert json.dumps(now["spec"]["template"], sort_keys=True) == json.dumps(
            self.deployment["spec"]["template"], sort_keys=True)


def applied(resource: str) -> Write:
    return "patch", resource, NAME


def check_under_operator(api: KubeApiServer, ns: str, tmp_path: Any, body: dict,
                         steps: Callable[[Editor], None]) -> str:
    """Create body, run the steps (each checks what it edits) under berth-operator, check none of its requests
    was refused (RBAC); its log."""
    api.create(body)
    operator, token = start_operator(api, "berth-operator-0", tmp_path, [ns])
    try:
        steps(Editor(api, ns))
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{operator.log()[-3000:]}") from None
    finally:
        operator.stop()
    refused = refused_requests(api, token)
    assert refused == [], refused[:3]
    return operator.log()


def test_each_spec_service_field_writes_only_the_service(kube_apiserver, apiserver_namespace, tmp_path):
    api, ns = kube_apiserver, apiserver_namespace

    def steps(reg: Editor) -> None:
        port = lambda svc: svc["spec"]["ports"][0]  # noqa: E731
        reg.edit({"service": {"type": "NodePort"}}, SERVICES, lambda s: s["spec"]["type"] == "NodePort",
                 applied("services"))
        reg.edit({"service": {"nodePort": 30581}}, SERVICES, lambda s: port(s).get("nodePort") == 30581,
                 applied("services"))
        reg.edit({"service": {"annotations": {"lb.example.com/internal": "true"}}}, SERVICES,
                 lambda s: (s["metadata"].get("annotations") or {}).get("lb.example.com/internal") == "true",
                 applied("services"))
        reg.edit({"service": {"labels": {"team": "platform"}}}, SERVICES,
                 lambda s: s["metadata"]["labels"].get("team") == "platform", applied("services"))
        reg.edit({"service": {"externalTrafficPolicy": "Local"}}, SERVICES,
                 lambda s: s["spec"].get("externalTrafficPolicy") == "Local", applied("services"))
        # Each field taken away again, one at a time.
        reg.edit({"service": {"annotations": None}}, SERVICES,
                 lambda s: "lb.example.com/internal" not in (s["metadata"].get("annotations") or {}),
                 applied("services"))
        reg.edit({"service": {"labels": None}}, SERVICES, lambda s: "team" not in s["metadata"]["labels"],
                 applied("services"))
        reg.edit({"service": {"externalTrafficPolicy": None}}, SERVICES,
                 lambda s: s["spec"].get("externalTrafficPolicy") == "Cluster", applied("services"))  # the default
        lb = reg.edit({"service": {"type": "LoadBalancer", "loadBalancerClass": "example.com/a"}}, SERVICES,
                      lambda s: s["spec"].get("loadBalancerClass") == "example.com/a", applied("services"))
        assert port(lb)["nodePort"] == 30581
        # Another class on a LoadBalancer: Kubernetes refuses it in place, so the Service is deleted and created.
        again = reg.edit({"service": {"loadBalancerClass": "example.com/b"}}, SERVICES,
                         lambda s: s["spec"].get("loadBalancerClass") == "example.com/b",
                         ("delete", "services", NAME), applied("services"))
        assert again["metadata"]["uid"] != lb["metadata"]["uid"] and port(again)["nodePort"] == 30581
        reg.edit({"service": None}, SERVICES, lambda s: s["spec"]["type"] == "ClusterIP", applied("services"))

    assert f"Replaced Service {NAME}" in check_under_operator(api, ns, tmp_path, registry(ns), steps)


def test_a_field_removed_after_the_service_was_replaced_goes(kube_apiserver, apiserver_namespace, tmp_path):
    api, ns = kube_apiserver, apiserver_namespace
    shape = {"type": "LoadBalancer", "loadBalancerClass": "example.com/a",
             "annotations": {"lb.example.com/internal": "true"}}

    def steps(reg: Editor) -> None:
        again = reg.edit({"service": {"loadBalancerClass": "example.com/b"}}, SERVICES,
                         lambda s: s["spec"].get("loadBalancerClass") == "example.com/b",
                         ("delete", "services", NAME), applied("services"))
        [owner] = [entry for entry in again["metadata"]["managedFields"]
                   if "f:lb.example.com/internal" in entry["fieldsV1"].get("f:metadata", {}).get("f:annotations", {})]
        assert (owner["manager"], owner["operation"]) == (FIELD_MANAGER, "Apply"), owner  # what prunes it later
        reg.edit({"service": {"annotations": None}}, SERVICES,
                 lambda s: "lb.example.com/internal" not in (s["metadata"].get("annotations") or {}),
                 applied("services"))

    check_under_operator(api, ns, tmp_path, registry(ns, service=shape), steps)


def test_each_spec_ingress_field_writes_only_the_ingress(kube_apiserver, apiserver_namespace, tmp_path):
    api, ns = kube_apiserver, apiserver_namespace
    install_cert_manager_crds(api)

    def steps(reg: Editor) -> None:
        reg.edit({"ingress": {"hosts": ["a.example.com"]}}, INGRESSES, lambda i: True, applied("ingresses"))
        reg.edit({"ingress": {"className": "nginx"}}, INGRESSES,
                 lambda i: i["spec"].get("ingressClassName") == "nginx", applied("ingresses"))
        reg.edit({"ingress": {"hosts": ["a.example.com", "b.example.com"]}}, INGRESSES,
                 lambda i: [r["host"] for r in i["spec"]["rules"]] == ["a.example.com", "b.example.com"],
                 applied("ingresses"))
        reg.edit({"ingress": {"annotations": {"nginx.ingress.kubernetes.io/proxy-read-timeout": "1800"}}}, INGRESSES,
                 lambda i: i["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "1800",
                 applied("ingresses"))
        reg.edit({"ingress": {"tls": {"secretName": "edge-tls"}}}, INGRESSES,
                 lambda i: (i["spec"].get("tls") or [{}])[0].get("secretName") == "edge-tls", applied("ingresses"))
        # From the user's Secret to cert-manager's: the Ingress names the Certificate's Secret, made beside it.
        reg.edit({"ingress": {"tls": {"secretName": None, "issuerRef": ISSUER}}}, INGRESSES,
                 lambda i: i["spec"]["tls"][0]["secretName"] == f"{NAME}-ingress-tls",
                 applied("ingresses"), ("patch", "certificates", f"{NAME}-ingress-tls"))
        reg.edit({"ingress": {"tls": None}}, INGRESSES, lambda i: "tls" not in i["spec"],
                 applied("ingresses"), ("delete", "certificates", f"{NAME}-ingress-tls"))
        reg.edit({"ingress": {"annotations": None, "className": None}}, INGRESSES,
                 lambda i: "ingressClassName" not in i["spec"]
                 and i["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "600",
                 applied("ingresses"))

    check_under_operator(api, ns, tmp_path, registry(ns), steps)


def test_each_spec_gateway_field_writes_only_the_http_route(kube_apiserver, apiserver_namespace, tmp_path):
    api, ns = kube_apiserver, apiserver_namespace
    install_gateway_api_crds(api)

    def steps(reg: Editor) -> None:
        reg.edit({"gateway": {"parentRefs": [{"name": "public"}]}}, ROUTES, lambda r: True,
                 applied("httproutes"))
        reg.edit({"gateway": {"parentRefs": [{"name": "public", "sectionName": "https"},
                                             {"name": "internal", "namespace": "gateways"}]}}, ROUTES,
                 lambda r: [p["name"] for p in r["spec"]["parentRefs"]] == ["public", "internal"],
                 applied("httproutes"))
        reg.edit({"gateway": {"hostnames": ["registry.example.com"]}}, ROUTES,
                 lambda r: r["spec"].get("hostnames") == ["registry.example.com"], applied("httproutes"))
        reg.edit({"gateway": {"hostnames": None}}, ROUTES, lambda r: "hostnames" not in r["spec"],
                 applied("httproutes"))

    check_under_operator(api, ns, tmp_path, registry(ns), steps)
