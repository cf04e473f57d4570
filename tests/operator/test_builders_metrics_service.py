"""The metrics Service: headless, not-ready addresses published, the agent's and the registry's metrics
ports by the names the pod template gives them."""

from __future__ import annotations

from berth_operator.builders import build_all, metrics_service
from berth_operator.builders.meta import selector_labels


def test_the_metrics_service_selects_the_pods_and_names_their_metrics_ports(registry_factory, facts_factory):
    reg = registry_factory({"config": {"storage": {"inmemory": {}}}})
    objects = build_all(reg, facts_factory(), http_secret_value=None)
    svc = metrics_service.build(reg, facts_factory())
    assert svc in objects
    assert svc["metadata"]["name"] == "demo-metrics"
    assert svc["metadata"]["labels"]["app.kubernetes.io/component"] == "metrics"
    spec = svc["spec"]
    assert spec["clusterIP"] == "None" and spec["publishNotReadyAddresses"] is True
    assert spec["selector"] == selector_labels(reg)
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    agent = deployment["spec"]["template"]["spec"]["initContainers"][0]
    container_ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert {p["name"]: p["targetPort"] for p in spec["ports"]} == {
        "agent-health": "agent-health", "reg-metrics": "reg-metrics"}
    assert {p["targetPort"]: p["port"] for p in spec["ports"]} == container_ports
    # The registry's own Service is unchanged: clients see the registry's port only.
    [service] = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "demo"]
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]


def test_debug_ports_never_take_the_registry_s_port(registry_factory):
    from berth_operator.builders.pod import debug_ports

    assert debug_ports(registry_factory({"config": {"storage": {"inmemory": {}}}})) == [5301, 5302]
    for port in (5301, 5302):
        reg = registry_factory({"http": {"addr": f":{port}"}, "config": {"storage": {"inmemory": {}}}})
        assert port not in debug_ports(reg) and len(debug_ports(reg)) == 2
