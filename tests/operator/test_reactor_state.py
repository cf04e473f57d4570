"""The parts of the handlers' shared state (reactor.state) that decide something, each on its own: which change of
a delivered body reconciles at once (Seen), what a reconcile leaves for later events (Results), and who read which
named object (NameIndex). The handlers' paths through them are covered by the controller tests."""

from __future__ import annotations

from berth_operator.engine.reconcile import Outcome
from berth_operator.reactor.state import NameIndex, Results, Seen

A, B = ("ns", "a"), ("ns", "b")
SECRET = ("v1", "Secret", "ns", "creds")
CONFIG = ("v1", "ConfigMap", "ns", "conf")


def test_a_first_body_reconciles_nothing_a_changed_digest_names_its_trigger():
    seen = Seen()
    assert seen.remember(A, b"1", agents="x", gc="g") is None
    assert seen.remember(A, b"2", agents="x", gc="g") is None  # a spec change: kopf's own handlers reconcile
    assert seen.bodies[A] == b"2"
    assert seen.remember(A, b"3", agents="y", gc="g") == "agents"
    assert seen.remember(A, b"4", agents="y", gc="h") == "garbage collection"
    assert seen.remember(A, b"5", agents="z", gc="i") == "agents"  # both changed: one reconcile
    seen.forget(A)
    assert seen.remember(A, b"6", agents="w", gc="j") is None  # after a deletion it is a first body again
    assert seen.bodies == {A: b"6"}


def test_results_follow_the_last_outcome_and_a_gone_registry_leaves_none():
    results = Results()
    results.record(A, Outcome(polled=True, awaits_api=True, status_version="7"))
    assert (A in results.polled, A in results.awaiting_api, results.written) == (True, True, {A: "7"})
    results.record(A, Outcome())
    assert (A in results.polled, A in results.awaiting_api, results.written) == (False, False, {A: "7"})
    results.record(A, Outcome(polled=True, awaits_api=True, gone=True))
    assert (A in results.polled, A in results.awaiting_api) == (False, False)
    results.forget(A)
    assert results == Results()


def test_the_index_finds_the_readers_of_an_object_and_forgets_what_a_registry_no_longer_reads():
    names = NameIndex()
    names.index(A, frozenset({SECRET, CONFIG}))
    names.index(B, frozenset({SECRET}))
    assert names.changed(SECRET, running=False) == [A, B]
    assert names.readers_of_kind("v1", "ConfigMap") == [A]
    names.index(A, frozenset({SECRET}))
    assert names.changed(CONFIG, running=False) == []
    names.index(A, frozenset())
    names.index(B, frozenset())
    assert names == NameIndex(changes=2)


def test_a_change_while_a_reconcile_runs_is_found_missed_by_one_that_began_before_it():
    names = NameIndex()
    since = names.changes  # a reconcile begins
    names.changed(SECRET, running=True)  # nobody has read it yet: no reader woken
    later = names.changes  # a second reconcile begins after the change
    assert names.missed(frozenset({SECRET}), later, running=True) == []
    assert names.missed(frozenset({SECRET, CONFIG}), since, running=True) == [SECRET]
    assert names.missed(frozenset({SECRET}), since, running=False) == [SECRET]  # the last one ends: kept no longer
    assert names.missed(frozenset({SECRET}), since, running=False) == []
    names.changed(CONFIG, running=False)  # no reconcile runs: nothing to keep
    assert names.missed(frozenset({CONFIG}), since, running=False) == []
