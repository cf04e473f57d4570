"""The one layer that writes the objects the builders describe: create, or patch only what differs.

- Create; on 409 (or when the object exists) compare and patch with a JSON patch (RFC 6902) that first
  tests metadata.resourceVersion (optimistic concurrency) and then replaces only the fields that differ:
  each key of `spec` the builder sets, other top-level fields (rules, subjects), each label and annotation,
  and our owner reference. Server-side apply is not used (kmock treats it as a plain merge: field-notes §6).
- "Differs" means: the builder's manifest is not contained in the live object (fields the API server
  defaults are ignored) OR its hash differs from the annotation written with the last patch (which catches
  fields the builder stopped setting). An unchanged Registry therefore makes no write at all.
- Kinds whose spec is immutable or holds data are created and never patched here: PersistentVolumeClaim,
  BucketClaim, BucketAccess, and Secrets (the generated HTTP secret is never overwritten). The one
  exception, growing the claim's storage request, is expansion.py's, with its own checks.
- Prune: objects a Registry no longer needs are deleted by name when this Registry controls them:
  the PodDisruptionBudget (replicas down to 1) and a BucketAccess the operator made. A PVC or a
  BucketClaim is NEVER pruned: they hold data (they go only with the Registry, through owner references).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

from berth_api import Registry

from .builders import names
from .client import COSI, Kube, KubeError

DESIRED_HASH_ANNOTATION = "berth.dev/desired-hash"
# A Lease's spec belongs to the agents that take it (holderIdentity, renewTime): created, never patched.
CREATE_ONLY_KINDS = frozenset({"PersistentVolumeClaim", "BucketClaim", "BucketAccess", "Secret", "Lease"})
PRUNABLE: tuple[tuple[str, str, Callable[[Registry], str]], ...] = (
    ("policy/v1", "PodDisruptionBudget", names.pdb_name),
    (COSI, "BucketAccess", names.bucket_access_name),
)
CONFLICT_RETRIES = 3


@dataclass(frozen=True)
class Action:
    """A write made: verb is Created, Updated or Deleted."""

    verb: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.verb} {self.kind} {self.name}"


class Conflict(Exception):
    """The object changed between our read and our write, CONFLICT_RETRIES times in a row."""


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


def _pointer(*parts: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def _owner_uid(manifest: Mapping[str, Any]) -> str | None:
    for ref in manifest.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref.get("uid")
    return None


def patch_ops(live: Mapping[str, Any], wanted: Mapping[str, Any], digest: str) -> list[dict[str, Any]]:
    """JSON patch turning live into something that contains wanted (pure). Empty: nothing to do.

    When the recorded hash differs from digest, every field the builder sets is replaced, not only those
    that differ: a field the builder stopped setting inside spec.template then disappears too.
    """
    recorded = ((live.get("metadata") or {}).get("annotations") or {}).get(DESIRED_HASH_ANNOTATION)
    full = recorded != digest
    ops: list[dict[str, Any]] = []
    live_meta, wanted_meta = live.get("metadata") or {}, wanted.get("metadata") or {}
    for field in ("labels", "annotations"):
        wanted_map = dict(wanted_meta.get(field) or {})
        if field == "annotations":
            wanted_map[DESIRED_HASH_ANNOTATION] = digest
        live_map = live_meta.get(field)
        if live_map is None:
            if wanted_map:
                ops.append({"op": "add", "path": _pointer("metadata", field), "value": wanted_map})
            continue
        ops += [
            {"op": "add", "path": _pointer("metadata", field, k), "value": v}
            for k, v in wanted_map.items()
            if live_map.get(k) != v
        ]
    wanted_refs = wanted_meta.get("ownerReferences") or []
    live_refs = live_meta.get("ownerReferences") or []
    if not contains(live_refs, wanted_refs):
        wanted_uids = {ref.get("uid") for ref in wanted_refs}
        others = [ref for ref in live_refs if ref.get("uid") not in wanted_uids and not ref.get("controller")]
        ops.append({"op": "add", "path": _pointer("metadata", "ownerReferences"), "value": others + wanted_refs})
    for key, value in wanted.items():
        if key in ("apiVersion", "kind", "metadata", "status"):
            continue
        if key == "spec" and isinstance(value, Mapping) and isinstance(live.get("spec"), Mapping):
            ops += [
                {"op": "add", "path": _pointer("spec", k), "value": v}
                for k, v in value.items()
                if full or k not in live["spec"] or not contains(live["spec"][k], v)
            ]
        elif full or not contains(live.get(key), value):
            ops.append({"op": "add", "path": _pointer(key), "value": value})
    return ops


def needs_write(live: Mapping[str, Any], wanted: Mapping[str, Any], digest: str) -> bool:
    recorded = ((live.get("metadata") or {}).get("annotations") or {}).get(DESIRED_HASH_ANNOTATION)
    return recorded != digest or not contains(live, {k: v for k, v in wanted.items() if k != "status"})


def apply_object(kube: Kube, wanted: Mapping[str, Any]) -> Action | None:
    """Create or patch one object; None when it was already as wanted (no write)."""
    meta = wanted["metadata"]
    api_version, kind, namespace, name = wanted["apiVersion"], wanted["kind"], meta.get("namespace"), meta["name"]
    digest = desired_hash(wanted)
    for _attempt in range(CONFLICT_RETRIES):
        live = kube.get(api_version, kind, namespace, name)
        if live is None:
            annotated = {**wanted, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}),
                                                                        DESIRED_HASH_ANNOTATION: digest}}}
            try:
                kube.create(annotated)
                return Action("Created", kind, name)
            except KubeError as exc:
                if exc.status == 409:  # created meanwhile (another reconcile): compare with it instead
                    continue
                raise
        owner = _owner_uid(live)
        if owner is not None and owner != _owner_uid(wanted):
            raise NotOurs(f"{kind} {name} exists and is controlled by another owner (uid {owner}); not touching it")
        if kind in CREATE_ONLY_KINDS or not needs_write(live, wanted, digest):
            return None
        ops = patch_ops(live, wanted, digest)
        if not ops:
            return None
        version = (live.get("metadata") or {}).get("resourceVersion")
        if version is not None:
            ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": version})
        try:
            kube.patch(api_version, kind, namespace, name, ops, json_patch=True)
            return Action("Updated", kind, name)
        except KubeError as exc:
            if exc.status in (409, 422) and version is not None:  # changed under us: read again and retry
                continue
            raise
    raise Conflict(f"{kind} {name} kept changing while being updated; the next reconcile retries")


def http_secret_value(kube: Kube, reg: Registry) -> str | None:
    """A fresh value when the generated HTTP secret is needed and does not exist yet; None otherwise.

    The existing Secret is never read for its value, nor overwritten: it stays what it was first created with,
    across reconciles and operator restarts, and every replica mounts the same one.
    """
    if reg.spec.http.secret is not None:
        return None
    if kube.get("v1", "Secret", names.namespace(reg), names.http_secret_name(reg)) is not None:
        return None
    return secrets.token_urlsafe(32)


def prune(kube: Kube, reg: Registry, built: list[Mapping[str, Any]]) -> list[Action]:
    """Delete objects of PRUNABLE kinds this Registry controls but no longer builds."""
    wanted = {(m["kind"], m["metadata"]["name"]) for m in built}
    uid = reg.metadata.get("uid")
    actions = []
    for api_version, kind, name_of in PRUNABLE:
        name = name_of(reg)
        if (kind, name) in wanted:
            continue
        live = kube.get(api_version, kind, names.namespace(reg), name)
        if live is None or _owner_uid(live) != uid:
            continue
        if kube.delete(api_version, kind, names.namespace(reg), name, uid=live["metadata"].get("uid")):
            actions.append(Action("Deleted", kind, name))
    return actions
