"""Prometheus metrics of the operator (prometheus_client, served on their own port by cli.py).

Label values are kinds, verbs, results and condition names only: never object contents, never Secret data.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECONCILES = Counter("berth_operator_reconciles_total", "Reconciles of a Registry, by result.", ["result"])
RECONCILE_SECONDS = Histogram(
    "berth_operator_reconcile_duration_seconds",
    "Time one reconcile of a Registry took.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
APPLY_OPERATIONS = Counter(
    "berth_operator_apply_operations_total", "Writes to the API server, by kind and verb.", ["kind", "verb"]
)
ERRORS = Counter("berth_operator_errors_total", "Failures while reconciling, by kind of failure.", ["reason"])
REGISTRIES = Gauge(
    "berth_operator_registries",
    "Registries known to this operator, by condition and its status.",
    ["condition", "status"],
)
# Per Registry (so that alerts name the Registry): 1 while the condition is True, else 0. Labels are the
# Registry's namespace and name (object names, bounded by the Registries that exist) and the condition type.
REGISTRY_CONDITION = Gauge(
    "berth_operator_registry_condition",
    "1 while the Registry's condition is True, else 0 (written by the leader).",
    ["namespace", "registry", "condition"],
)
LEADER = Gauge("berth_operator_leader", "1 while this process holds the leader Lease and acts, else 0.")

# (namespace, name) -> {condition type: status}; the gauge is recomputed from it, so a Registry moving from
# one state to another is counted once.
_states: dict[tuple[str, str], dict[str, str]] = {}


def record_conditions(key: tuple[str, str], conditions: list[Mapping[str, str]] | None) -> None:
    if conditions is None:
        _states.pop(key, None)
        for ctype in ("Ready", "Progressing", "Degraded"):
            try:
                REGISTRY_CONDITION.remove(key[0], key[1], ctype)
            except KeyError:
                pass
    else:
        _states[key] = {c["type"]: c["status"] for c in conditions}
        for ctype in ("Ready", "Progressing", "Degraded"):
            REGISTRY_CONDITION.labels(namespace=key[0], registry=key[1], condition=ctype).set(
                1 if _states[key].get(ctype) == "True" else 0)
    _refresh_gauge()


def _refresh_gauge() -> None:
    counts: dict[tuple[str, str], int] = {}
    for conds in _states.values():
        for ctype in ("Ready", "Progressing", "Degraded"):
            for status in ("True", "False", "Unknown"):
                counts.setdefault((ctype, status), 0)
            counts[(ctype, conds.get(ctype, "Unknown"))] += 1
    for (ctype, status), count in counts.items():
        REGISTRIES.labels(condition=ctype, status=status).set(count)


def serve(port: int, addr: str = "0.0.0.0") -> int:
    """Serve /metrics in a background thread; returns the bound port (useful with port 0)."""
    server, _thread = start_http_server(port, addr=addr)
    return server.server_address[1]
