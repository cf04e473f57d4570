"""Growing in place: the one change the operator makes to a live object of a create-only kind (apply.py creates
them and never patches). Which kinds grow, which object, and what to patch are their behaviours' (checks.grow, a
Grow beside the kind's builder; builders/kinds.py gathers them); this step reads the object, writes the JSON patch
guarded by its resourceVersion, and reads again on a conflict. It names no managed kind.
"""

from __future__ import annotations

from collections.abc import Iterable

from berth_api import Registry

from ..builders import meta
from ..builders.behaviour import Behaviour
from ..builders.checks import Problem
from ..builders.kinds import GROWN
from ..cluster.view import Cluster
from ..kube.client import KubeError
from .apply import CONFLICT_RETRIES, Action
from .facts import ClusterReader
from .status import Finding


def expand(cluster: Cluster, reg: Registry) -> tuple[list[Action], list[Finding]]:
    """Each growing kind's object grown as its hook plans (in table order); the hooks' findings."""
    actions: list[Action] = []
    findings: list[Finding] = []
    for kind in GROWN:
        grown, found = _grow(cluster, reg, kind)
        actions += grown
        findings += found
    return actions, findings


def _findings(problems: Iterable[Problem]) -> list[Finding]:
    return [Finding(problem.reason, problem.message) for problem in problems]


def _grow(cluster: Cluster, reg: Registry, kind: Behaviour) -> tuple[list[Action], list[Finding]]:
    name = kind.checks.grow.target(reg)
    if name is None:
        return [], []
    ns, reader = meta.namespace(reg), ClusterReader(cluster)
    for attempt in range(CONFLICT_RETRIES):
        # After a conflict the cached object is older than the server's: read the server's.
        live = cluster.get(kind.api_version, kind.kind, ns, name, cached=attempt == 0)
        if live is None:
            return [], []
        growth = kind.checks.grow.plan(reader, reg, live)
        if not growth.patch:
            return [], _findings(growth.problems)
        version = live["metadata"].get("resourceVersion")
        ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *growth.patch]
        try:
            cluster.patch(kind.api_version, kind.kind, ns, name, ops, json_patch=True)
        except KubeError as exc:
            last, refused = exc, growth.refused
            if exc.status in (409, 422):  # changed under us: read again and plan again
                continue
            if exc.status != 403:
                raise
            break
        return [Action("Updated", kind.kind, name)], _findings([growth.grown] if growth.grown else [])
    return [], [Finding(refused.reason, f"{refused.message}: {last}")]
