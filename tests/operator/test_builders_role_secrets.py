"""The agent Role's Secret rule: get/list/watch on exactly the Secrets the registry pod mounts, by
name, matching the pod's volumes and the agent's --api-secret arguments; it follows the spec's Secret names,
and an edit that renames no Secret changes neither the Role nor the Deployment."""

from __future__ import annotations

import copy
import json

import pytest

from berth_api import Registry
from berth_operator.builders import ClusterFacts, deployment, role

AGENT_IMAGE = "ghcr.io/berth-dev/berth:0.1.0"


def make_registry(spec: dict) -> Registry:
    return Registry.model_validate({"metadata": {"name": "demo", "namespace": "registries", "uid": "u"},
                                    "spec": copy.deepcopy(spec)})


def make_facts(**overrides) -> ClusterFacts:
    return ClusterFacts(**{"agent_image": AGENT_IMAGE, **overrides})

FULL = {
    "config": {"storage": {
        "objectStorage": {"bucketClaim": "team-bucket", "bucketAccess": "team-bucket-rw"},
        "cache": {"blobdescriptor": "redis"},
        "auth": {"htpasswd": {"secret": {"name": "users", "field": "htpasswd"}}},
    }},
    "http": {"addr": ":5443", "tls": {"secretName": "serving-tls"}, "secret": {"name": "signing", "field": "key"}},
    "redis": {"secret": {"name": "redis-url", "field": "url"}},
}
FULL_FACTS = {"bucket_access_secret": "team-bucket-credentials"}  # the BucketAccess's credentialsSecretName


def secret_rules(role_obj: dict) -> list[dict]:
    return [rule for rule in role_obj["rules"] if "secrets" in rule["resources"]]


def mounted(dep: dict) -> dict[str, str]:
    """Volume name -> Secret name, from the Deployment's pod template."""
    return {v["name"]: v["secret"]["secretName"] for v in dep["spec"]["template"]["spec"]["volumes"] if "secret" in v}


def api_secret_args(dep: dict) -> dict[str, str]:
    args = dep["spec"]["template"]["spec"]["initContainers"][0]["args"]
    pairs = [args[i + 1] for i, arg in enumerate(args) if arg == "--api-secret"]
    return dict(pair.split("=", 1) for pair in pairs)


def build(spec: dict, facts: dict | ClusterFacts | None = None) -> tuple[dict, dict]:
    reg = make_registry(spec)
    cluster = facts if isinstance(facts, ClusterFacts) else make_facts(**(facts or {}))
    return role.build(reg, cluster), deployment.build(reg, cluster)


def test_rule_names_exactly_the_mounted_secrets(builder_case):
    reg, facts = builder_case
    agent_role, dep = role.build(reg, facts), deployment.build(reg, facts)
    rules = secret_rules(agent_role)
    assert len(rules) == 1
    assert rules[0]["apiGroups"] == [""] and rules[0]["verbs"] == ["get", "list", "watch"]
    assert rules[0]["resourceNames"] == sorted(set(mounted(dep).values()))
    assert rules[0]["resourceNames"]  # never empty: an empty resourceNames would grant every Secret
    # The agent watches the same Secrets, each for the volume it is mounted as.
    assert api_secret_args(dep) == mounted(dep)


def test_full_spec_names_every_source_and_the_cosi_secret_from_the_bucket_access():
    agent_role, dep = build(FULL, FULL_FACTS)
    assert secret_rules(agent_role)[0]["resourceNames"] == [
        "redis-url", "serving-tls", "signing", "team-bucket-credentials", "users"]
    assert api_secret_args(dep) == {"cosi": "team-bucket-credentials", "htpasswd": "users", "http-secret": "signing",
                                    "redis": "redis-url", "tls": "serving-tls"}


def test_cosi_secret_not_known_yet_is_not_granted():
    agent_role, _ = build(FULL, {})  # the BucketAccess has not named its Secret yet
    assert "team-bucket-credentials" not in secret_rules(agent_role)[0]["resourceNames"]


def _set(spec: dict, path: list[str], value) -> dict:
    spec = copy.deepcopy(spec)
    node = spec
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return spec


RENAMES = [
    ("htpasswd", _set(FULL, ["config", "storage", "auth", "htpasswd", "secret", "name"], "users-2"), FULL_FACTS),
    ("http secret", _set(FULL, ["http", "secret", "name"], "signing-2"), FULL_FACTS),
    ("tls", _set(FULL, ["http", "tls", "secretName"], "serving-tls-2"), FULL_FACTS),
    ("redis", _set(FULL, ["redis", "secret", "name"], "redis-url-2"), FULL_FACTS),
    ("cosi (the BucketAccess names another Secret)", FULL, {"bucket_access_secret": "rotated-credentials"}),
]


@pytest.mark.parametrize("rename", RENAMES, ids=[r[0] for r in RENAMES])
def test_rule_follows_a_renamed_secret(rename):
    _, spec, facts = rename
    before, _ = build(FULL, FULL_FACTS)
    after, dep = build(spec, facts)
    names_before, names_after = (set(secret_rules(r)[0]["resourceNames"]) for r in (before, after))
    assert names_after != names_before and len(names_after) == len(names_before)
    assert names_after == set(mounted(dep).values())  # the old name is gone: never more than the pod mounts


HOT_EDITS = [
    ("log level", _set(FULL, ["config", "log"], {"level": "debug"})),
    ("htpasswd key", _set(FULL, ["config", "storage", "auth", "htpasswd", "secret", "field"], "users.txt")),
    ("http secret key", _set(FULL, ["http", "secret", "field"], "other-key")),
    ("redis key and db", _set(_set(FULL, ["redis", "secret", "field"], "u"), ["redis", "db"], 3)),
    ("drain timeout", _set(FULL, ["http", "drainTimeout"], "45s")),
]


@pytest.mark.parametrize("edit", HOT_EDITS, ids=[e[0] for e in HOT_EDITS])
def test_an_edit_that_renames_no_secret_changes_neither_role_nor_deployment(edit):
    _, spec = edit
    role_before, dep_before = build(FULL, FULL_FACTS)
    role_after, dep_after = build(spec, FULL_FACTS)
    assert role_after == role_before
    assert json.dumps(dep_after, sort_keys=True) == json.dumps(dep_before, sort_keys=True)


def test_agent_image_alone_does_not_change_the_rule():
    before, _ = build(FULL, FULL_FACTS)
    after, _ = build(FULL, ClusterFacts("ghcr.io/berth-dev/berth:0.2.0", **FULL_FACTS))
    assert secret_rules(after) == secret_rules(before)
