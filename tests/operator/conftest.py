"""Fixtures shared by the operator tests (builders and controller)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from berth_api import Registry
from berth_operator.builders import ClusterFacts
from support.clusters.kube import KubeApi
from support.clusters.operator_harness import OperatorHarness

AGENT_IMAGE = "ghcr.io/berth-dev/berth:0.1.0"

# One Registry spec per storage mode and option the builders branch on. Each: (id, spec, facts overrides).
BUILDER_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("inmemory-minimal", {"config": {"storage": {"inmemory": {}}}}, {}),
    (
        "filesystem-class-r1-given-http-secret",
        {
            "config": {"storage": {"filesystem": {"storageClass": "standard", "size": "20Gi"}}},
            "http": {"secret": {"name": "upload-signing", "field": "key"}},
        },
        {},
    ),
    (
        "filesystem-class-r3-capped",
        {"replicas": 3, "config": {"storage": {"filesystem": {"storageClass": "standard"}}}},
        {},
    ),
    (
        "filesystem-pvc-rwo-tls-htpasswd",
        {
            "config": {
                "storage": {
                    "filesystem": {"persistentVolumeClaim": "registry-data"},
                    "auth": {"htpasswd": {"secret": {"name": "registry-users", "field": "htpasswd"}}},
                }
            },
            "http": {"addr": ":5443", "tls": {"secretName": "registry-tls"}},
        },
        {"pvc_access_modes": ("ReadWriteOnce",)},
    ),
    (
        "filesystem-pvc-rwx-r3",
        {
            "replicas": 3,
            "resources": {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            "config": {"storage": {"filesystem": {"persistentVolumeClaim": "shared-data"}}},
        },
        {"pvc_access_modes": ("ReadWriteMany",)},
    ),
    (
        "cosi-classes-r3-redis-tls-htpasswd",
        {
            "replicas": 3,
            "image": "docker.io/library/registry:2.8.3",
            "config": {
                "storage": {
                    "objectStorage": {"bucketClass": "s3-standard", "bucketAccessClass": "s3-rw"},
                    "cache": {"blobdescriptor": "redis"},
                    "auth": {"htpasswd": {"secret": {"name": "registry-users", "field": "htpasswd"}}},
                }
            },
            "http": {"addr": "0.0.0.0:443", "tls": {"secretName": "registry-tls"}},
            "redis": {"secret": {"name": "redis-url", "field": "url"}},
        },
        {},
    ),
    (
        "cosi-existing-claim-and-access-r1",
        {
            "config": {
                "storage": {"objectStorage": {"bucketClaim": "team-bucket", "bucketAccess": "team-bucket-rw"}}
            },
        },
        {"bucket_access_secret": "team-bucket-credentials"},
    ),
    (
        # a NetworkPolicy with every kind of peer, and the metrics ports for a monitoring namespace
        "inmemory-network-policy",
        {
            "config": {"storage": {"inmemory": {}}},
            "networkPolicy": {
                "from": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}},
                     "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["nginx"]}]}},
                    {"podSelector": {}},
                    {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                    {"ipBlock": {"cidr": "fd00::/64"}},
                ],
                "metricsFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
            },
        },
        {},
    ),
    (
        "cosi-existing-claim-class-access-r3",
        {
            "replicas": 3,
            "config": {"storage": {"objectStorage": {"bucketClaim": "team-bucket", "bucketAccessClass": "s3-rw"}}},
        },
        {},
    ),
]


def make_registry(
    spec: dict[str, Any], *, name: str = "demo", namespace: str = "registries", uid: str = "5f0c7d2e-uid"
) -> Registry:
    """A validated Registry as the operator sees it (metadata with name, namespace and uid)."""
    return Registry.model_validate(
        {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": copy.deepcopy(spec)}
    )


def make_facts(**overrides: Any) -> ClusterFacts:
    return ClusterFacts(**{"agent_image": AGENT_IMAGE, **overrides})


@pytest.fixture
def registry_factory() -> Callable[..., Registry]:
    return make_registry


@pytest.fixture
def facts_factory() -> Callable[..., ClusterFacts]:
    return make_facts


@pytest.fixture(params=BUILDER_CASES, ids=[case[0] for case in BUILDER_CASES])
def builder_case(request: pytest.FixtureRequest) -> tuple[Registry, ClusterFacts]:
    """Each storage mode and option the builders branch on, as (Registry, ClusterFacts)."""
    _, spec, facts = request.param
    return make_registry(spec), make_facts(**facts)


# ----------------------------------------------------------------------------------------------------------
# Controller tests: the operator in process (support.clusters.operator_harness) against the test API server.



@pytest.fixture
def operator_harness(kube_api: KubeApi) -> Iterator[Callable[..., OperatorHarness]]:
    """Start an operator with `operator_harness(namespaces, refresh_interval=...)`; stopped at teardown."""
    started: list[OperatorHarness] = []

    def start(namespaces: list[str] | None = None, **options: Any) -> OperatorHarness:
        harness = OperatorHarness(kube_api, namespaces, **options).start()
        started.append(harness)
        return harness

    yield start
    for harness in started:
        harness.stop()
