"""The ClusterRole (deploy/clusterrole.yaml) holds every rule of the agent Role the operator builds, for every
example (RBAC escalation prevention: a Role can only grant what its creator holds), and that Role reaches
Secrets only by name. Offline, from the builders and the file.

Whether the ClusterRole suffices for every request berth-operator makes, and grants nothing unused, is
tests/apiserver/test_rbac_operator.py, on the real API server (it was checked here against kmock's request
log before; the real server's RBAC and audit log replace that comparison).
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

from berth_api import Registry
from berth_operator.builders import ClusterFacts, deployment, role
from support.clusters.apiserver_identities import cluster_role_grants, grants
from support.clusters.operator_harness import AGENT_IMAGE

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "examples").glob("*.yaml")))
def test_the_operator_holds_everything_it_grants_agents(name: str) -> None:
    reg = Registry.model_validate(yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text())
                                  | {"metadata": {"name": "r", "namespace": "ns", "uid": "u"}})
    facts = ClusterFacts(agent_image=AGENT_IMAGE, bucket_access_secret="access-credentials")
    agent_role = role.build(reg, facts)
    needed = grants(agent_role["rules"])
    assert needed - cluster_role_grants() == set()
    # Secrets only by name, and only those the pod mounts: never a rule over every Secret.
    secret_rules = [rule for rule in agent_role["rules"] if "secrets" in rule["resources"]]
    assert len(secret_rules) == 1 and secret_rules[0]["resourceNames"]
    volumes = deployment.build(reg, facts)["spec"]["template"]["spec"]["volumes"]
    assert secret_rules[0]["resourceNames"] == sorted({v["secret"]["secretName"] for v in volumes if "secret" in v})
