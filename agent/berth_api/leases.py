"""The names of a Registry's two Leases: the operator creates them, the agents take them
(docs/decisions/0010-replicas-reload-one-at-a-time.md, docs/decisions/0019-garbage-collection-inside-the-pods.md)."""

from __future__ import annotations


def reload_lease_name(registry: str) -> str:
    """`<registry>-reload`: the agents take it in turn, so replicas restart their registries one at a time."""
    return f"{registry}-reload"


def gc_lease_name(registry: str) -> str:
    """`<registry>-gc`: its holder runs the Registry's garbage collection."""
    return f"{registry}-gc"


__all__ = ["gc_lease_name", "reload_lease_name"]
