"""deploy/clusterrole.yaml is what the table of kinds says: the file stays plain YAML that users read and
review, and this test derives its rules from the data table of kinds, core/kinds.py (each kind's verbs, the get of
each optional kind's CRD by name, the grants beside the kinds) and fails on any difference, naming the rule missing
or extra."""

from __future__ import annotations

import pathlib

import yaml

from berth_operator.core import kinds

REPO = pathlib.Path(__file__).resolve().parents[2]
CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")

# (apiGroup, resource, resourceName or "") -> verbs
Rules = dict[tuple[str, str, str], frozenset[str]]


def declared(rules: list[dict]) -> Rules:
    """Each (group, resource, name) the file's rules name, with the union of the verbs granted on it."""
    found: dict[tuple[str, str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for name in rule.get("resourceNames") or [""]:
                    found.setdefault((group, resource, name), set()).update(rule["verbs"])
    return {key: frozenset(verbs) for key, verbs in found.items()}


def derived(table: tuple[kinds.Kind, ...] = kinds.TABLE,
            other: tuple[kinds.Grant, ...] = kinds.OTHER_GRANTS) -> Rules:
    """The rules the table of kinds implies."""
    found: dict[tuple[str, str, str], set[str]] = {}
    for kind in table:
        if kind.verbs:
            found.setdefault((kind.group, kind.plural, ""), set()).update(kind.verbs)
        if kind.optional is not None:  # discovery reads the CRD serving it, by name (cluster/discovery.py)
            found.setdefault((*CRDS, kind.crd_name), set()).add("get")
    for grant in other:
        found.setdefault((grant.group, grant.resource, ""), set()).update(grant.verbs)
    return {key: frozenset(verbs) for key, verbs in found.items()}


def _rule(key: tuple[str, str, str], verbs: frozenset[str]) -> str:
    group, resource, name = key
    named = f" resourceNames: [{name}]" if name else ""
    return f"apiGroups: [{group!r}] resources: [{resource}]{named} verbs: [{', '.join(sorted(verbs))}]"


def differences(file: Rules, table: Rules) -> list[str]:
    found = []
    for key in sorted(file.keys() | table.keys()):
        has, wants = file.get(key, frozenset()), table.get(key, frozenset())
        if wants - has:
            found.append(f"missing from deploy/clusterrole.yaml (the table of kinds derives it): "
                         f"{_rule(key, wants - has)}")
        if has - wants:
            found.append(f"extra in deploy/clusterrole.yaml (no entry of the table of kinds derives it): "
                         f"{_rule(key, has - wants)}")
    return found


def cluster_role_rules() -> list[dict]:
    return yaml.safe_load((REPO / "deploy" / "clusterrole.yaml").read_text())["rules"]


def test_the_cluster_role_is_what_the_table_of_kinds_derives():
    found = differences(declared(cluster_role_rules()), derived())
    assert not found, "\n".join(found)


def test_a_kind_dropped_from_the_table_or_a_verb_added_to_it_is_named():
    """The comparison is not blind: a table without the PodDisruptionBudget, or with one verb more on it, differs
    from the file by exactly that rule."""
    file = declared(cluster_role_rules())
    without = tuple(kind for kind in kinds.TABLE if kind.kind != "PodDisruptionBudget")
    assert differences(file, derived(without)) == [
        "extra in deploy/clusterrole.yaml (no entry of the table of kinds derives it): apiGroups: ['policy'] "
        "resources: [poddisruptionbudgets] verbs: [create, delete, get, list, patch, watch]"]
    wider = tuple(kinds.Kind(k.api_version, k.kind, k.plural, verbs=(*k.verbs, "update"))
                  if k.kind == "PodDisruptionBudget" else k for k in kinds.TABLE)
    assert differences(file, derived(wider)) == [
        "missing from deploy/clusterrole.yaml (the table of kinds derives it): apiGroups: ['policy'] "
        "resources: [poddisruptionbudgets] verbs: [update]"]
