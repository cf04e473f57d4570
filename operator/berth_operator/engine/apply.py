"""The one layer that writes the objects the builders describe: server-side apply, only when something differs.

- Each built object is compared with the live one (from the caches, caches.py): it is written only when the
  builder's manifest is not contained in it (fields the API server defaults, and fields other managers set,
  are ignored) OR its hash differs from the annotation written with the last apply (which catches fields the
  builder stopped setting). An unchanged Registry therefore sends no request at all.
- The write is a server-side apply as the field manager `berth-operator` with force: Berth owns every field it
  sets (a hand edit of one is repaired at the next reconcile, which the edit's watch event triggers), and
  leaves every field it does not set to whoever set it. A field the builder stops setting is removed by the
  API server (it was only ours). The apply also creates a missing object.
- Kinds whose spec is immutable or holds data are created (POST) and never applied here:
  PersistentVolumeClaim, BucketClaim, BucketAccess, Secrets (the generated HTTP secret is never overwritten)
  and Leases (their spec is the agents'). The one exception, growing the claim's storage request, is
  the claim's grow hook (builders/pvc_growth.py, with its own checks), which expansion.py writes.
- An object missing from the caches is not read first: it is applied without force (a create-only kind:
  POSTed), and read only when the server refuses that (409, 422: it exists and is someone else's, or differs).
- An existing object controlled by another owner is never applied (NotOurs): force would take it over.
- A change the API server refuses in place (a kind's must_replace, builders/behaviour.py: a LoadBalancer
  Service's class, builders.service.must_replace) is made by deleting the object (by uid) and creating it again at once.
- The objects that hold data (the claims: builders/meta.data_meta) are owned by their Registry only under the
  Delete deletion policy. A change of policy, or a Registry adopting the claims a namesake left under Retain, is
  the one other change made to them in place: the owner reference (and the policy annotation) added or removed by
  a JSON patch guarded by the resourceVersion (settle_ownership). Nothing is deleted by it.
- Prune: objects a Registry no longer needs are deleted by name when this Registry controls them: those of the
  kinds whose behaviour names a prune (builders/kinds.py gathers them). The kinds that hold data (the claims) name
  none: they go only with the Registry, through owner references.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

from berth_api import Registry

from ..builders import http_secret
from ..builders.behaviour import Names
from ..builders.kinds import PRUNABLE_KINDS, behaviour
from ..builders.meta import DELETION_POLICY_ANNOTATION, made_for
from ..builders.meta import namespace as namespace_of
from ..cluster.view import Cluster
from ..core.kinds import CREATE_ONLY_KINDS
from ..kube.client import FIELD_MANAGER, KubeError

DESIRED_HASH_ANNOTATION = "berth.dev/desired-hash"
# How each kind is written (core/kinds.py): the create-only kinds are POSTed once and never patched. What is
# pruned, and how its objects are named, is each kind's behaviour (builders/kinds.py).
PRUNABLE: tuple[tuple[str, str, Names], ...] = tuple(
    (kind.api_version, kind.kind, kind.prune) for kind in PRUNABLE_KINDS if kind.prune is not None)
CONFLICT_RETRIES = 3


@dataclass(frozen=True)
class Action:
    """A write made: verb is Created, Updated, Replaced, Deleted, Owned or Retained (settle_ownership)."""

    verb: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.verb} {self.kind} {self.name}"


class Conflict(Exception):
    """The object changed between our read and our write (and the next reconcile retries)."""


class NotOurs(Exception):
    """The object exists and another controller owns it: we neither patch nor adopt it."""


def desired_hash(manifest: Mapping[str, Any]) -> str:
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _zero(value: Any) -> bool:
    """Go's zero values, which the API server leaves out of its answers (`omitempty`)."""
    return value is None or value is False or (not isinstance(value, bool) and value in (0, "", {}, []))


def _same_quantity(live: Any, wanted: Any) -> bool:
    """Resource quantities compare by value: the API server rewrites them canonically (0.5 -> 500m)."""
    try:
        return parse_quantity(live) == parse_quantity(wanted)
    except (ValueError, TypeError, ArithmeticError):
        return False


def _quantities(live: Any, wanted: Mapping[str, Any]) -> bool:
    return isinstance(live, Mapping) and all(
        k in live and (live[k] == v or _same_quantity(live[k], v)) for k, v in wanted.items()
    )


def _field_matches(live: Mapping[str, Any], key: str, wanted: Any) -> bool:
    if key not in live:
        return _zero(wanted)
    if key in ("requests", "limits") and isinstance(wanted, Mapping):
        return _quantities(live[key], wanted)
    return contains(live[key], wanted)


def contains(live: Any, wanted: Any) -> bool:
    """Whether every field of wanted is in live with the same value; lists match element by element.
    A wanted zero value (false, 0, "", {}, []) matches an absent field: the server omits them. Values under
    `requests` and `limits` are resource quantities and compare by value."""
    if isinstance(wanted, Mapping):
        return isinstance(live, Mapping) and all(_field_matches(live, k, v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(live, list) and len(live) == len(wanted) and all(map(contains, live, wanted))
    return live == wanted


def _owner_uid(manifest: Mapping[str, Any]) -> str | None:
    for ref in manifest.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref.get("uid")
    return None


def needs_write(live: Mapping[str, Any], wanted: Mapping[str, Any], digest: str) -> bool:
    recorded = ((live.get("metadata") or {}).get("annotations") or {}).get(DESIRED_HASH_ANNOTATION)
    return recorded != digest or not contains(live, {k: v for k, v in wanted.items() if k != "status"})


def replacement(live: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that replaces whole every top-level field (and key of spec) that differs (pure).

    For the one drift server-side apply cannot repair: a hand edit that changed the key of a list entry (a
    Service port's number) made that entry another manager's, and merging ours beside it is invalid (422,
    two ports named http). A merge patch replaces a list whole."""
    patch: dict[str, Any] = {"metadata": {"annotations": {DESIRED_HASH_ANNOTATION:
                                                          wanted["metadata"]["annotations"][DESIRED_HASH_ANNOTATION]}}}
    for key, value in wanted.items():
        if key in ("apiVersion", "kind", "metadata", "status"):
            continue
        if key == "spec" and isinstance(value, Mapping) and isinstance(live.get("spec"), Mapping):
            changed = {k: v for k, v in value.items() if not contains(live["spec"].get(k), v)}
            if changed:
                patch["spec"] = changed
        elif not contains(live.get(key), value):
            patch[key] = value
    return patch


def _only_ours(answer: Mapping[str, Any]) -> bool:
    """Whether no other manager wrote the object the apply answered with (it was created by that apply)."""
    entries = (answer.get("metadata") or {}).get("managedFields") or ()
    return all(entry.get("manager") == FIELD_MANAGER for entry in entries)


def _annotated(wanted: Mapping[str, Any], digest: str) -> dict[str, Any]:
    meta = wanted["metadata"]
    return {**wanted, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}),
                                                           DESIRED_HASH_ANNOTATION: digest}}}


def apply_object(cluster: Cluster, wanted: Mapping[str, Any], registry_uid: str | None = None) -> Action | None:
    """Create or apply one object; None when it was already as wanted (no write). registry_uid: the Registry's,
    whose owner reference a retained claim's wanted manifest does not carry but its live object may (Delete
    before)."""
    meta = wanted["metadata"]
    api_version, kind, namespace, name = wanted["apiVersion"], wanted["kind"], meta.get("namespace"), meta["name"]
    digest = desired_hash(wanted)
    # On a miss of the caches (no object with Berth's label) nothing is read first. A create-only kind is POSTed:
    # an object that exists without Berth's label answers 409, and is read then. Any other kind is applied
    # WITHOUT force, which creates a missing object in one request and cannot take over an existing one: a
    # field another manager set to another value is a 409, an object controlled by another owner gets a second
    # controller reference and is invalid (422), as is a list entry beside a differently keyed one of the same
    # name (422); then it is read, and decided on as below. What such an apply merges into an existing object
    # without complaint (fields nobody else set, or set to our values) is what the forced apply would adopt too.
    cached = cluster.covers(api_version, kind, namespace)
    if cached or kind in CREATE_ONLY_KINDS:
        live = cluster.get_owned(api_version, kind, namespace, name)
    else:
        live = cluster.get(api_version, kind, namespace, name)
    if live is None and (cached or kind in CREATE_ONLY_KINDS):
        try:
            if kind in CREATE_ONLY_KINDS:
                cluster.create(_annotated(wanted, digest))
                return Action("Created", kind, name)
            answer = cluster.apply(_annotated(wanted, digest), force=False)
            return Action("Created" if _only_ours(answer) else "Updated", kind, name)
        except KubeError as exc:
            if exc.status not in ((409,) if kind in CREATE_ONLY_KINDS else (403, 409, 422)):
                raise
            live = cluster.get(api_version, kind, namespace, name)  # it exists: check whose it is
            if live is None:
                if exc.status != 409:
                    raise  # nothing it could clash with: refused or invalid by itself
                raise Conflict(f"{kind} {name} exists and cannot be read; the next reconcile retries") from None
    if live is not None:
        owner = _owner_uid(live)
        if owner is not None and owner not in (_owner_uid(wanted), registry_uid):
            raise NotOurs(f"{kind} {name} exists and is controlled by another owner (uid {owner}); not touching it")
        if _holds_data(wanted):
            return settle_ownership(cluster, live, wanted, registry_uid)
        if kind in CREATE_ONLY_KINDS or not needs_write(live, wanted, digest):
            return None
        known = behaviour(api_version, kind)
        if known is not None and known.must_replace is not None and known.must_replace(live, wanted):
            return _replace(cluster, live, _annotated(wanted, digest))
    for _attempt in range(CONFLICT_RETRIES):
        try:
            cluster.apply(_annotated(wanted, digest))
            return Action("Created" if live is None else "Updated", kind, name)
        except KubeError as exc:
            if exc.status == 422 and live is not None:
                live = cluster.patch(api_version, kind, namespace, name, replacement(live, _annotated(wanted, digest)))
                if not needs_write(live, wanted, digest):
                    return Action("Updated", kind, name)
                continue  # the clash is gone, but not all of ours is there (an object made by hand: no label, no
                # owner reference, which the merge patch does not send): the forced apply adds them now
            if exc.status == 403 and live is not None and _owner_uid(live) is None:
                # Adding an owner reference to an existing object needs delete permission on it under the
                # OwnerReferencesPermissionEnforcement admission plugin, which Berth does not hold for most kinds.
                raise NotOurs(f"{kind} {name} exists without an owner reference (made by hand?) and the API server "
                              f"refused to let Berth adopt it ({exc}); delete it and Berth creates its own") from None
            if exc.status != 409:  # a forced apply conflicts on no field; a 409 is a race (two creates): again
                raise
    raise Conflict(f"{kind} {name} kept changing while being applied; the next reconcile retries")


def _holds_data(wanted: Mapping[str, Any]) -> bool:
    return DELETION_POLICY_ANNOTATION in ((wanted.get("metadata") or {}).get("annotations") or {})


def ownership_patch(live: Mapping[str, Any], wanted: Mapping[str, Any],
                    registry_uid: str | None) -> list[dict[str, Any]]:
    """The JSON patch that gives a live claim the wanted owner reference and policy annotation (pure; [] when it has
    them). Only this Registry's reference is added or removed: any other owner's entries are left as they are."""
    meta, wanted_meta = live.get("metadata") or {}, wanted["metadata"]
    refs = list(meta.get("ownerReferences") or ())
    ours = [i for i, ref in enumerate(refs) if ref.get("uid") in (registry_uid, _owner_uid(wanted)) and ref.get("uid")]
    ops: list[dict[str, Any]] = []
    if wanted_meta.get("ownerReferences") and not ours:
        ref = wanted_meta["ownerReferences"][0]
        ops.append({"op": "add", "path": "/metadata/ownerReferences/-", "value": ref} if refs else
                   {"op": "add", "path": "/metadata/ownerReferences", "value": [ref]})
    elif not wanted_meta.get("ownerReferences"):
        ops += [{"op": "remove", "path": f"/metadata/ownerReferences/{i}"} for i in reversed(ours)]
    policy = wanted_meta["annotations"][DELETION_POLICY_ANNOTATION]
    annotations = meta.get("annotations") or {}
    if annotations.get(DELETION_POLICY_ANNOTATION) != policy:
        ops.append({"op": "add", "path": "/metadata/annotations/" + DELETION_POLICY_ANNOTATION.replace("/", "~1"),
                    "value": policy} if annotations else
                   {"op": "add", "path": "/metadata/annotations", "value": {DELETION_POLICY_ANNOTATION: policy}})
    return ops


def settle_ownership(cluster: Cluster, live: Mapping[str, Any], wanted: Mapping[str, Any],
                     registry_uid: str | None) -> Action | None:
    """A claim's owner reference as its deletion policy wants it: Owned (Delete: it goes with the Registry) or
    Retained (it stays). Guarded by the resourceVersion; a conflict reads the server's object and plans again.
    Under OwnerReferencesPermissionEnforcement, changing owner references needs delete on the object (Berth's
    ClusterRole grants it on the claims for this; it never deletes one)."""
    meta = wanted["metadata"]
    api_version, kind, namespace, name = wanted["apiVersion"], wanted["kind"], meta.get("namespace"), meta["name"]
    verb = "Owned" if meta.get("ownerReferences") else "Retained"
    for attempt in range(CONFLICT_RETRIES):
        if attempt:
            live = cluster.get(api_version, kind, namespace, name, cached=False)
            if live is None:
                return None  # gone: the next reconcile creates it
        ops = ownership_patch(live, wanted, registry_uid)
        if not ops:
            return None
        version = live["metadata"].get("resourceVersion")
        try:
            cluster.patch(api_version, kind, namespace, name,
                          [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *ops],
                          json_patch=True)
        except KubeError as exc:
            if exc.status in (409, 422):
                continue
            raise
        return Action(verb, kind, name)
    raise Conflict(f"{kind} {name} kept changing while its owner reference was set; the next reconcile retries")


def _replace(cluster: Cluster, live: Mapping[str, Any], wanted: Mapping[str, Any]) -> Action:
    """Delete the live object (only that one: its uid) and create the wanted one at once, for a change the API
    server refuses in place (builders.service.must_replace). The Service is gone for the two requests between.
    Created by server-side apply, not a POST: its fields must be the Apply entry's in managedFields, or a field a
    later apply no longer sends would stay (a POST's fields belong to an Update entry, which no apply prunes)."""
    api_version, kind, meta = wanted["apiVersion"], wanted["kind"], wanted["metadata"]
    cluster.delete(api_version, kind, meta.get("namespace"), meta["name"], uid=live["metadata"].get("uid"))
    try:
        cluster.apply(wanted, force=False)
    except KubeError as exc:
        if exc.status not in (409, 422):
            raise
        still = cluster.get(api_version, kind, meta.get("namespace"), meta["name"], cached=False)
        if still is None or not (still.get("metadata") or {}).get("deletionTimestamp"):
            raise
        # Still there: a finalizer (a cloud's load-balancer cleanup) holds it until its controller lets go, and the
        # apply reached the old object, which refuses the change in place.
        raise Conflict(f"{kind} {meta['name']} is being deleted to be replaced; the next reconcile "
                       "creates it") from None
    return Action("Replaced", kind, meta["name"])


def http_secret_value(cluster: Cluster, reg: Registry) -> str | None:
    """A fresh value when the generated HTTP secret is needed and does not exist yet; None otherwise.

    The existing Secret is never read for its value, nor overwritten: it stays what it was first created with,
    across reconciles and operator restarts, and every replica mounts the same one.
    """
    if reg.spec.http.secret is not None:
        return None
    if cluster.get_owned("v1", "Secret", namespace_of(reg), http_secret.name(reg)) is not None:
        return None  # (one made by hand without Berth's label: the create below is refused 409 and not retried)
    return secrets.token_urlsafe(32)


def prune(cluster: Cluster, reg: Registry, built: list[Mapping[str, Any]],
          unserved: Collection[tuple[str, str]] = ()) -> list[Action]:
    """Delete objects of PRUNABLE kinds this Registry controls but no longer builds (a retained BucketAccess too: its
    policy is about the Registry's deletion, and a spec that stops making it revokes its access; not of the kinds
    the cluster does not serve, facts.unserved: none of one can exist, and a GET would 404 for every Registry)."""
    wanted = {(m["kind"], m["metadata"]["name"]) for m in built}
    actions = []
    for api_version, kind, name_of in PRUNABLE:
        if (api_version, kind) in unserved:
            continue
        named = name_of(reg)
        for name in (named,) if isinstance(named, str) else named:
            if (kind, name) in wanted:
                continue
            live = cluster.get_owned(api_version, kind, namespace_of(reg), name)  # this Registry's is Berth's
            if live is None or not made_for(live, reg):
                continue
            if cluster.delete(api_version, kind, namespace_of(reg), name, uid=live["metadata"].get("uid")):
                actions.append(Action("Deleted", kind, name))
    return actions
