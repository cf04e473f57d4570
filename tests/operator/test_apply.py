"""berth_operator.engine.apply's pure parts: containment and when it writes at all. What the server-side apply then does
(repairs, removes what the builder stopped setting, keeps other managers' fields and owner references) is checked
on the real API server: tests/apiserver/test_apply.py."""

from __future__ import annotations

import jsonpatch

from berth_operator.engine.apply import DESIRED_HASH_ANNOTATION, contains, desired_hash, needs_write

OWNER = {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "name": "r", "uid": "u1", "controller": True,
         "blockOwnerDeletion": True}
WANTED = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "r", "namespace": "ns", "labels": {"a": "1"}, "ownerReferences": [OWNER]},
    "spec": {"selector": {"a": "1"}, "ports": [{"name": "http", "port": 5000}]},
}
DIGEST = desired_hash(WANTED)


def live_of(wanted, **extra_meta):
    """What the API server would hold after creating `wanted`: defaults added, our hash annotation."""
    live = jsonpatch.apply_patch(wanted, [], in_place=False)
    live["metadata"].update(uid="x", resourceVersion="7", annotations={DESIRED_HASH_ANNOTATION: desired_hash(wanted)})
    live["metadata"].update(extra_meta)
    live["spec"]["clusterIP"] = "10.0.0.1"
    live["spec"]["ports"][0]["protocol"] = "TCP"
    return live


def test_contains_ignores_server_defaults_but_not_list_lengths():
    live = live_of(WANTED)
    assert contains(live, WANTED)
    assert not contains(live, {"spec": {"ports": [{"port": 5000}, {"port": 5001}]}})
    assert not contains(live, {"spec": {"selector": {"a": "2"}}})
    assert not contains({"spec": {}}, {"spec": {"type": "ClusterIP"}})


def test_unchanged_object_needs_no_write():
    live = live_of(WANTED)
    assert not needs_write(live, WANTED, DIGEST)


def test_changed_field_needs_a_write_and_other_managers_fields_do_not():
    wanted = jsonpatch.apply_patch(WANTED, [{"op": "replace", "path": "/spec/ports/0/port", "value": 5443}])
    live = live_of(WANTED, labels={"a": "1", "someone-else": "x"})
    assert needs_write(live, wanted, desired_hash(wanted))
    assert not needs_write(live, WANTED, DIGEST)  # a label someone else added is not drift


def test_field_the_builder_stopped_setting_needs_a_write():
    with_extra = jsonpatch.apply_patch(WANTED, [{"op": "add", "path": "/spec/ports/0/appProtocol", "value": "http"}])
    live = live_of(with_extra)
    # Containment alone would call this unchanged; the recorded hash says the builder's output moved.
    assert contains(live, WANTED)
    assert needs_write(live, WANTED, DIGEST)


def test_hash_is_stable_and_order_independent():
    reordered = {"spec": WANTED["spec"], "metadata": WANTED["metadata"], "kind": "Service", "apiVersion": "v1"}
    assert desired_hash(reordered) == DIGEST


def test_zero_values_the_server_omits_match_absent_fields():
    wanted = {"spec": {"readOnly": False, "env": [], "resources": {}, "replicas": 0, "name": "x"}}
    assert contains({"spec": {"name": "x"}}, wanted)
    assert not contains({"spec": {"name": "x", "readOnly": True}}, wanted)
    assert not contains({"spec": {}}, wanted)  # "x" is not a zero value
    assert not contains({"spec": {"name": "x"}}, {"spec": {"readOnly": True}})


def test_resource_quantities_compare_by_value():
    wanted = {"resources": {"requests": {"cpu": "0.5", "memory": "1.5Gi"}, "limits": {"memory": "2Gi"}}}
    live = {"resources": {"requests": {"cpu": "500m", "memory": "1536Mi"}, "limits": {"memory": "2Gi"}}}
    assert contains(live, wanted)
    assert not contains({"resources": {"requests": {"cpu": "600m", "memory": "1536Mi"}, "limits": {"memory": "2Gi"}}},
                        wanted)
    # Only under requests/limits: elsewhere "1.0" and "1" are different strings.
    assert not contains({"labels": {"v": "1.0"}}, {"labels": {"v": "1"}})


def test_replacement_replaces_only_differing_fields_whole():
    from berth_operator.engine.apply import replacement

    live = live_of(WANTED)
    live["spec"]["ports"] = [{"name": "http", "port": 5999, "protocol": "TCP"}]  # a hand edit of the port
    wanted = {**WANTED, "metadata": {**WANTED["metadata"], "annotations": {DESIRED_HASH_ANNOTATION: DIGEST}}}
    patch = replacement(live, wanted)
    assert patch == {"metadata": {"annotations": {DESIRED_HASH_ANNOTATION: DIGEST}},
                     "spec": {"ports": [{"name": "http", "port": 5000}]}}  # selector matched: not sent


def test_one_event_per_verb_names_every_object_in_the_order_written():
    from berth_operator.engine.apply import Action
    from berth_operator.reactor.handlers import write_events

    actions = [Action("Created", "ServiceAccount", "r-agent"), Action("Updated", "Deployment", "r"),
               Action("Created", "Service", "r"), Action("Deleted", "PodDisruptionBudget", "r")]
    assert write_events(actions) == [("Created", "Created ServiceAccount r-agent, Service r"),
                                     ("Updated", "Updated Deployment r"),
                                     ("Deleted", "Deleted PodDisruptionBudget r")]
    assert write_events([]) == []
