"""The table of kinds, for the layers that read it from core (the client, the caches, discovery, the reactor).

It lives in builders/kinds.py, beside the builders its entries hold (issue 40: one entry per kind, with its
builder as a function object); core sits above the builders so that it can re-export it.
"""

from __future__ import annotations

from ..builders.kinds import (
    APPLY,
    CACHED_KINDS,
    CERT_MANAGER,
    CERT_MANAGER_API,
    CLASS_KINDS,
    COSI,
    COSI_API,
    CREATE,
    CREATE_ONLY_KINDS,
    GATEWAY,
    GATEWAY_API,
    KINDS,
    MISSING_API_REASONS,
    MONITORING,
    MONITORING_API,
    NAMED_KINDS,
    OPTIONAL_KINDS,
    OWNED_KINDS,
    PRUNABLE_KINDS,
    REGISTRY,
    TABLE,
    Kind,
    OptionalApi,
    crd_name,
    lookup,
)

__all__ = ["APPLY", "CACHED_KINDS", "CERT_MANAGER", "CERT_MANAGER_API", "CLASS_KINDS", "COSI", "COSI_API", "CREATE",
           "CREATE_ONLY_KINDS", "GATEWAY", "GATEWAY_API", "KINDS", "MISSING_API_REASONS", "MONITORING",
           "MONITORING_API", "NAMED_KINDS", "OPTIONAL_KINDS", "OWNED_KINDS", "PRUNABLE_KINDS", "REGISTRY", "TABLE",
           "Kind", "OptionalApi", "crd_name", "lookup"]
