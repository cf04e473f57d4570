"""The cluster as the engines see it: one door for every read and write of a reconcile
(docs/design.md §1.2, docs/decisions/0024-caches-and-watches.md).

- Reads come from the caches where they cover the kind (caches.py; the classes a spec names from the caches of
  classes), else from the server, once per reconcile (reading_once: a claim or Secret the spec names is looked
  up, applied around and checked for readiness in one reconcile with one GET).
- Every write goes through the raw client (kube/client.py) and its answer is recorded in the caches at once, so
  the next reconcile does not see the object as it was before our own write; a delete makes them forget it.
- What is ours (ours: a cache change that is the echo of our own last write) and what the cluster serves
  (serves: discovery.py's answer for an optional kind).
The raw client knows nothing of this; the caches hold a raw client of their own for the informers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..kube.client import Kube
from .caches import Caches, Key


class Cluster:
    """kube: the raw client (connections, the leader's write fence). caches, when given, answer reads for the
    kinds they watch and learn every write; classes, when given (Caches.of_classes), answer reads of the classes
    once listed; served, when given (Discovery.serves), says whether the cluster serves an optional kind (without
    it every kind counts as served)."""

    def __init__(self, kube: Kube, caches: Caches | None = None, *,
                 served: Callable[[str, str], bool] | None = None, classes: Caches | None = None):
        self.kube = kube
        self._caches = caches
        self._classes = classes
        self._served = served
        self._reads: dict[Key, dict[str, Any] | None] | None = None
        self._class_reads: set[Key] | None = None

    def close(self) -> None:
        self.kube.close()

    # ---- what is ours, what is served

    @property
    def cached(self) -> bool:
        """Whether reads come from caches at all (a view without them reads everything from the server)."""
        return self._caches is not None

    def covers(self, api_version: str, kind: str, namespace: str | None) -> bool:
        """Whether the caches hold every object of Berth's of this kind here (a miss is then an absence)."""
        return self._caches is not None and self._caches.covers(api_version, kind, namespace)

    def ours(self, key: Key, version: str | None) -> bool:
        """Whether a cache change (version None: a deletion) is the echo of our own last write of the object."""
        return self._caches is not None and self._caches.ours(key, version)

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the cluster serves this kind (always, unless it is optional and discovery found it missing)."""
        return self._served is None or self._served(api_version, kind)

    # ---- reads

    def reading_once(self) -> Cluster:
        """The same view (connections, caches, fence) for one reconcile, which reads each object the caches do not
        hold from the server once; a reconcile is one snapshot anyway. A write of the object, and a get with
        cached=False, read it again."""
        view = copy.copy(self)
        view._reads, view._class_reads = {}, set()
        return view

    def server_reads(self) -> frozenset[Key]:
        """The objects this reconcile's view read from the server (those the caches do not hold, found or not),
        less those it wrote since, and the classes it read from the caches of classes: what a Registry names that
        Berth did not make (cluster/named.py, Caches.of_classes)."""
        return frozenset(self._reads or ()) | frozenset(self._class_reads or ())

    def get(self, api_version: str, kind: str, namespace: str | None, name: str, *,
            cached: bool = True) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404). From the caches when they hold it (unless not
        cached); a miss is read from the server (an object without Berth's label is not cached, and may exist). A
        class the caches of classes cover is theirs alone: a miss there is an absence."""
        if self._classes is not None and cached and self._classes.covers(api_version, kind, namespace):
            if self._class_reads is not None:
                self._class_reads.add(_key(api_version, kind, namespace, name))
            return self._classes.get(api_version, kind, namespace, name)
        if self._caches is not None and cached:
            hit = self._caches.get(api_version, kind, namespace, name)
            if hit is not None:
                return hit
        key = _key(api_version, kind, namespace, name)
        if self._reads is not None and cached and key in self._reads:
            read = self._reads[key]
            return copy.deepcopy(read) if read is not None else None
        answer = self.kube.get(api_version, kind, namespace, name)
        if self._reads is not None:
            self._reads[key] = copy.deepcopy(answer) if answer is not None else None
        return answer

    def get_owned(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """An object Berth made (so carrying its label), or None: from the caches alone where they cover the kind
        (a miss there is an absence, with no request), else from the server."""
        if self.covers(api_version, kind, namespace):
            assert self._caches is not None
            return self._caches.get(api_version, kind, namespace, name)
        return self.get(api_version, kind, namespace, name)

    def list(self, api_version: str, kind: str, namespace: str | None,
             labels: Mapping[str, str] | None = None, *, fresh: bool = False) -> list[dict[str, Any]]:
        """Objects with these labels: from the caches where they cover the kind (pods: the reconcile's list costs no
        request; a pod the watch has not delivered yet wakes the Registry when it arrives), else, or when `fresh`,
        from the server."""
        if not fresh and self.covers(api_version, kind, namespace):
            assert self._caches is not None
            return self._caches.list(api_version, kind, namespace, dict(labels or {}))
        return self.kube.list(api_version, kind, namespace, labels)

    def list_page(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.kube.list_page(*args, **kwargs)

    def watch(self, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return self.kube.watch(*args, **kwargs)

    # ---- writes, recorded

    def _unread(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        if self._reads is not None:
            self._reads.pop(_key(api_version, kind, namespace, name), None)

    def _record(self, answer: dict[str, Any]) -> dict[str, Any]:
        if answer and isinstance(answer.get("metadata"), Mapping):
            meta = answer["metadata"]
            self._unread(answer.get("apiVersion") or "", answer.get("kind") or "", meta.get("namespace"),
                         meta.get("name") or "")
        if self._caches is not None and answer:
            self._caches.record(answer)
        return answer

    def apply(self, manifest: Mapping[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply (Kube.apply), recorded."""
        return self._record(self.kube.apply(manifest, force=force))

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        return self._record(self.kube.create(manifest))

    def patch(self, api_version: str, kind: str, namespace: str | None, name: str, body: Any, *,
              json_patch: bool = False, subresource: str | None = None) -> dict[str, Any]:
        answer = self.kube.patch(api_version, kind, namespace, name, body, json_patch=json_patch,
                                 subresource=subresource)
        self._unread(api_version, kind, namespace, name)
        return answer if subresource else self._record(answer)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str, *, uid: str | None = None) -> bool:
        """Delete; with uid, only that incarnation. False when it was already gone."""
        self._unread(api_version, kind, namespace, name)
        deleted = self.kube.delete(api_version, kind, namespace, name, uid=uid)
        if deleted and self._caches is not None:
            self._caches.forget(api_version, kind, namespace, name)
        return deleted


def _key(api_version: str, kind: str, namespace: str | None, name: str) -> Key:
    return api_version, kind, namespace or "", name
