"""Which optional kinds the cluster serves (core.kinds.OPTIONAL_KINDS: COSI's, prometheus-operator's ServiceMonitor),
known at start and followed as CustomResourceDefinitions change (docs/decisions/0025-optional-apis.md).

A watch of CRDs, not discovery on a timer: a CRD's create, its Established condition and its delete are each a
watch event, so a Registry waiting for an API recovers within a second of it being served, and an idle cluster
costs no request. kopf watches CRDs already (the ClusterRole grants list and watch on them).

- One thread lists the CRDs' metadata only (PartialObjectMetadata: a CRD's schema can be megabytes, and a cluster
  may have hundreds), then follows a metadata-only watch from that list's resourceVersion. An optional kind's
  CRD (<plural>.<group>, kinds.crd_name) is read by name when the list holds it and on each of its events: the
  kind is served once that CRD is Established and serves the version Berth uses.
- `known` is set after the first list, or after the first failure (then every optional kind counts as not served
  until an answer comes): the caches wait for it, and Registries that need no optional API are never held back.
- Where the operator may not read CRDs (a namespaced install without that grant: 403), the API server's own
  discovery document of each optional API is asked instead, every POLL_SECONDS (no grant needed): a Registry
  waiting for an API then recovers within that time rather than a second.
- Listeners run in this thread on every change, with the kinds that changed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core.kinds import OPTIONAL_KINDS, crd_name
from ..kube.client import METADATA_LIST, METADATA_WATCH, Kube, KubeError
from .stream import Streams

logger = logging.getLogger("berth.operator.discovery")

CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
RETRY_SECONDS = 2.0
POLL_SECONDS = 10.0  # API discovery instead of the CRD watch, where CRDs may not be read

Listener = Callable[[frozenset[tuple[str, str]]], None]


def serving(crd: Mapping[str, Any] | None, version: str) -> bool:
    """Whether a CRD object serves this version: Established, and the version listed as served."""
    if not crd:
        return False
    versions = (crd.get("spec") or {}).get("versions") or ()
    conditions = (crd.get("status") or {}).get("conditions") or ()
    return any(v.get("name") == version and v.get("served") for v in versions) and any(
        c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def describe(missing: Iterable[tuple[str, str]]) -> str:
    """`BucketClaim, BucketAccess (objectstorage.k8s.io/v1alpha1)` for kinds of one or more API versions."""
    by_version: dict[str, list[str]] = {}
    for api_version, kind in missing:
        by_version.setdefault(api_version, []).append(kind)
    return "; ".join(f"{', '.join(kinds)} ({api_version})" for api_version, kinds in by_version.items())


class Discovery:
    """kube: a client without caches (this thread's own reads)."""

    def __init__(self, kube: Kube, kinds: Iterable[tuple[str, str]] = OPTIONAL_KINDS):
        self.kube = kube
        self._crds = {crd_name(api_version, kind): (api_version, kind) for api_version, kind in kinds}
        self._served: set[tuple[str, str]] = set()
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._streams = Streams()
        self._stop = self._streams.stopping
        self._thread: threading.Thread | None = None
        self.known = threading.Event()

    # ---- reads (any thread)

    def serves(self, api_version: str, kind: str) -> bool:
        key = (api_version, kind)
        return key not in self._crds.values() or key in self._served

    def on_change(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # ---- lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="berth-discovery")
        self._thread.start()

    def stop(self) -> None:
        self._streams.stop()
        if self._thread is not None:
            self._thread.join(10)

    # ---- the thread

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                if not self.known.is_set():
                    missing = sorted(key for key in self._crds.values() if key not in self._served)
                    if missing:
                        logger.info("not served by this cluster: %s", describe(missing))
                self.known.set()
                while not self._stop.is_set():
                    version = self._watch(version)
                    if version is None:  # 410 Gone: list again
                        break
            except Exception as exc:  # an outage or a refusal: say so, wait, list again
                if self._stop.is_set():
                    return
                if isinstance(exc, KubeError) and exc.status == 403:
                    self._poll_api_discovery()
                    continue
                self.known.set()  # nothing waits on an answer that may not come
                logger.warning("discovery of optional APIs: %s; listing CustomResourceDefinitions again in %.0f s",
                               exc if isinstance(exc, KubeError) else type(exc).__name__, RETRY_SECONDS)
                self._stop.wait(RETRY_SECONDS)

    def _poll_api_discovery(self) -> None:
        """CRDs may not be read: which optional kinds the API's discovery lists, every POLL_SECONDS, until the
        operator stops (a restart tries the CRD watch again)."""
        logger.info("CustomResourceDefinitions may not be read by this operator: optional APIs are looked up in the "
                    "API server's discovery every %.0f s instead", POLL_SECONDS)
        versions = {api_version for api_version, _kind in self._crds.values()}
        while not self._stop.is_set():
            try:
                listed = {version: self.kube.served_kinds(version) for version in versions}
                self._update({name: kind in listed[api_version] for name, (api_version, kind) in self._crds.items()})
                self.known.set()
            except Exception as exc:  # an outage: as for the watch, say so and ask again
                self.known.set()
                logger.warning("API discovery of optional APIs: %s; asking again in %.0f s",
                               exc if isinstance(exc, KubeError) else type(exc).__name__, POLL_SECONDS)
            self._stop.wait(POLL_SECONDS)

    def _list(self) -> str:
        present: set[str] = set()
        token = None
        while True:
            page = self.kube.list_page(*CRD, None, "", continue_token=token, accept=METADATA_LIST)
            present.update((item.get("metadata") or {}).get("name") or "" for item in page.get("items") or ())
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                version = (page.get("metadata") or {}).get("resourceVersion") or ""
                break
        self._update({name: self._read(name) if name in present else False for name in self._crds})
        return version

    def _watch(self, version: str) -> str | None:
        def seen(kind_of_event: str, obj: Mapping[str, Any]) -> None:
            name = (obj.get("metadata") or {}).get("name")
            if name in self._crds:
                self._update({name: kind_of_event != "DELETED" and self._read(name)})

        return self._streams.follow(self.kube, CRD, *CRD, None, "", version, seen, accept=METADATA_WATCH)

    def _read(self, name: str) -> bool:
        api_version = self._crds[name][0]
        crd = self.kube.get(*CRD, None, name, cached=False)
        return serving(crd, api_version.split("/")[-1])

    def _update(self, answers: Mapping[str, bool]) -> None:
        changed = set()
        with self._lock:
            for name, served in answers.items():
                key = self._crds[name]
                if served != (key in self._served):
                    changed.add(key)
                    (self._served.add if served else self._served.discard)(key)
        for api_version, kind in sorted(changed):
            logger.info("%s (%s) is %s by this cluster", kind, api_version,
                        "served" if (api_version, kind) in self._served else "no longer served")
        if changed:
            for listener in self._listeners:
                try:
                    listener(frozenset(changed))
                except Exception:  # a listener must never stop discovery
                    logger.exception("a listener of discovery failed")
