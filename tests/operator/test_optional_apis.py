"""Optional APIs (docs/decisions/0025-optional-apis.md): one rule, read from the table of kinds.

What a bare cluster does end to end is tests/apiserver/test_bare_cluster.py; here the rule's pieces: the table
names each optional kind's API, the ClusterRole lets discovery read exactly those CRDs, the findings name kind,
apiVersion and what to install, and a CRD counts as serving only once Established and serving the version.
"""

from __future__ import annotations

import pathlib

import yaml

from berth_api import Registry
from berth_api.reasons import DEGRADED
from berth_operator.cluster.discovery import Discovery, describe, serving
from berth_operator.core.kinds import CERT_MANAGER, COSI, GATEWAY, KINDS, MONITORING, OPTIONAL_KINDS, crd_name
from berth_operator.engine.facts import missing_apis, needed_kinds
from berth_operator.engine.status import DEGRADED_REASONS

REPO = pathlib.Path(__file__).resolve().parents[2]


class Served:
    """A stand-in for the client's serves() (the one method missing_apis asks)."""

    def __init__(self, *served: tuple[str, str]):
        self.served = set(served)

    def serves(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) not in OPTIONAL_KINDS or (api_version, kind) in self.served


def registry(spec: dict) -> Registry:
    return Registry.model_validate({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                                    "metadata": {"name": "r", "namespace": "ns", "uid": "u"}, "spec": spec})


def test_each_optional_api_has_a_documented_reason_and_what_to_install():
    """The kinds themselves are pinned in deploy/clusterrole.yaml, which users read (the test below): a new one is
    its entry in the table, its builder and that line. Their APIs and reasons are pinned here and in berth_api."""
    apis = {KINDS[key].optional for key in OPTIONAL_KINDS}
    assert {api.reason for api in apis} == {"MissingCOSI", "MissingMonitoringCRD", "MissingGatewayAPI",
                                            "MissingCertManager"}
    degraded = {reason.name for reason in DEGRADED}  # berth_api.reasons: the documented Degraded reasons
    for api in apis:
        assert api.reason in degraded and api.reason in DEGRADED_REASONS, api
        assert api.install.startswith("install "), api
    assert {COSI, MONITORING, GATEWAY, CERT_MANAGER} == {api_version for api_version, _ in OPTIONAL_KINDS}
    assert crd_name(COSI, "BucketAccess") == "bucketaccesses.objectstorage.k8s.io"


def test_the_cluster_role_reads_exactly_the_optional_kinds_crds():
    rules = yaml.safe_load((REPO / "deploy" / "clusterrole.yaml").read_text())["rules"]
    named = [rule for rule in rules if rule["resources"] == ["customresourcedefinitions"] and "resourceNames" in rule]
    assert len(named) == 1 and named[0]["verbs"] == ["get"]
    assert sorted(named[0]["resourceNames"]) == sorted(crd_name(*key) for key in OPTIONAL_KINDS)
    assert {(COSI, "BucketClaim"), (COSI, "BucketAccess"), (COSI, "BucketClass"), (COSI, "BucketAccessClass"),
            (MONITORING, "ServiceMonitor"), (GATEWAY, "HTTPRoute"), (CERT_MANAGER, "Certificate")} <= \
        set(OPTIONAL_KINDS), "a kind Berth needs is no longer optional"


def test_a_registry_needing_no_optional_api_has_no_finding():
    reg = registry({"config": {"storage": {"inmemory": {}}}})
    assert needed_kinds(reg) == []
    assert missing_apis(Served(), reg) == []  # type: ignore[arg-type]


def test_findings_name_the_kinds_their_api_version_and_what_to_install():
    reg = registry({"config": {"storage": {"objectStorage": {"bucketClass": "b", "bucketAccess": "a"}}},
                    "monitoring": {"serviceMonitor": {}}})
    [cosi, monitoring] = missing_apis(Served(), reg)  # type: ignore[arg-type]
    assert cosi.reason == "MissingCOSI"
    assert cosi.message.startswith("BucketClaim, BucketAccess, BucketClass (objectstorage.k8s.io/v1alpha1) are not "
                                   "served by this cluster: install the COSI CRDs and controller")
    assert "spec.config.storage.objectStorage.bucketClass" in cosi.message
    assert monitoring.reason == "MissingMonitoringCRD"
    assert monitoring.message.startswith("ServiceMonitor (monitoring.coreos.com/v1) is not served by this cluster: "
                                         "install prometheus-operator or its CRDs")
    assert "servicemonitors.monitoring.coreos.com" in monitoring.message
    assert "spec.monitoring.serviceMonitor" in monitoring.message
    # Served: no finding; half served: only what is missing is named.
    everything = Served(*OPTIONAL_KINDS)
    assert missing_apis(everything, reg) == []  # type: ignore[arg-type]
    [partial] = missing_apis(Served((COSI, "BucketClaim"), (COSI, "BucketClass"),  # type: ignore[arg-type]
                                    (MONITORING, "ServiceMonitor")), reg)
    assert partial.message.startswith("BucketAccess (objectstorage.k8s.io/v1alpha1) is not served")


def crd(version: str = "v1alpha1", *, served: bool = True, established: str | None = "True") -> dict:
    conditions = [] if established is None else [{"type": "Established", "status": established}]
    return {"spec": {"versions": [{"name": version, "served": served}]}, "status": {"conditions": conditions}}


def test_a_crd_serves_once_established_and_serving_the_version():
    assert serving(crd(), "v1alpha1")
    assert not serving(crd(established=None), "v1alpha1")  # just created
    assert not serving(crd(established="False"), "v1alpha1")
    assert not serving(crd(served=False), "v1alpha1")
    assert not serving(crd("v1alpha2"), "v1alpha1")  # COSI's next API is another version
    assert not serving(None, "v1alpha1")


def test_discovery_knows_nothing_optional_before_its_answer_and_everything_else_always():
    discovery = Discovery(None)  # type: ignore[arg-type]  (not started: no request)
    assert not discovery.serves(COSI, "BucketClaim")
    assert discovery.serves("apps/v1", "Deployment")
    assert describe([(COSI, "BucketClaim"), (MONITORING, "ServiceMonitor")]) == \
        "BucketClaim (objectstorage.k8s.io/v1alpha1); ServiceMonitor (monitoring.coreos.com/v1)"
