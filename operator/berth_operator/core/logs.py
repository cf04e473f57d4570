"""Logging of the operator: one JSON object per line (kopf's JSON format), and the operator's own logger.

What is logged: object kinds, names and namespaces, verbs, reasons. What is never logged: Secret manifests,
their data, or the generated HTTP secret value (the apply layer never passes them to a logger).
"""

from __future__ import annotations

import logging

import kopf

logger = logging.getLogger("berth.operator")


def configure(*, level: str = "info", json: bool = True) -> None:
    """Root logging for the berth-operator process. kopf's JSON format adds the object reference of
    per-object log lines under the key "object"."""
    kopf.configure(
        debug=level == "debug",
        verbose=level in ("debug", "verbose"),
        quiet=level in ("warning", "error"),
        log_format=kopf.LogFormat.JSON if json else kopf.LogFormat.FULL,
        log_refkey="object",
    )
    # kopf logs every handler run per object at info ("Handler ... succeeded", one per watch event); our
    # own line per reconcile says what was done, so kopf's per-object lines start at warning unless debugging.
    if level != "debug":
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # The official client's urllib3 pool logs every request at debug; headers carry the bearer token.
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
