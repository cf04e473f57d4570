"""The one table of the kinds the operator manages (issue 27, issue 40: berth_operator.builders.kinds, re-exported
by core.kinds): the client, the caches, the apply layer and the builders all read it, so a new kind is one entry,
its builder module and its ClusterRole line (tests/deploy/test_cluster_role.py)."""

from __future__ import annotations

import ast
import pathlib

from berth_operator import builders
from berth_operator.cluster import caches
from berth_operator.core import kinds
from berth_operator.engine import apply, status
from berth_operator.kube.client import path

BUILDERS = pathlib.Path(builders.__file__).parent


def test_every_builder_module_is_named_by_the_table():
    """A module under builders/ with a top-level build function makes objects of a kind: the table must say which
    (else build_all never calls it)."""
    named = {build.__module__.rpartition(".")[2] for kind in kinds.TABLE for build in kind.builders}
    with_build = {p.stem for p in BUILDERS.glob("*.py")
                  if any(isinstance(node, ast.FunctionDef) and node.name == "build"
                         for node in ast.parse(p.read_text()).body)}
    assert with_build == named


def _name(build) -> str:
    return f"{build.__module__.rpartition('.')[2]}.{build.__name__}"


def test_build_order_is_the_tables():
    """build_all calls the builders the table holds (function objects), kind by kind in table order."""
    order = [_name(build) for kind in kinds.OWNED_KINDS for build in kind.builders]
    assert order[:3] == ["service_account.build", "role.build", "role_binding.build"]
    assert len(order) == len(set(order))
    assert all(callable(build) for kind in kinds.TABLE for build in kind.builders)
    assert all(callable(kind.prune) for kind in kinds.PRUNABLE_KINDS)


def test_each_kinds_verbs_cover_what_berth_does_with_it():
    """What the ClusterRole grants on a kind (its verbs, tests/deploy/test_cluster_role.py) is what the layers
    that read its entry need: the caches list and watch, the apply layer creates (and patches what it applies),
    the prune deletes."""
    for kind in kinds.TABLE:
        verbs = set(kind.verbs)
        assert not kind.cached or {"list", "watch"} <= verbs, kind.kind
        assert not kind.owned or "create" in verbs, kind.kind
        assert kind.applied != kinds.APPLY or {"get", "patch"} <= verbs, kind.kind
        assert kind.prune is None or "delete" in verbs, kind.kind
        assert not (kind.named or kind.spec_class) or "get" in verbs, kind.kind


def test_every_optional_kind_says_which_fields_need_it_and_its_reason_is_a_condition_reason():
    for key in kinds.OPTIONAL_KINDS:
        assert kinds.KINDS[key].needed_by is not None, key
        assert kinds.KINDS[key].optional.reason in status.DEGRADED_REASONS, key
        assert kinds.KINDS[key].optional.reason in status.MISSING_REASONS, key


def test_each_layer_reads_the_table():
    assert caches.CACHED_KINDS == kinds.CACHED_KINDS
    assert apply.CREATE_ONLY_KINDS == {"PersistentVolumeClaim", "BucketClaim", "BucketAccess", "Secret", "Lease"}
    assert {(av, kind) for av, kind, _ in apply.PRUNABLE} == {(k.api_version, k.kind) for k in kinds.PRUNABLE_KINDS}
    assert path("apps/v1", "Deployment", "ns", "d") == "/apis/apps/v1/namespaces/ns/deployments/d"
    assert path(kinds.COSI, "BucketClass", None, "c") == "/apis/objectstorage.k8s.io/v1alpha1/bucketclasses/c"
    assert path("v1", "Pod", None, all_namespaces=True) == "/api/v1/pods"


def test_every_owned_kind_is_written_and_every_optional_one_is_a_crd():
    for kind in kinds.OWNED_KINDS:
        assert kind.applied in (kinds.APPLY, kinds.CREATE), kind
    for key in kinds.OPTIONAL_KINDS:
        assert "/" in key[0], key  # a group: served by a CRD, which discovery follows
