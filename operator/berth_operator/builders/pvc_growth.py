"""Volume expansion, the PersistentVolumeClaim's grow hook (checks.Grow, in pvc.py's behaviour): a larger
spec.config.storage.filesystem.size grows the claim Berth created.

Claims are otherwise create-only (engine/apply.py): this is the one field of a live PersistentVolumeClaim the
operator changes, and only
- on the claim it created from storageClass and controls (a claim named in persistentVolumeClaim belongs
  to the user and is never patched; `size` does not apply to it),
- upwards (Kubernetes never shrinks a claim: a smaller size is Degraded, VolumeShrinkRefused),
- when the claim's StorageClass sets allowVolumeExpansion (otherwise Degraded, VolumeExpansionNotAllowed).
The resize itself is the cluster's: the claim's conditions Resizing and FileSystemResizePending show as
Progressing until the kubelet has grown the file system. The pod template never names the size, so a size
edit never changes the Deployment.

Pure: decide() and resize_progress() read what they are given, plan() reads the claim's StorageClass through the
Reader; engine/expansion.py reads the claim and writes the patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.utils import parse_quantity

from berth_api import Registry

from .checks import Growth, Problem, Reader
from .meta import made_for

SIZE_FIELD = "spec.config.storage.filesystem.size"
# PersistentVolumeClaim condition -> (Progressing reason, what it means).
RESIZE_CONDITIONS = {
    "Resizing": ("ResizingPVC", "the volume is being resized"),
    "FileSystemResizePending": ("WaitingForFileSystemResize",
                                "the volume grew; the kubelet grows the file system next"),
}


@dataclass(frozen=True)
class Decision:
    grow_to: str | None = None  # the size to patch spec.resources.requests.storage to
    findings: tuple[Problem, ...] = field(default_factory=tuple)


def _requested(claim: Mapping[str, Any]) -> str | None:
    return (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")


def resize_progress(claim: Mapping[str, Any]) -> list[Problem]:
    """Progressing findings from the claim's resize conditions (any claim: reading is harmless)."""
    name = (claim.get("metadata") or {}).get("name")
    found = []
    for cond in (claim.get("status") or {}).get("conditions") or ():
        known = RESIZE_CONDITIONS.get(cond.get("type"))
        if known and cond.get("status") == "True":
            reason, meaning = known
            found.append(Problem(reason, f"PersistentVolumeClaim {name}: {meaning} "
                                         f"(to {_requested(claim)}; condition {cond['type']})"))
    capacity = ((claim.get("status") or {}).get("capacity") or {}).get("storage")
    if not found and capacity and _smaller(capacity, _requested(claim)):
        found.append(Problem("ResizingPVC", f"PersistentVolumeClaim {name}: capacity {capacity}, "
                                            f"requested {_requested(claim)}"))
    return found


def _smaller(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) < parse_quantity(b)
    except (ValueError, TypeError, ArithmeticError):
        return False


def decide(claim: Mapping[str, Any], wanted: str, storage_class: Mapping[str, Any] | None,
           class_readable: bool = True) -> Decision:
    """What to do about one claim Berth created, given the wanted size and the claim's StorageClass.

    storage_class None with class_readable: the class does not exist (MissingStorageClass says so);
    class_readable False: the operator may not read it, so it tries, and the API server decides.
    """
    name = (claim.get("metadata") or {}).get("name")
    class_name = (claim.get("spec") or {}).get("storageClassName") or "(none)"
    live = _requested(claim)
    try:
        current, target = parse_quantity(live), parse_quantity(wanted)
    except (ValueError, TypeError, ArithmeticError):
        return Decision()  # a request we cannot read is not ours to rewrite
    if target == current:
        return Decision()
    if target < current:
        return Decision(findings=(Problem(
            "VolumeShrinkRefused",
            f"{SIZE_FIELD}: {wanted} is smaller than the {live} PersistentVolumeClaim {name} already requests "
            f"(StorageClass {class_name}); a claim can grow but never shrink: set {live} or more",
        ),))
    if storage_class is None and class_readable:
        return Decision()
    if storage_class is not None and storage_class.get("allowVolumeExpansion") is not True:
        return Decision(findings=(Problem(
            "VolumeExpansionNotAllowed",
            f"{SIZE_FIELD}: {wanted} needs PersistentVolumeClaim {name} to grow from {live}, but StorageClass "
            f"{class_name} does not set allowVolumeExpansion: true; the claim stays at {live}",
        ),))
    return Decision(grow_to=wanted)


def plan(reader: Reader, reg: Registry, claim: Mapping[str, Any]) -> Growth:
    """Grow the claim Berth created when spec.config.storage.filesystem.size grew; report resize progress. claim:
    the live claim the Registry's file system storage mounts (pvc.claim_name)."""
    fs = reg.spec.config.storage.filesystem
    if fs.persistent_volume_claim or not made_for(claim, reg):
        return Growth(problems=tuple(resize_progress(claim)))  # the user's claim: watched, never patched
    class_name = (claim.get("spec") or {}).get("storageClassName")
    # The class matters only for growing: decided without it first (no request when the size is unchanged).
    decision = decide(claim, fs.size, None, class_readable=False)
    if decision.grow_to is not None:
        decision = decide(claim, fs.size, *_storage_class(reader, class_name))
    if decision.grow_to is None:
        return Growth(problems=(*decision.findings, *resize_progress(claim)))
    name = (claim.get("metadata") or {}).get("name")
    return Growth(
        patch=({"op": "replace", "path": "/spec/resources/requests/storage", "value": decision.grow_to},),
        grown=Problem("ResizingPVC", f"PersistentVolumeClaim {name}: requested {decision.grow_to} "
                                     f"(was {_requested(claim)})"),
        refused=Problem("VolumeExpansionNotAllowed",
                        f"{SIZE_FIELD}: the API server refused to grow PersistentVolumeClaim {name} to "
                        f"{fs.size} (StorageClass {class_name})"),
    )


def _storage_class(reader: Reader, name: str | None) -> tuple[Mapping[str, Any] | None, bool]:
    """(the StorageClass or None, whether the operator could read it)."""
    if not name:
        return None, True
    return reader.get_class("storage.k8s.io/v1", "StorageClass", name)
