"""Wakes by name: the objects a spec names that Berth did not make (a user's Secret, ConfigMap, claim, BucketClaim
or BucketAccess, the COSI driver's Secret) carry no label of Berth's, so the caches never see them change
(docs/decisions/0024-caches-and-watches.md).

- One thread per named kind (core.kinds.NAMED_KINDS) and watched namespace (or cluster-wide) follows a
  metadata-only watch of every object of that kind, with no selector (the names are the user's), from the
  resourceVersion of a one-item list. Nothing is stored: each event's key goes to on_change, which wakes the
  Registries whose last reconcile read that object from the server (handlers.py keeps that index, from
  Cluster.server_reads). An object with Berth's label is the caches' business and is skipped.
- After every list (the first, and after a 410 Gone or an error) on_resync(kind) runs: a change in the gap
  was not seen, so every Registry naming an object of that kind is reconciled.
- A kind the cluster does not serve (discovery.py: COSI without its CRDs) is not watched until it is served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from berth_api.pod_template import MANAGED_BY_LABEL

from ..core.kinds import NAMED_KINDS, OPTIONAL_KINDS
from ..kube.client import METADATA_LIST, METADATA_WATCH, Kube, KubeError
from .caches import Key
from .discovery import Discovery
from .stream import Streams

logger = logging.getLogger("berth.operator.named")

RETRY_SECONDS = 2.0
SERVED_POLL_SECONDS = 0.5  # how often a watch of a kind not served asks discovery (a set lookup, no request)


class NamedWatches:
    def __init__(self, kube: Kube, namespaces: Iterable[str] | None, *,
                 on_change: Callable[[Key, str | None], None],
                 on_resync: Callable[[str, str], None],
                 discovery: Discovery | None = None):
        """namespaces None: cluster-wide. kube: a client of their own. on_change(key, resourceVersion; None when
        deleted) and on_resync(apiVersion, kind) run in the watches' threads."""
        self.kube = kube
        self.namespaces: tuple[str | None, ...] = tuple(namespaces) if namespaces else (None,)
        self.on_change = on_change
        self.on_resync = on_resync
        self.discovery = discovery
        self._streams = Streams()
        self._stop = self._streams.stopping

    def start(self) -> None:
        self._streams.start("named", self._run, NAMED_KINDS, self.namespaces)

    def stop(self) -> None:
        self._streams.stop()
        self.kube.close()

    def _served(self, api_version: str, kind: str) -> bool:
        if self.discovery is None or (api_version, kind) not in OPTIONAL_KINDS:
            return True
        return self.discovery.known.is_set() and self.discovery.serves(api_version, kind)

    def _run(self, api_version: str, kind: str, namespace: str | None) -> None:
        while not self._stop.is_set():
            if not self._served(api_version, kind):
                self._stop.wait(SERVED_POLL_SECONDS)
                continue
            try:
                page = self.kube.list_page(api_version, kind, namespace, "", limit=1, accept=METADATA_LIST)
                version = (page.get("metadata") or {}).get("resourceVersion") or ""
                self._resync(api_version, kind)
                while version is not None and not self._stop.is_set() and self._served(api_version, kind):
                    version = self._watch(api_version, kind, namespace, version)
            except Exception as exc:  # an outage or a refusal: say so, wait, list again
                if self._stop.is_set():
                    return
                if self._served(api_version, kind):
                    logger.warning("watch of named %s in %s: %s; listing again in %.0f s", kind,
                                   namespace or "all namespaces",
                                   exc if isinstance(exc, KubeError) else type(exc).__name__, RETRY_SECONDS)
                self._stop.wait(RETRY_SECONDS)

    def _resync(self, api_version: str, kind: str) -> None:
        try:
            self.on_resync(api_version, kind)
        except Exception:  # a wake must never kill the watch
            logger.exception("waking the Registries that name a %s failed", kind)

    def _watch(self, api_version: str, kind: str, namespace: str | None, version: str) -> str | None:
        """Follow one watch stream; the resourceVersion to resume from, or None after 410 Gone."""

        def seen(kind_of_event: str, obj: Mapping[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            if (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == "berth":
                return  # the caches' business: its informer wakes its owner
            key = (api_version, kind, meta.get("namespace") or "", meta.get("name") or "")
            try:
                self.on_change(key, None if kind_of_event == "DELETED" else meta.get("resourceVersion"))
            except Exception:  # a wake must never kill the watch
                logger.exception("waking the Registries that name %s %s failed", kind, key[3])

        return self._streams.follow(self.kube, (api_version, kind, namespace), api_version, kind, namespace, "",
                                    version, seen, accept=METADATA_WATCH)
