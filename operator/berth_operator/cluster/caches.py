"""Watch-driven caches of the objects Berth owns: the reconcile reads them instead of the API server, and a
change to an owned object wakes its Registry (docs/decisions/0024-caches-and-watches.md).

- One informer per kind and watched namespace (or one per kind, cluster-wide), in its own thread: a paginated
  list filtered by `app.kubernetes.io/managed-by=berth`, then a watch from that list's resourceVersion
  (bookmarks on; re-listed after 410 Gone or an error). A thread per kind, never per Registry.
- Each object is kept stripped to the fields the operator reads (STRIP: no managedFields, no Secret values,
  no Lease spec) and stored as compact JSON bytes: at 1000 Registries a few MB, decoded only when read.
- Writes are recorded as the server answered them (view.Cluster records them), so a reconcile right after our own write
  sees it. A watch event older than what is stored (by resourceVersion) is ignored.
- on_change(namespace, registry name, key, resourceVersion) runs for an ADDED, MODIFIED or DELETED object
  whose stripped content differs from what was stored: the echo of our own write, when recorded already, and a
  Lease renewal (its spec is not kept) wake nothing. An echo that overtook the answer to our write does wake;
  ours(key, version) then tells the wake it was our own (handlers.py skips it). The owner is the controlling
  Registry reference, else the instance label (pods).
- `synced` is set once every informer has listed: reconciles wait for it, so a fresh leader never takes a
  half-filled cache for missing objects (no spurious writes). An informer of a kind the cluster does not serve
  (discovery.py: COSI without its CRDs) lists nothing and counts as synced and empty; once the kind is served it
  lists and watches it (covering it only from then on), and when it stops being served its objects are gone.
A miss is not proof of absence: Cluster.get reads the server then (an object without Berth's label, such as a
claim named in the spec, is not cached).
The same informers, with no selector and no owners, cache the classes a spec names (core.kinds.CLASS_KINDS: the
admin's StorageClasses and COSI classes, cluster-scoped and few; `Caches.of_classes`): a reconcile reads them
without a request, and each change of one goes to on_change with no owner (handlers.named_changed wakes the
Registries that read it).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from berth_api import KIND as REGISTRY_KIND
from berth_api.pod_template import INSTANCE_LABEL, MANAGED_BY_LABEL

from ..core.kinds import CACHED_KINDS, CLASS_KINDS, OPTIONAL_KINDS
from ..kube.client import Kube, KubeError
from .discovery import Discovery
from .pod_status import strip_status
from .stream import Streams

logger = logging.getLogger("berth.operator.caches")

SELECTOR = f"{MANAGED_BY_LABEL}=berth"
RETRY_SECONDS = 2.0
# A class kind the operator may not list (a namespaced install without deploy/namespaced/cluster-reads.yaml): asked
# again this often, quietly, in case the grant is added; meanwhile its reads answer 403 with no request.
REFUSED_RETRY_SECONDS = 300.0
SERVED_POLL_SECONDS = 0.5  # how often an informer of a kind not served asks discovery (no request: a set lookup)
KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "generation", "labels", "annotations",
                 "ownerReferences", "deletionTimestamp")

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


def strip(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the operator reads. Secrets keep their key names only (values never enter the cache); a
    Lease keeps its metadata (its spec is the agents'); a Pod its labels, phase and why it cannot run (pod_status)."""
    meta = obj.get("metadata") or {}
    kind = obj.get("kind")
    kept: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": kind,
                            "metadata": {k: meta[k] for k in KEPT_METADATA if k in meta}}
    if kind == "Secret":
        kept["data"] = {key: "" for key in (obj.get("data") or {})}
    elif kind == "Pod":
        kept["status"] = strip_status(obj.get("status") or {})
    elif kind != "Lease":
        for field, value in obj.items():
            if field not in ("apiVersion", "kind", "metadata"):
                kept[field] = value
    return kept


def _version(obj: Mapping[str, Any]) -> int | None:
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _content(obj: Mapping[str, Any]) -> bytes:
    """The stored form; resourceVersion is part of it, so compare with _same for 'did anything change'."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _without_version(stored: bytes) -> dict[str, Any]:
    obj = json.loads(stored)
    obj["metadata"].pop("resourceVersion", None)
    return obj


def owner_of(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == REGISTRY_KIND:
            return ref.get("name")
    return (meta.get("labels") or {}).get(INSTANCE_LABEL)


class Caches:
    def __init__(self, kube: Kube, namespaces: Iterable[str] | None,
                 on_change: Callable[[str, str, Key, str | None], None] = lambda *change: None,
                 discovery: Discovery | None = None, *, kinds: tuple[tuple[str, str], ...] = CACHED_KINDS,
                 selector: str = SELECTOR):
        """namespaces None: cluster-wide. kube: a client without caches (the informers' own reads). discovery:
        which optional kinds are served (None: all are). kinds, selector: what is listed and watched (default:
        Berth's own objects, by its label). Without a selector (the classes): every change goes to on_change with
        owner "" (not only those of an object a Registry owns)."""
        self.kube = kube
        self.discovery = discovery
        self.kinds, self.selector = kinds, selector
        self.namespaces: tuple[str | None, ...] = tuple(namespaces) if namespaces else (None,)
        self.on_change = on_change
        self._store: dict[Key, bytes] = {}
        # Names by instance label (apiVersion, kind, namespace, instance): list() reads one Registry's pods without
        # decoding every pod. An entry may be stale (label changed, object gone): list() re-checks the store.
        self._by_instance: dict[Key, set[str]] = {}
        self._written: dict[Key, str | None] = {}  # our last write of each object: its resourceVersion, None: deleted
        self._lock = threading.Lock()
        self._streams = Streams()  # the informers' threads; its `stopping` event stops them
        self._unsynced = {(av, kind, ns) for av, kind in kinds for ns in self.namespaces}
        # Informers of an optional kind that became served and have not listed it yet: their kind is read from the
        # server meanwhile (every other informer covers its kind from `synced` on).
        self._relisting: set[tuple[str, str, str | None]] = set()
        self._refused: set[tuple[str, str]] = set()  # class kinds whose list RBAC refused (of_classes only)
        self.synced = threading.Event()

    @classmethod
    def of_classes(cls, kube: Kube, on_change: Callable[[str, str, Key, str | None], None],
                   discovery: Discovery | None = None) -> Caches:
        """The classes a spec names (CLASS_KINDS), cluster-wide, every one (they carry no label of Berth's)."""
        return cls(kube, None, on_change, discovery, kinds=CLASS_KINDS, selector="")

    @property
    def owners(self) -> bool:
        """Whether its objects are Berth's, owned by Registries (filtered by Berth's label), not classes."""
        return bool(self.selector)

    # ---- lifecycle

    def start(self) -> None:
        self._streams.start("cache" if self.owners else "classes", self._run, self.kinds, self.namespaces)

    def stop(self) -> None:
        self._streams.stop()
        self.kube.close()

    # ---- reads (any thread)

    def covers(self, api_version: str, kind: str, namespace: str | None) -> bool:
        return self.synced.is_set() and (api_version, kind) in self.kinds and (
            self.namespaces == (None,) or namespace in self.namespaces) and (
            api_version, kind, None if self.namespaces == (None,) else namespace) not in self._relisting

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stripped object, or None when not cached (absent, unlabeled, or the cache is not synced). A class kind
        the operator may not list raises KubeError 403, as a read of it would, without asking."""
        if not self.covers(api_version, kind, namespace):
            return None
        if (api_version, kind) in self._refused:
            raise KubeError("get", kind, name, ApiException(status=403, reason="not readable by this operator"))
        stored = self._store.get((api_version, kind, namespace or "", name))
        return json.loads(stored) if stored is not None else None

    def list(self, api_version: str, kind: str, namespace: str | None,
             labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The cached objects with these labels (call only where covers() is true)."""
        instance = labels.get(INSTANCE_LABEL)
        with self._lock:
            if instance is not None:
                index = (api_version, kind, namespace or "", instance)
                names = self._by_instance.get(index, set())
                keys = [(api_version, kind, namespace or "", name) for name in sorted(names)]
                names.intersection_update({key[3] for key in keys if key in self._store})
            else:
                keys = sorted(k for k in self._store if k[:2] == (api_version, kind)
                              and (namespace is None or k[2] == namespace))
            stored = [self._store[key] for key in keys if key in self._store]
        found = [json.loads(content) for content in stored]
        return [obj for obj in found
                if all(((obj["metadata"].get("labels") or {}).get(k)) == v for k, v in labels.items())]

    # ---- writes (our own, and the informers')

    def record(self, obj: Mapping[str, Any]) -> None:
        """An object as the server answered our write."""
        if (obj.get("apiVersion"), obj.get("kind")) in self.kinds and self.owners and \
                (obj.get("metadata") or {}).get("labels", {}).get(MANAGED_BY_LABEL) == "berth":
            stripped = strip(obj)
            self._put(stripped)
            with self._lock:
                self._written[self._key(stripped)] = stripped["metadata"].get("resourceVersion")

    def forget(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        """We deleted it."""
        key = (api_version, kind, namespace or "", name)
        with self._lock:
            self._store.pop(key, None)
            self._written[key] = None

    def ours(self, key: Key, version: str | None) -> bool:
        """Whether this change (version None: a deletion) is our own last write of the object."""
        with self._lock:
            return key in self._written and self._written[key] == version

    def _key(self, obj: Mapping[str, Any]) -> Key:
        meta = obj["metadata"]
        return obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"]

    def _put(self, obj: dict[str, Any]) -> bool:
        """Store unless older than what is stored; True when the content (beyond resourceVersion) changed."""
        key, content = self._key(obj), _content(obj)
        with self._lock:
            before = self._store.get(key)
            if before is not None:
                old = json.loads(before)
                new_version, old_version = _version(obj), _version(old)
                if new_version is not None and old_version is not None and new_version < old_version:
                    return False
            self._store[key] = content
            instance = (obj["metadata"].get("labels") or {}).get(INSTANCE_LABEL)
            if instance is not None:
                self._by_instance.setdefault((key[0], key[1], key[2], instance), set()).add(key[3])
        return before is None or _without_version(before) != _without_version(content)

    def _drop(self, obj: Mapping[str, Any]) -> bool:
        key = self._key(obj)
        with self._lock:
            return self._store.pop(key, None) is not None

    # ---- informers

    def _served(self, api_version: str, kind: str) -> bool:
        """Whether the informer should list (waiting for discovery's first answer about an optional kind)."""
        if self.discovery is None or (api_version, kind) not in OPTIONAL_KINDS:
            return True
        while not self.discovery.known.wait(SERVED_POLL_SECONDS):
            if self._streams.stopping.is_set():
                return False
        return self.discovery.serves(api_version, kind)

    def _run(self, api_version: str, kind: str, namespace: str | None) -> None:
        while not self._streams.stopping.is_set():
            if not self._served(api_version, kind):
                self._serve_nothing(api_version, kind, namespace)
                continue
            try:
                version = self._list(api_version, kind, namespace)
                self._readable(api_version, kind)
                self._mark_synced(api_version, kind, namespace)
                while not self._streams.stopping.is_set():
                    version = self._watch(api_version, kind, namespace, version)
                    if version is None:  # 410 Gone: list again
                        break
            except Exception as exc:  # an outage or a refusal: say so, wait, list again
                if self._streams.stopping.is_set():
                    return
                if not self._served(api_version, kind):
                    continue  # its CRD went away (discovery says so): nothing to report
                if not self.owners and isinstance(exc, KubeError) and exc.status == 403:
                    self._refuse(api_version, kind, namespace)
                    self._streams.stopping.wait(REFUSED_RETRY_SECONDS)
                    continue
                logger.warning("cache of %s in %s: %s; listing again in %.0f s", kind, namespace or "all namespaces",
                               exc if isinstance(exc, KubeError) else type(exc).__name__, RETRY_SECONDS)
                self._streams.stopping.wait(RETRY_SECONDS)

    def _refuse(self, api_version: str, kind: str, namespace: str | None) -> None:
        """A class kind this operator may not list: synced as unreadable (its checks are skipped and say so, in
        the Registry's conditions), said once at info level: a namespaced install may leave its grant out."""
        if (api_version, kind) not in self._refused:
            logger.info("%s (%s) may not be listed by this operator: the checks that read one are skipped; asking "
                        "again every %.0f s", kind, api_version, REFUSED_RETRY_SECONDS)
        with self._lock:
            self._refused.add((api_version, kind))
        self._mark_synced(api_version, kind, namespace)

    def _readable(self, api_version: str, kind: str) -> None:
        if (api_version, kind) in self._refused:
            logger.info("%s (%s) may be listed by this operator now: its checks are made again", kind, api_version)
            with self._lock:
                self._refused.discard((api_version, kind))

    def _serve_nothing(self, api_version: str, kind: str, namespace: str | None) -> None:
        """A kind the cluster does not serve: synced and empty until it is served (objects of a CRD deleted are
        gone with it: their owners are woken)."""
        slot = (api_version, kind, namespace)
        with self._lock:
            self._relisting.discard(slot)
            gone = [json.loads(self._store.pop(key)) for key in [k for k in self._store if k[:2] == (api_version, kind)
                                                                  and (namespace is None or k[2] == namespace)]]
        for obj in gone:
            self._changed(obj, deleted=True)
        self._mark_synced(api_version, kind, namespace)
        while not self._streams.stopping.wait(SERVED_POLL_SECONDS):
            if self.discovery is not None and self.discovery.serves(api_version, kind):
                with self._lock:
                    self._relisting.add(slot)  # read from the server until listed
                return

    def _list(self, api_version: str, kind: str, namespace: str | None) -> str:
        seen: dict[Key, dict[str, Any]] = {}
        token = None
        while True:
            page = self.kube.list_page(api_version, kind, namespace, self.selector, continue_token=token)
            for item in page.get("items") or ():
                obj = strip({**item, "apiVersion": api_version, "kind": kind})
                seen[self._key(obj)] = obj
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                version = (page.get("metadata") or {}).get("resourceVersion") or ""
                break
        gone = []
        with self._lock:
            for key in [k for k in self._store if k[:2] == (api_version, kind)
                        and (namespace is None or k[2] == namespace) and k not in seen]:
                gone.append(json.loads(self._store.pop(key)))
        for obj in seen.values():
            if self._put(obj) and self.synced.is_set():
                self._changed(obj)
        for obj in gone:
            self._changed(obj, deleted=True)
        return version

    def _watch(self, api_version: str, kind: str, namespace: str | None, version: str) -> str | None:
        """Follow one watch stream; the resourceVersion to resume from, or None after 410 Gone."""

        def seen(kind_of_event: str, obj: Mapping[str, Any]) -> None:
            stripped = strip({**obj, "apiVersion": api_version, "kind": kind})
            if kind_of_event == "DELETED":
                if self._drop(stripped):
                    self._changed(stripped, deleted=True)
            elif self._put(stripped):
                self._changed(stripped)

        return self._streams.follow(self.kube, (api_version, kind, namespace), api_version, kind, namespace,
                                    self.selector, version, seen)

    def _mark_synced(self, api_version: str, kind: str, namespace: str | None) -> None:
        with self._lock:
            self._relisting.discard((api_version, kind, namespace))
            self._unsynced.discard((api_version, kind, namespace))
            done = not self._unsynced
        if done and not self.synced.is_set():
            logger.info("%s synced: %d objects", "caches" if self.owners else "caches of classes", len(self._store))
            self.synced.set()

    def _changed(self, obj: Mapping[str, Any], *, deleted: bool = False) -> None:
        owner = owner_of(obj) if self.owners else ""
        if owner or not self.owners:
            version = None if deleted else obj["metadata"].get("resourceVersion")
            try:
                self.on_change((obj.get("metadata") or {}).get("namespace") or "", owner, self._key(obj), version)
            except Exception:  # the wake must never kill the informer
                logger.exception("waking Registry %s failed", owner)
