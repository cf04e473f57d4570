"""The table of the kinds the operator manages, in two halves: the data (berth_operator.core.kinds: URL path, how
each kind is written, optional API, verbs), which the client, the caches, discovery and the reactor read, and the
behaviour (each builder module's BEHAVIOURS: builders, prune, checks, must_replace, gathered by
berth_operator.builders.kinds), which the builders and the engine read. A new kind is one data row, its builder
module and its ClusterRole rule (tests/deploy/test_cluster_role.py)."""

from __future__ import annotations

import ast
import pathlib
import types

import pytest

from berth_operator import builders
from berth_operator.builders import bucket_access
from berth_operator.builders import kinds as behaviours
from berth_operator.builders.behaviour import Behaviour
from berth_operator.builders.kinds import BEHAVIOURS, GROWN, MISSING_CHECKED, PRUNABLE_KINDS, WAITING_CHECKED
from berth_operator.cluster import caches
from berth_operator.core import kinds
from berth_operator.engine import apply, facts, status
from berth_operator.kube.client import path

from .conftest import make_registry

BUILDERS = pathlib.Path(builders.__file__).parent
ENGINE = pathlib.Path(facts.__file__).parent
# The kinds an engine module may name: reads of the Registry's own workload (the Deployment and its Pods, the
# Service whose address the status reports), of what a spec references (Secrets, ConfigMaps: many fields, one
# check), and the generated HTTP secret. The claim Berth grows is its entry's (checks.grow): expansion.py names none.
ENGINE_READS = {"apply.py": {"Secret"},
                "facts.py": {"ConfigMap", "Deployment", "Pod", "Secret"},
                "reconcile.py": {"Deployment", "Pod", "Service"}}


def test_every_builder_module_is_named_by_the_table():
    """A module under builders/ with a top-level build function makes objects of a kind: a behaviour must say
    which (else build_all never calls it)."""
    named = {build.__module__.rpartition(".")[2] for kind in BEHAVIOURS.values() for build in kind.builders}
    with_build = {p.stem for p in BUILDERS.glob("*.py")
                  if any(isinstance(node, ast.FunctionDef) and node.name == "build"
                         for node in ast.parse(p.read_text()).body)}
    assert with_build == named


def _name(build) -> str:
    return f"{build.__module__.rpartition('.')[2]}.{build.__name__}"


def test_build_order_is_the_tables():
    """build_all calls the builders the behaviours hold (function objects), kind by kind in the data table's order."""
    order = [_name(build) for kind in behaviours.BUILT_KINDS for build in kind.builders]
    assert order[:3] == ["service_account.build", "role.build", "role_binding.build"]
    assert len(order) == len(set(order))
    assert [kind.key for kind in behaviours.BUILT_KINDS] == [kind.key for kind in kinds.OWNED_KINDS]
    assert all(callable(build) for kind in BEHAVIOURS.values() for build in kind.builders)
    assert all(callable(kind.prune) for kind in PRUNABLE_KINDS)


def test_each_kinds_verbs_cover_what_berth_does_with_it():
    """What the ClusterRole grants on a kind (its verbs, tests/deploy/test_cluster_role.py) is what the layers
    that read its entry need: the caches list and watch, the apply layer creates (and patches what it applies),
    the prune deletes."""
    for kind in kinds.TABLE:
        verbs = set(kind.verbs)
        behaviour = BEHAVIOURS.get(kind.key, Behaviour(*kind.key))
        assert not kind.cached or {"list", "watch"} <= verbs, kind.kind
        assert not kind.owned or "create" in verbs, kind.kind
        assert kind.applied != kinds.APPLY or {"get", "patch"} <= verbs, kind.kind
        assert behaviour.prune is None or "delete" in verbs, kind.kind
        assert not (kind.named or kind.spec_class) or "get" in verbs, kind.kind


def test_every_optional_kind_says_which_fields_need_it_and_its_reason_is_a_condition_reason():
    for key in kinds.OPTIONAL_KINDS:
        assert BEHAVIOURS[key].needed_by is not None, key
        assert kinds.KINDS[key].optional.reason in status.DEGRADED_REASONS, key
        assert kinds.KINDS[key].optional.reason in status.MISSING_REASONS, key


def test_each_layer_reads_the_table():
    assert caches.CACHED_KINDS == kinds.CACHED_KINDS
    assert apply.CREATE_ONLY_KINDS == {"PersistentVolumeClaim", "BucketClaim", "BucketAccess", "Secret", "Lease"}
    assert {(av, kind) for av, kind, _ in apply.PRUNABLE} == {(k.api_version, k.kind) for k in PRUNABLE_KINDS}
    assert path("apps/v1", "Deployment", "ns", "d") == "/apis/apps/v1/namespaces/ns/deployments/d"
    assert path(kinds.COSI, "BucketClass", None, "c") == "/apis/objectstorage.k8s.io/v1alpha1/bucketclasses/c"
    assert path("v1", "Pod", None, all_namespaces=True) == "/api/v1/pods"


def test_every_owned_kind_is_written_and_every_optional_one_is_a_crd():
    for kind in kinds.OWNED_KINDS:
        assert kind.applied in (kinds.APPLY, kinds.CREATE), kind
    for key in kinds.OPTIONAL_KINDS:
        assert "/" in key[0], key  # a group: served by a CRD, which discovery follows


def test_every_kind_with_a_waiting_check_is_in_the_reported_order_and_wakes_its_registry():
    """WAITING_CHECKED (the order of the Progressing message: the data table's) holds each such kind once; a wait
    ends by a change of the object, so the kind is cached (Berth's label) or watched by name (named). A missing
    check looks up what a spec names: named, so that the object's arrival wakes the Registry."""
    with_waiting = [kind for kind in BEHAVIOURS.values() if kind.checks is not None and kind.checks.waiting is not None]
    assert list(WAITING_CHECKED) == with_waiting
    assert [kind.kind for kind in WAITING_CHECKED] == ["PersistentVolumeClaim", "Certificate", "BucketClaim",
                                                      "BucketAccess"]
    assert len(set(WAITING_CHECKED)) == len(WAITING_CHECKED)
    assert all(kind.data.cached or kind.data.named for kind in WAITING_CHECKED)
    assert [kind.kind for kind in MISSING_CHECKED] == ["PersistentVolumeClaim", "BucketClaim", "BucketAccess"]
    assert all(kind.data.named for kind in MISSING_CHECKED)


def test_the_kinds_that_grow_are_create_only_and_patched():
    """A grow hook is the one patch of a create-only kind (expansion.py writes it): the ClusterRole grants the patch,
    and the caches or a watch by name wake the Registry as the object grows."""
    assert [kind.kind for kind in GROWN] == ["PersistentVolumeClaim"]
    for kind in GROWN:
        assert kind.data.applied == kinds.CREATE and "patch" in kind.data.verbs, kind.kind
        assert kind.data.cached or kind.data.named, kind.kind


def test_the_engine_names_only_the_kinds_it_reads_itself():
    """The managed kinds' checks are their behaviours': no engine module names another kind."""
    table = {kind.kind for kind in kinds.TABLE}
    for module in sorted(ENGINE.glob("*.py")):
        named = {node.value for node in ast.walk(ast.parse(module.read_text()))
                 if isinstance(node, ast.Constant) and node.value in table}
        assert named <= ENGINE_READS.get(module.name, set()), module.name


class _Cluster:
    """Serves every kind; holds the given objects by (kind, name)."""

    def __init__(self, objects):
        self.objects = objects

    def serves(self, api_version, kind):
        return True

    def get(self, api_version, kind, namespace, name, **_):
        return self.objects.get((kind, name))


_ISSUER = {"name": "ca", "kind": "ClusterIssuer"}


def test_the_checks_report_in_the_order_they_always_have():
    """Missing: the bucket (claim, class) before the access; waiting: the certificate before the bucket and its
    access, whatever the table's order (the conditions join the messages in this order)."""
    reg = make_registry({"http": {"tls": {"issuerRef": _ISSUER}},
                         "config": {"storage": {"objectStorage": {"bucketClass": "gone", "bucketAccess": "gone"}}}})
    lookup = facts.look_up(_Cluster({}), reg, "image")
    assert [f.reason for f in lookup.findings] == ["MissingBucketClass", "MissingBucketAccess"]
    access = {"spec": {"credentialsSecretName": "cosi"}, "status": {"accessGranted": True}}
    cluster = _Cluster({("BucketClaim", "demo-bucket"): {"status": {}}, ("BucketAccess", "gone"): access})
    assert [(f.reason, f.message) for f in facts.waiting(cluster, reg, frozenset())] == [
        ("WaitingForCertificate", "Certificate demo-tls (spec.http.tls.issuerRef): cert-manager has not written "
                                  "Secret demo-tls yet"),
        ("WaitingForBucket", "BucketClaim demo-bucket is not ready yet"),
        ("WaitingForBucketAccess",
         f"BucketAccess gone granted access but its Secret cosi {bucket_access.SECRET_NOT_YET}"),
    ]
    assert facts.waiting(cluster, reg, frozenset({(kinds.COSI, "BucketClaim"), (kinds.COSI, "BucketAccess")})) == [
        facts.waiting(cluster, reg, frozenset())[0]]


def test_each_behaviour_is_declared_beside_its_builder_and_names_a_kind_of_the_data_table():
    """Every behaviour comes from a builder module's BEHAVIOURS and has a row in core/kinds.py (its data)."""
    for key, behaviour in BEHAVIOURS.items():
        assert behaviour.data is kinds.KINDS[key], key
        assert all(build.__module__.startswith("berth_operator.builders.") for build in behaviour.builders), key
    assert set(BEHAVIOURS) >= {kind.key for kind in kinds.OWNED_KINDS}


def _module(name: str, *declared: Behaviour) -> types.ModuleType:
    module = types.ModuleType(name)
    module.BEHAVIOURS = declared
    return module


def test_a_kind_declared_twice_or_without_a_data_row_or_made_without_builders_is_refused():
    """The two halves must agree, or importing builders.kinds fails naming what is wrong: a second behaviour of a
    kind, a behaviour of a kind core/kinds.py has no row for, an owned kind with no builders, builders for a kind
    the data table says Berth does not write."""
    made = Behaviour("policy/v1", "PodDisruptionBudget", builders=(lambda reg, facts: None,))
    with pytest.raises(TypeError, match=r"PodDisruptionBudget \(policy/v1\) has two behaviours: in one and in two"):
        behaviours._declared([_module("one", made), _module("two", made)])
    assert behaviours._declared([_module("one", made), types.ModuleType("none")]) == {made.key: made}
    with pytest.raises(TypeError, match=r"no row for: \[\('example.com/v1', 'Widget'\)\]"):
        behaviours._in_table_order({**BEHAVIOURS, ("example.com/v1", "Widget"): Behaviour("example.com/v1", "Widget")})
    without = {key: behaviour for key, behaviour in BEHAVIOURS.items() if behaviour.kind != "PodDisruptionBudget"}
    with pytest.raises(TypeError, match=r"PodDisruptionBudget \(policy/v1\): core/kinds.py says applied='apply', "
                                        r"but its behaviour has no builders"):
        behaviours._in_table_order(without)
    read_only = tuple(kinds.Kind(k.api_version, k.kind, k.plural) if k.kind == "PodDisruptionBudget" else k
                      for k in kinds.TABLE)
    with pytest.raises(TypeError, match=r"says applied=None, but its behaviour has builders"):
        behaviours._in_table_order(dict(BEHAVIOURS), read_only)
    assert list(behaviours._in_table_order(dict(reversed(BEHAVIOURS.items())))) == list(BEHAVIOURS)
