"""The one table of the kinds the operator manages (issue 27, issue 40: berth_operator.builders.kinds, re-exported
by core.kinds): the client, the caches, the apply layer and the builders all read it, so a new kind is one entry,
its builder module and its ClusterRole line (tests/deploy/test_cluster_role.py)."""

from __future__ import annotations

import ast
import pathlib

from berth_operator import builders
from berth_operator.builders import bucket_access
from berth_operator.builders.kinds import GROWN, MISSING_CHECKED, WAITING_CHECKED
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


def test_every_kind_with_a_waiting_check_is_in_the_reported_order_and_wakes_its_registry():
    """WAITING_CHECKED (the order of the Progressing message) holds each such kind once; a wait ends by a change of
    the object, so the kind is cached (Berth's label) or watched by name (named). A missing check looks up what a
    spec names: named, so that the object's arrival wakes the Registry."""
    with_waiting = [kind for kind in kinds.TABLE if kind.checks is not None and kind.checks.waiting is not None]
    assert sorted(WAITING_CHECKED, key=kinds.TABLE.index) == with_waiting
    assert len(set(WAITING_CHECKED)) == len(WAITING_CHECKED)
    assert all(kind.cached or kind.named for kind in WAITING_CHECKED)
    assert [kind.kind for kind in MISSING_CHECKED] == ["PersistentVolumeClaim", "BucketClaim", "BucketAccess"]
    assert all(kind.named for kind in MISSING_CHECKED)


def test_the_kinds_that_grow_are_create_only_and_patched():
    """A grow hook is the one patch of a create-only kind (expansion.py writes it): the ClusterRole grants the patch,
    and the caches or a watch by name wake the Registry as the object grows."""
    assert [kind.kind for kind in GROWN] == ["PersistentVolumeClaim"]
    for kind in GROWN:
        assert kind.applied == kinds.CREATE and "patch" in kind.verbs, kind.kind
        assert kind.cached or kind.named, kind.kind


def test_the_engine_names_only_the_kinds_it_reads_itself():
    """The managed kinds' checks are their entries' (issue 40): no engine module names another kind."""
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
