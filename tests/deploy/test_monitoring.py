"""deploy/monitoring: the PrometheusRule's rules pass `promtool check rules` and `promtool test rules`
(each alert firing on one series fixture and silent on another, tests/deploy/monitoring/alerts_test.yaml); both
components build with kustomize; and every metric the alerts and the Grafana dashboard query is one a real run
exposes: a real agent, berth-supervise and registry (2.8 and 3.1.1) scraped on both stable endpoints, and the
operator's metrics module after a reconcile's conditions."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import RegistryPod, filesystem_spec, on_distribution, registry_object
from support.registries.registry import http_get, registry_binaries
from support.services.prometheus import promtool

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
FIXTURES = Path(__file__).parent / "monitoring"
METRIC = re.compile(r"\b((?:berth_agent|berth_operator|registry)_[a-z0-9_]+)\b")
# Families only Distribution 3 exports (2.8 keeps its proxy counters in expvar): the pull-through panels.
V3_ONLY = re.compile(r"^registry_proxy_")


def rule_spec() -> dict:
    return yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]


def alert_exprs() -> list[str]:
    return [rule["expr"] for group in rule_spec()["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs += [var["query"] for var in dashboard["templating"]["list"] if var["type"] == "query"]
    return exprs


def queried_metrics() -> set[str]:
    return {name for expr in alert_exprs() + dashboard_exprs() for name in METRIC.findall(expr)}


@pytest.fixture
def rules_dir(tmp_path) -> Path:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_spec()))
    shutil.copy(FIXTURES / "alerts_test.yaml", tmp_path)
    return tmp_path


def test_promtool_checks_the_rules(rules_dir):
    result = promtool("check", "rules", str(rules_dir / "rules.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_promtool_tests_each_alert_firing_and_not(rules_dir):
    result = promtool("test", "rules", "alerts_test.yaml", cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    tests = yaml.safe_load((FIXTURES / "alerts_test.yaml").read_text())["tests"]
    alerts = {rule["alert"] for group in rule_spec()["groups"] for rule in group["rules"]}
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert fired == alerts  # every alert is seen firing; the exact exp_alerts lists prove the others silent


def test_a_broken_fixture_fails(rules_dir):
    """The rule tests can fail: the same fixtures against a rule whose threshold moved."""
    spec = rule_spec()
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule["expr"] = rule["expr"].replace("> 0.85", "> 0.95")
    (rules_dir / "rules.yaml").write_text(yaml.safe_dump(spec))
    result = promtool("test", "rules", "alerts_test.yaml", cwd=rules_dir)
    assert result.returncode != 0 and "BerthRegistryStorageAlmostFull" in result.stdout + result.stderr


@pytest.mark.parametrize("component", ["monitoring", "operator-monitoring"])
def test_the_components_build(component):
    built = subprocess.run(["kubectl", "kustomize", str(REPO / "deploy" / component)], capture_output=True,
                           text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(built.stdout))
    assert kinds == (["ConfigMap", "PrometheusRule"] if component == "monitoring" else ["Service", "ServiceMonitor"])


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def _exposed(text: str) -> set[str]:
    """Every sample name a scrape can carry, from its TYPE lines (a labelled counter not yet counted has no
    sample but is declared) and its samples."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "counter" and not name.endswith("_total"):
                names.add(name + "_total")
            if kind == "histogram":
                names |= {name + "_bucket", name + "_sum", name + "_count"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def operator_names() -> set[str]:
    """The operator's exposition once it has reported a Registry's conditions (its metrics module, as served)."""
    code = ("from berth_operator.core import metrics; from prometheus_client import generate_latest; "
            "metrics.record_conditions(('ns', 'r'), [{'type': 'Ready', 'status': 'True'}]); "
            "print(generate_latest().decode())")
    result = subprocess.run(["python", "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return _exposed(result.stdout)


@pytest.mark.e2e
@pytest.mark.parametrize("dist", registry_binaries(), ids=lambda d: f"v{d[0]}")
def test_every_metric_the_alerts_and_dashboard_query_is_exposed_by_a_real_run(tmp_path, dist):
    major, binary = dist
    pod = RegistryPod(tmp_path / "pod", binary=binary)
    metrics_port = free_port()
    try:
        spec = on_distribution(filesystem_spec(pod.port), major)
        pod.write_registry_file(registry_object(spec))
        pod.start_agent(extra=["--registry-metrics-addr", f"127.0.0.1:{metrics_port}"])
        pod.start_supervisor(env={"BERTH_DEBUG_PORTS": f"{free_port()} {free_port()}"})
        pod.wait_serving()
        http_get(f"{pod.url}/v2/", timeout=10)
        http_get(f"{pod.url}/v2/demo/blobs/sha256:{'0' * 64}", timeout=10)  # a storage action and a 404
        wait_for(lambda: pod.metric("pvc_ok") == 1, what="the data path probe")
        registry_text = wait_for(lambda: (t := _scrape(metrics_port)) and "registry_http_requests_total" in t and t,
                                 what="the registry's metrics through the agent")
        exposed = _exposed(pod.metrics_text()) | _exposed(registry_text) | operator_names()
    finally:
        pod.stop()
    wanted = queried_metrics()
    assert len(wanted) >= 15, wanted
    missing = sorted(name for name in wanted - exposed if major == "3" or not V3_ONLY.match(name))
    assert missing == [], f"queried but not exposed on Distribution {major}: {missing}"
