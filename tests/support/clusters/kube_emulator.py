"""kmock's KubernetesEmulator with the API-server behaviour our clients rely on (docs/upstream.md#parts-kmock).

kmock 0.8 gives us the request handler (served by aiohttp's test server, as kmock.Server does), API
discovery, Status-shaped errors, the request log (iterate the emulator) and the object store with history
(`emulator.objects`). Its own object handling
is a plain dict merge, which kopf and the official client cannot run against (docs/upstream.md#parts-kmock). So every
request for an object (a path that names a known resource) is served here instead; discovery and any
other path still goes to kmock. Each gap filler says why:

- create answers 201 with the object: the kubernetes client only parses 201 (kmock: 200 -> None).
- metadata.uid, creationTimestamp, generation and a resourceVersion from one cluster-wide counter,
  bumped on every write: kopf and watch resumption key on resourceVersion; owner references need uids.
- metadata.generation counts spec changes only: a write that changes nothing outside metadata/status
  leaves it, as the API server does for kinds with a status subresource (every kind here that has one).
- the `status` subresource: writes to the main resource keep the stored status (and create drops it);
  writes to /status change only status (kmock lets /status patches change spec).
- a write that changes nothing keeps the resourceVersion and sends no watch event (as the API server).
- 409 Conflict on a stale metadata.resourceVersion in an update or patch that carries one (optimistic
  concurrency; kmock has none), 409 AlreadyExists on a duplicate create.
- 422 on a json-patch whose `test` op fails (kopf's and our compare-and-swap patches depend on it).
- strategic merge patch (what the official client sends for dict bodies on built-in kinds) merges lists
  by their patch merge keys, from the schemas kubernetes-validate ships (`support.clusters.kube_strategic`): a
  container or volume left out of such a patch stays, as on a cluster. On custom resources: 415, as there.
- PUT (replace), deletecollection, the `scale` subresource, generateName, and server-side apply
  (`application/apply-patch+yaml`) that creates a missing object and removes the fields the same field
  manager applied before and no longer applies (kmock: PUT 404s, apply is a merge that 404s); an apply's
  owner references merge with the object's by uid, and two controllers among them are refused (422).
- labelSelector and fieldSelector on list, watch and deletecollection (kmock ignores both).
- watch: `watch=true` in any letter case (the official client sends `True`); with a resourceVersion it
  sends only newer events from a bounded history (kmock replays everything), and 410 Gone (an ERROR
  event) when that version is older than the history kept; `sendInitialEvents` with the closing
  bookmark; `timeoutSeconds` ends the stream; objects moving in or out of a selector arrive as
  ADDED/DELETED, as from the API server's watch cache.
- finalizers: delete sets deletionTimestamp; the write that removes the last finalizer deletes.
- owner-reference garbage collection EMULATES THE KUBE-CONTROLLER-MANAGER'S GARBAGE COLLECTOR, which
  the API server itself does not do: when an object is really deleted, every object whose
  ownerReferences name its uid and no other live owner is deleted too (recursively, finalizers
  respected); dependents that still have a live owner lose only the dangling reference. It runs
  synchronously inside the delete, so tests see the end state at once. `propagationPolicy: Orphan`
  removes the reference instead; Foreground is treated as Background.
- fault injection for tests: `fail_next()` makes the next N matching requests fail, `drop_watches()`
  cuts every open watch connection, `compact()` forgets the watch history (next resume gets 410).

Not emulated (kept out on purpose): server-side apply has no field-ownership conflicts;
no admission, defaulting, schema validation, namespace existence checks or namespace deletion;
list pagination (`limit`) returns everything in one page; dryRun is refused with 400.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import random
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock
import yaml
from kmock._internal import apps, parsing, rendering  # the HTTP plumbing we keep; no public name for it

from support.clusters.kube_selectors import Matcher, SelectorError, field_matcher, label_matcher
from support.clusters.kube_strategic import schema_for, strategic_merge

Obj = dict[str, Any]
Key = tuple[kmock.resource, str | None, str]

# Content types a PATCH may carry (the official client picks strategic for dict bodies on built-ins).
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet
_DROP = object()  # queued to a watcher: cut its connection


def api_error(status: int, reason: str, message: str, **details: Any) -> kmock.KubernetesError:
    """A Status error as the API server sends it (kmock renders KubernetesError as Status)."""
    return kmock.KubernetesError(status=status, reason=reason, message=message, details=details or {})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _remove_unapplied(current: Any, before: Any, now: Any) -> Any:
    """Drop from `current` the leaves one field manager applied `before` and no longer applies `now`."""
    if not (isinstance(current, Mapping) and isinstance(before, Mapping)):
        return current
    now = now if isinstance(now, Mapping) else {}
    result = dict(current)
    for key, value in before.items():
        if key not in now:
            result.pop(key, None)
        elif key in result:
            result[key] = _remove_unapplied(result[key], value, now[key])
    return result


def _apply_owner_references(current: Mapping[str, Any], patch: Mapping[str, Any]) -> Mapping[str, Any]:
    """An apply's metadata.ownerReferences, merged with the object's as the API server does (a list keyed by
    uid: others' references stay), and refused as it refuses them: 422 when more than one is the controller."""
    applied = (patch.get("metadata") or {}).get("ownerReferences")
    if not isinstance(applied, list):
        return patch
    merged = {ref.get("uid"): ref for ref in (current.get("metadata") or {}).get("ownerReferences") or ()}
    merged.update({ref.get("uid"): ref for ref in applied})
    if sum(1 for ref in merged.values() if ref.get("controller")) > 1:
        raise api_error(422, "Invalid", "metadata.ownerReferences: Invalid value: Only one reference can have "
                                        "Controller set to true")
    return {**patch, "metadata": {**patch["metadata"], "ownerReferences": list(merged.values())}}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.define(eq=False)
class Target:
    """What an object request addresses, parsed from the URL path."""

    resource: kmock.resource
    info: kmock.ResourceInfo
    namespace: str | None
    name: str | None
    subresource: str | None

    @property
    def key(self) -> Key:
        assert self.name is not None
        return (self.resource, self.namespace, self.name)


@attrs.define(eq=False)
class Watcher:
    """One open watch stream: what it selects and the queue of its pending events."""

    resource: kmock.resource
    namespace: str | None
    name: str | None
    selects: Matcher
    queue: asyncio.Queue = attrs.field(factory=asyncio.Queue)

    def wants(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        return (
            (self.namespace is None or meta.get("namespace") == self.namespace)
            and (self.name is None or meta.get("name") == self.name)
            and self.selects(obj)
        )

    def translate(self, kind: str, obj: Obj, old: Obj | None) -> dict[str, Any] | None:
        """The event this watcher sees; a change across its selector is ADDED/DELETED, like the watch cache."""
        now, before = self.wants(obj), self.wants(old)
        if kind == "MODIFIED" and now != before:
            kind = "ADDED" if now else "DELETED"
        elif not now:
            return None
        return {"type": kind, "object": obj}


@attrs.define(eq=False)
class Fault:
    """`count` more requests matching `verb`/`plural` (None: any) fail with `status`."""

    count: int
    status: int
    verb: str | None
    plural: str | None


@attrs.define(eq=False)
class Delay:
    """The next request matching `verb`/`plural`/`subresource` is served, and its answer held `seconds`."""

    seconds: float
    verb: str | None
    plural: str | None
    subresource: str | None


@attrs.define(kw_only=True)
class ApiServerEmulator(kmock.KubernetesEmulator):
    """The emulator served by tests/support/clusters/kube.py; see the module docstring for what it adds."""

    history_limit: int = 10_000  # watch events kept for resumption; older resume points get 410 Gone

    _resource_version: int = attrs.field(default=0, init=False)
    _history: deque = attrs.field(factory=deque, init=False)  # (rv, resource, type, object, old object)
    _history_floor: int = attrs.field(default=0, init=False)  # resuming from below this is 410 Gone
    _watchers: set = attrs.field(factory=set, init=False)
    _faults: list = attrs.field(factory=list, init=False)
    _delays: list = attrs.field(factory=list, init=False)
    _applied: dict = attrs.field(factory=dict, init=False)  # (key, field manager) -> last applied object
    _custom: set = attrs.field(factory=set, init=False)  # resources defined by CRDs
    _scale_paths: dict = attrs.field(factory=dict, init=False)  # resource -> (spec, status, selector) paths

    # ----------------------------------------------------------------------------------- resources

    def add_crd(self, crd: Obj) -> None:
        """Serve every version of a CustomResourceDefinition and store the CRD object itself."""
        spec, names = crd["spec"], crd["spec"]["names"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            resource = kmock.resource(spec["group"], version["name"], names["plural"])
            subresources = version.get("subresources") or {}
            self.resources[resource] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular") or names["kind"].lower(),
                namespaced=spec["scope"] == "Namespaced",
                verbs={"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"},
                shortnames=set(names.get("shortNames", [])),
                categories=set(names.get("categories", [])),
                subresources=set(subresources),
            )
            self._custom.add(resource)
            if "scale" in subresources:
                scale = subresources["scale"]
                self._scale_paths[resource] = (
                    scale["specReplicasPath"],
                    scale["statusReplicasPath"],
                    scale.get("labelSelectorPath"),
                )
        crds = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        created = self.create_object(crds, crd)
        # Established at once, as a real API server reports it once it serves the kinds (the operator's
        # discovery reads that condition).
        established = {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}
        self._write(crds, created, {**created, "status": {"conditions": [established]}}, "status")

    def resource_for(self, api_version: str, kind: str) -> kmock.resource:
        group, _, version = api_version.rpartition("/")
        for resource in self.resources:
            if (resource.group, resource.version) == (group, version) and self.resources[resource].kind == kind:
                return resource
        raise api_error(404, "NotFound", f"the server doesn't have a resource type {kind!r} in {api_version!r}")

    # ------------------------------------------------------------------------------ fault injection

    def fail_next(self, count: int = 1, *, status: int = 500, verb: str | None = None,
                  plural: str | None = None) -> None:
        """Make the next `count` requests (optionally only of one verb and/or resource plural) fail."""
        self._faults.append(Fault(count, status, verb, plural))

    def delay_next(self, seconds: float, *, verb: str | None = None, plural: str | None = None,
                   subresource: str | None = None) -> None:
        """Serve the next matching request at once (a write is stored and watched) but answer it `seconds` later:
        the client is still waiting while others already see what it wrote."""
        self._delays.append(Delay(seconds, verb, plural, subresource))

    def drop_watches(self) -> int:
        """Cut every open watch connection (as a load balancer does); returns how many were open."""
        for watcher in self._watchers:
            watcher.queue.put_nowait(_DROP)
        return len(self._watchers)

    def compact(self) -> None:
        """Forget the watch history, as etcd compaction does: resuming from any older version is 410 Gone."""
        self._history.clear()
        self._history_floor = self._resource_version

    @property
    def open_watches(self) -> int:
        return len(self._watchers)

    @property
    def resource_version(self) -> int:
        return self._resource_version

    # ----------------------------------------------------------------------------- store internals

    def _live(self, key: Key) -> Obj | None:
        if key in self.objects and not self.objects[key].deleted:
            return self.objects[key].raw
        return None

    def _live_items(self, resource: kmock.resource | None = None) -> Iterator[tuple[Key, Obj]]:
        for key, stored in list(self.objects.items()):
            if not stored.deleted and (resource is None or key[0] == resource):
                yield key, stored.raw

    def _next_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)

    def _publish(self, resource: kmock.resource, kind: str, obj: Obj, old: Obj | None = None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._history.append((rv, resource, kind, obj, old))
        while len(self._history) > self.history_limit:
            self._history_floor = self._history.popleft()[0]
        for watcher in self._watchers:
            if watcher.resource == resource and (event := watcher.translate(kind, obj, old)):
                watcher.queue.put_nowait(event)

    def _has_status(self, resource: kmock.resource) -> bool:
        return "status" in self.resources[resource].subresources

    def _identity(self, resource: kmock.resource) -> tuple[str, str]:
        info = self.resources[resource]
        api_version = f"{resource.group}/{resource.version}" if resource.group else resource.version
        return api_version, info.kind or resource.plural.capitalize()

    def _spec_part(self, resource: kmock.resource, obj: Mapping[str, Any]) -> Obj:
        """What metadata.generation counts: everything but metadata (and status, when a subresource)."""
        ignored = {"metadata", "apiVersion", "kind"} | ({"status"} if self._has_status(resource) else set())
        return {key: value for key, value in obj.items() if key not in ignored}

    # --------------------------------------------------------------------------------- store verbs
    # Synchronous on purpose: with no await inside, each verb is atomic on the server's event loop.

    def create_object(self, resource: kmock.resource, body: Mapping[str, Any], namespace: str | None = None) -> Obj:
        if not isinstance(body, Mapping):
            raise api_error(400, "BadRequest", "the request body must be an object")
        obj = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        namespaced = bool(self.resources[resource].namespaced)
        if namespaced:
            namespace = namespace or meta.get("namespace")
            if not namespace:
                raise api_error(400, "BadRequest", "a namespaced object needs metadata.namespace")
            if meta.get("namespace", namespace) != namespace:
                raise api_error(400, "BadRequest", "the namespace of the provided object does not match "
                                                   "the namespace sent on the request")
            meta["namespace"] = namespace
        else:
            namespace = None
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_SUFFIX_ALPHABET, k=5))
        if not meta.get("name"):
            raise api_error(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        key: Key = (resource, namespace, meta["name"])
        if self._live(key) is not None:
            raise api_error(409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists',
                            name=meta["name"], kind=resource.plural)
        obj["apiVersion"], obj["kind"] = self._identity(resource)
        for server_owned in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(server_owned, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1,
                    resourceVersion=self._next_version())
        if self._has_status(resource):
            obj.pop("status", None)
        if key in self.objects:
            self.objects[key].create(obj)  # a re-creation continues the kmock history of that name
        else:
            self.objects[key] = obj
        self._publish(resource, "ADDED", obj)
        return obj

    def get_object(self, resource: kmock.resource, namespace: str | None, name: str) -> Obj:
        obj = self._live((resource, namespace, name))
        if obj is None:
            group = f".{resource.group}" if resource.group else ""
            raise api_error(404, "NotFound", f'{resource.plural}{group} "{name}" not found',
                            name=name, group=resource.group, kind=resource.plural)
        return obj

    def list_objects(self, resource: kmock.resource, namespace: str | None = None,
                     selects: Matcher = lambda obj: True) -> list[Obj]:
        return [obj for (_, ns, _), obj in self._live_items(resource)
                if (namespace is None or ns == namespace) and selects(obj)]

    def update_object(self, resource: kmock.resource, namespace: str | None, name: str, body: Mapping[str, Any],
                      subresource: str | None = None, *, require_version: bool = True) -> Obj:
        """Replace (PUT) the object, its status or its scale."""
        current = self.get_object(resource, namespace, name)
        if not isinstance(body, Mapping):
            raise api_error(400, "BadRequest", "the request body must be an object")
        sent_version = (body.get("metadata") or {}).get("resourceVersion")
        if require_version and not sent_version and subresource != "scale":
            raise api_error(422, "Invalid", "metadata.resourceVersion: Invalid value: 0x0: "
                                            "must be specified for an update")
        return self._write(resource, current, dict(body), subresource)

    def patch_object(self, resource: kmock.resource, namespace: str | None, name: str, patch: Any,
                     content_type: str = MERGE_PATCH, subresource: str | None = None,
                     field_manager: str | None = None) -> Obj:
        key: Key = (resource, namespace, name)
        if content_type == APPLY_PATCH:
            if not field_manager:
                raise api_error(400, "BadRequest", "PATCH with apply requires fieldManager")
            if not isinstance(patch, Mapping):
                raise api_error(400, "BadRequest", "an apply patch must be an object")
            if self._live(key) is None and subresource is None:
                created = self.create_object(resource, patch, namespace)
                self._applied[key, field_manager] = copy.deepcopy(dict(patch))
                return created
        if content_type == STRATEGIC_PATCH and resource in self._custom:
            raise api_error(415, "UnsupportedMediaType", "strategic merge patch is not supported for custom "
                                                         "resources (as on the API server)")
        current = self.get_object(resource, namespace, name)
        base = self._scale_of(resource, current) if subresource == "scale" else current
        if content_type == JSON_PATCH:
            if not isinstance(patch, list):
                raise api_error(400, "BadRequest",
                                "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
            try:
                result = jsonpatch.apply_patch(copy.deepcopy(base), patch)
            except jsonpatch.JsonPatchTestFailed as error:
                raise api_error(422, "Invalid",
                                f"the server rejected our request due to an error in our request: {error}") from None
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
                raise api_error(422, "Invalid", f"json patch could not be applied: {error}") from None
        elif content_type == STRATEGIC_PATCH:
            if not isinstance(patch, Mapping):
                raise api_error(400, "BadRequest", "a strategic merge patch must be an object")
            _, kind = self._identity(resource)
            result = strategic_merge(base, patch, schema_for(resource.group, resource.version, kind))
        elif content_type in (MERGE_PATCH, APPLY_PATCH):
            if not isinstance(patch, Mapping):
                raise api_error(400, "BadRequest", "a merge patch must be an object")
            result = base
            if content_type == APPLY_PATCH:
                result = _remove_unapplied(base, self._applied.get((key, field_manager), {}), patch)
                merged = _apply_owner_references(result, patch)  # (a refusal records nothing)
                self._applied[key, field_manager] = copy.deepcopy(dict(patch))
                patch = merged
            result = merge_patch(result, patch)
        else:
            raise api_error(415, "UnsupportedMediaType", f"the body of the request was in an unknown format "
                                                         f"- accepted media types include: {JSON_PATCH}, "
                                                         f"{MERGE_PATCH}, {STRATEGIC_PATCH}, {APPLY_PATCH}")
        return self._write(resource, current, result, subresource)

    def delete_object(self, resource: kmock.resource, namespace: str | None, name: str,
                      options: Mapping[str, Any] | None = None) -> Obj:
        options = options or {}
        current = self.get_object(resource, namespace, name)
        meta = current["metadata"]
        preconditions = options.get("preconditions") or {}
        for field in ("uid", "resourceVersion"):
            if preconditions.get(field) and preconditions[field] != meta.get(field):
                raise api_error(409, "Conflict", f"Precondition failed: {field} in precondition: "
                                                 f"{preconditions[field]}, {field} in object meta: {meta.get(field)}")
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return current
            marked = copy.deepcopy(current)
            marked["metadata"].update(deletionTimestamp=_now(), deletionGracePeriodSeconds=0,
                                      resourceVersion=self._next_version())
            self.objects[resource, namespace, name].create(marked)
            self._publish(resource, "MODIFIED", marked, current)
            return marked
        return self._remove(resource, current, options.get("propagationPolicy") or "Background")

    def _write(self, resource: kmock.resource, current: Obj, result: Obj, subresource: str | None) -> Obj:
        """Store the new state of an existing object with the API server's rules for server-owned fields."""
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in result:
                new["status"] = result["status"]
            else:
                new.pop("status", None)
        elif subresource == "scale":
            spec_path = self._scale_paths[resource][0]
            new = copy.deepcopy(current)
            _set_path(new, spec_path, (result.get("spec") or {}).get("replicas"))
        elif subresource is None:
            new = copy.deepcopy(result)
            if self._has_status(resource):
                new.pop("status", None)
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
        else:
            raise api_error(404, "NotFound", f"the server could not find the requested resource ({subresource})")

        old_meta, meta = current["metadata"], new.setdefault("metadata", {})
        sent_version = (result.get("metadata") or {}).get("resourceVersion")
        if sent_version and sent_version != old_meta["resourceVersion"]:
            raise api_error(409, "Conflict", f'Operation cannot be fulfilled on {resource.plural} '
                                             f'"{old_meta["name"]}": the object has been modified; please apply '
                                             f'your changes to the latest version and try again',
                            name=old_meta["name"], kind=resource.plural)
        for server_owned in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                             "deletionGracePeriodSeconds", "generation", "resourceVersion"):
            if server_owned in old_meta:
                meta[server_owned] = old_meta[server_owned]
            else:
                meta.pop(server_owned, None)
        new["apiVersion"], new["kind"] = current["apiVersion"], current["kind"]
        if old_meta.get("deletionTimestamp"):
            new_finalizers = set(meta.get("finalizers") or [])
            if new_finalizers - set(old_meta.get("finalizers") or []):
                raise api_error(422, "Invalid", "metadata.finalizers: Forbidden: no new finalizers can be added "
                                                "if the object is being deleted")

        if new == current:
            return current  # a no-op write: same resourceVersion, no event
        if self._spec_part(resource, new) != self._spec_part(resource, current):
            meta["generation"] = old_meta.get("generation", 1) + 1
        meta["resourceVersion"] = self._next_version()
        namespace = old_meta.get("namespace") if self.resources[resource].namespaced else None
        self.objects[resource, namespace, old_meta["name"]].create(new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(resource, new, "Background")
        self._publish(resource, "MODIFIED", new, current)
        return new

    def _remove(self, resource: kmock.resource, current: Obj, propagation: str) -> Obj:
        """Really delete, then emulate the kube-controller-manager's garbage collector (see module doc)."""
        meta = current["metadata"]
        final = copy.deepcopy(current)
        final["metadata"]["resourceVersion"] = self._next_version()
        key: Key = (resource, meta.get("namespace") if self.resources[resource].namespaced else None, meta["name"])
        self.objects[key].delete()
        for applied_key in [k for k in self._applied if k[0] == key]:
            del self._applied[applied_key]
        self._publish(resource, "DELETED", final, current)
        self._collect_dependents(meta["uid"], orphan=propagation == "Orphan")
        return final

    def _collect_dependents(self, owner_uid: str, *, orphan: bool) -> None:
        live_uids = {obj["metadata"]["uid"] for _, obj in self._live_items()}
        for (resource, namespace, name), obj in list(self._live_items()):
            references = obj["metadata"].get("ownerReferences") or []
            if not any(ref.get("uid") == owner_uid for ref in references):
                continue
            if self._live((resource, namespace, name)) is None:
                continue  # already collected through another owner in this same sweep
            alive = [ref for ref in references if ref.get("uid") in live_uids]
            if orphan:
                kept = [ref for ref in references if ref.get("uid") != owner_uid]
            elif alive:
                kept = alive  # another owner lives: only the dangling references go
            else:
                self.delete_object(resource, namespace, name)
                continue
            new = copy.deepcopy(obj)
            new["metadata"]["ownerReferences"] = kept
            if not kept:
                del new["metadata"]["ownerReferences"]
            self._write(resource, obj, new, None)

    def _scale_of(self, resource: kmock.resource, obj: Obj) -> Obj:
        if resource not in self._scale_paths:
            raise api_error(404, "NotFound", "the server could not find the requested resource (scale)")
        spec_path, status_path, selector_path = self._scale_paths[resource]
        meta = obj["metadata"]
        status = {"replicas": _get_path(obj, status_path) or 0}
        if selector_path and _get_path(obj, selector_path) is not None:
            status["selector"] = _get_path(obj, selector_path)
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": _get_path(obj, spec_path) or 0},
            "status": status,
        }

    # ----------------------------------------------------------------------------------------- HTTP

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        try:
            parsing.parse_path(raw_request.path)
        except ValueError:
            # kmock 0.8's path parser fails on /api/v1/namespaces (the namespace list); we parse paths
            # ourselves, so log the request without kmock's K8s fields and serve it.
            request = rendering.Request(
                id=len(self._requests), raw_request=raw_request, url=raw_request.url, method=raw_request.method,
                params=dict(raw_request.query), headers=dict(raw_request.headers), body=await raw_request.read(),
            )
            self._requests.append(request)
            try:
                return await self._handle(request)
            except Exception as error:
                return await self._render_error(error)
        return await super().__call__(raw_request)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        target = self._target(request)
        verb = self._verb(request, target)
        self._inject_fault(verb, target)
        if target is None:
            # Discovery and anything else: kmock's own reactions, minus KubernetesEmulator's object
            # handling, which is replaced here (RawHandler._handle dispatches to the registered payloads).
            return await apps.RawHandler._handle(self, request)
        if request.params.get("dryRun"):
            raise api_error(400, "BadRequest", "dryRun is not supported by the test API server")
        if verb == "watch":
            return await self._serve_watch_stream(request, target)
        status, payload = self._serve_object(request, target, verb)
        delay = next((d for d in self._delays if d.verb in (None, verb) and d.plural in (None, target.resource.plural)
                      and d.subresource in (None, target.subresource)), None)
        if delay is not None:
            self._delays.remove(delay)
            await asyncio.sleep(delay.seconds)
        return aiohttp.web.json_response(payload, status=status)

    def _target(self, request: rendering.Request) -> Target | None:
        """Parse /api/v1/... and /apis/G/V/... paths that name a known resource; None for the rest."""
        segments = [segment for segment in request.url.path.split("/") if segment]
        if segments[:1] == ["api"] and len(segments) >= 3:
            group, version, rest = "", segments[1], segments[2:]
        elif segments[:1] == ["apis"] and len(segments) >= 4:
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            return None
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            nested = kmock.resource(group, version, rest[2])
            if nested in self.resources and self.resources[nested].namespaced:
                namespace, rest = rest[1], rest[2:]
        resource = kmock.resource(group, version, rest[0])
        if resource not in self.resources:
            raise api_error(404, "NotFound", "the server could not find the requested resource")
        info = self.resources[resource]
        if bool(info.namespaced) != (namespace is not None) and len(rest) > 1:
            raise api_error(404, "NotFound", "the server could not find the requested resource")
        return Target(resource, info, namespace, rest[1] if len(rest) > 1 else None,
                      "/".join(rest[2:]) or None)

    @staticmethod
    def _verb(request: rendering.Request, target: Target | None) -> str:
        method = request.method.value.upper()
        named = target is not None and target.name is not None
        if method == "GET":
            if request.params.get("watch", "").lower() in ("true", "1"):
                return "watch"
            return "get" if named else "list"
        verbs = {("POST", False): "create", ("PUT", True): "update", ("PATCH", True): "patch",
                 ("DELETE", True): "delete", ("DELETE", False): "deletecollection"}
        return verbs.get((method, named), method.lower())

    def _inject_fault(self, verb: str, target: Target | None) -> None:
        for fault in self._faults:
            if fault.count > 0 and fault.verb in (None, verb) and (
                    fault.plural is None or (target is not None and target.resource.plural == fault.plural)):
                fault.count -= 1
                raise api_error(fault.status, "InternalError" if fault.status >= 500 else "BadRequest",
                                f"injected by the test (fail_next): {verb}")
        self._faults[:] = [fault for fault in self._faults if fault.count > 0]

    def _selection(self, request: rendering.Request, target: Target) -> Matcher:
        custom = target.resource in self._custom
        try:
            labels = label_matcher(request.params.get("labelSelector"))
            fields = field_matcher(
                request.params.get("fieldSelector"),
                # Custom resources support only these two field labels (without selectableFields).
                allowed=lambda path: not custom or path in ("metadata.name", "metadata.namespace"),
            )
        except SelectorError as error:
            raise api_error(400, "BadRequest", str(error)) from None
        return lambda obj: labels(obj) and fields(obj)

    def _serve_object(self, request: rendering.Request, target: Target, verb: str) -> tuple[int, Any]:
        resource, namespace, name, subresource = target.resource, target.namespace, target.name, target.subresource
        if subresource and subresource not in target.info.subresources:
            raise api_error(404, "NotFound", "the server could not find the requested resource")
        body = _body(request)
        if verb == "get":
            obj = self.get_object(resource, namespace, name)
            return 200, self._scale_of(resource, obj) if subresource == "scale" else obj
        if verb == "list":
            api_version, kind = self._identity(resource)
            items = self.list_objects(resource, namespace, self._selection(request, target))
            return 200, {"apiVersion": api_version, "kind": f"{kind}List",
                         "metadata": {"resourceVersion": str(self._resource_version)}, "items": items}
        if verb == "create":
            return 201, self.create_object(resource, body, namespace)
        if verb == "update":
            obj = self.update_object(resource, namespace, name, body, subresource)
            return 200, self._scale_of(resource, obj) if subresource == "scale" else obj
        if verb == "patch":
            content_type = request.headers.get("Content-Type", MERGE_PATCH).split(";")[0].strip().lower()
            existed = self._live(target.key) is not None
            obj = self.patch_object(resource, namespace, name, body, content_type, subresource,
                                    request.params.get("fieldManager"))
            if subresource == "scale":
                return 200, self._scale_of(resource, obj)
            return (200 if existed else 201), obj
        if verb == "delete":
            return 200, self.delete_object(resource, namespace, name, _delete_options(request, body))
        if verb == "deletecollection":
            selected = self.list_objects(resource, namespace, self._selection(request, target))
            for obj in selected:
                if self._live((resource, namespace if namespace else obj["metadata"].get("namespace"),
                               obj["metadata"]["name"])) is not None:
                    self.delete_object(resource, obj["metadata"].get("namespace"), obj["metadata"]["name"],
                                       _delete_options(request, body))
            api_version, kind = self._identity(resource)
            return 200, {"apiVersion": api_version, "kind": f"{kind}List",
                         "metadata": {"resourceVersion": str(self._resource_version)}, "items": selected}
        raise api_error(405, "MethodNotAllowed", f"{verb} is not supported on {resource.plural}")

    async def _serve_watch_stream(self, request: rendering.Request, target: Target) -> aiohttp.web.StreamResponse:
        params = request.params
        since = params.get("resourceVersion") or ""
        selects = self._selection(request, target)
        watcher = Watcher(target.resource, target.namespace, target.name, selects)
        # Snapshot and subscribe with no await in between, so no event falls in a gap.
        if params.get("sendInitialEvents") == "true" or since in ("", "0"):
            backlog = [{"type": "ADDED", "object": obj} for obj in
                       sorted((obj for obj in self.list_objects(target.resource) if watcher.wants(obj)),
                              key=lambda obj: int(obj["metadata"]["resourceVersion"]))]
            if params.get("sendInitialEvents") == "true":
                api_version, kind = self._identity(target.resource)
                backlog.append({"type": "BOOKMARK", "object": {
                    "apiVersion": api_version, "kind": kind,
                    "metadata": {"resourceVersion": str(self._resource_version),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}})
        elif not since.isdigit():
            raise api_error(400, "BadRequest", f"invalid resourceVersion: {since!r}")
        elif int(since) < self._history_floor:
            backlog = [{"type": "ERROR", "object": {
                "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "reason": "Expired",
                "code": 410, "message": f"too old resource version: {since} ({self._history_floor})"}}]
            watcher = None
        else:
            backlog = [event for rv, resource, kind, obj, old in self._history
                       if rv > int(since) and resource == target.resource
                       and (event := watcher.translate(kind, obj, old))]
        if watcher is not None:
            self._watchers.add(watcher)

        response = aiohttp.web.StreamResponse(status=200)
        response.content_type = "application/json"
        raw = request._raw_request
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        try:
            await response.prepare(raw)
            for event in backlog:
                await response.write(json.dumps(event).encode() + b"\n")
            while watcher is not None:
                remaining = 1.0 if deadline is None else min(1.0, deadline - loop.time())
                if remaining <= 0:
                    break  # server-side timeoutSeconds: end the stream cleanly
                try:
                    event = await asyncio.wait_for(watcher.queue.get(), remaining)
                except TimeoutError:
                    if raw.transport is None or raw.transport.is_closing():
                        break  # the client went away
                    continue
                if event is _DROP:
                    raw.transport.abort()  # an abrupt cut, not a clean end of stream
                    return response
                await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client disconnected while we wrote
        finally:
            self._watchers.discard(watcher)
        return response


def _body(request: rendering.Request) -> Any:
    if not request.body:
        return None
    try:
        return json.loads(request.body)
    except ValueError:
        try:
            return yaml.safe_load(request.body)  # apply patches may come as YAML
        except yaml.YAMLError:
            raise api_error(400, "BadRequest", "the request body is neither JSON nor YAML") from None


def _delete_options(request: rendering.Request, body: Any) -> dict[str, Any]:
    options = dict(body) if isinstance(body, Mapping) else {}
    if request.params.get("propagationPolicy"):
        options["propagationPolicy"] = request.params["propagationPolicy"]
    return options


def _get_path(obj: Mapping[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.strip(".").split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.strip(".").split(".")
    for part in parents:
        obj = obj.setdefault(part, {})
    obj[leaf] = value
