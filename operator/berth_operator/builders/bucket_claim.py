"""The COSI BucketClaim created from spec.config.storage.objectStorage.bucketClass (docs/upstream.md#cosi-resources);
the one the spec names (bucketClaim) or the class looked up (missing), and the bucket's readiness (waiting)."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import names
from .checks import Found, Reader, status
from .context import ClusterFacts
from .meta import data_meta
from .problems import Problem

COSI_API_VERSION = "objectstorage.k8s.io/v1alpha1"


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    object_storage = reg.spec.config.storage.object_storage
    if object_storage is None or object_storage.bucket_class is None:
        return None
    return {
        "apiVersion": COSI_API_VERSION,
        "kind": "BucketClaim",
        "metadata": data_meta(reg, names.bucket_claim_name(reg), names.STORAGE_COMPONENT,
                              object_storage.deletion_policy),
        "spec": {"bucketClassName": object_storage.bucket_class, "protocols": ["S3"]},
    }


def claim_name(reg: Registry) -> str | None:
    """The BucketClaim the registry's bucket comes from: the one named in the spec, or the one created here."""
    object_storage = reg.spec.config.storage.object_storage
    if object_storage is None:
        return None
    return object_storage.bucket_claim or names.bucket_claim_name(reg)


def missing(reader: Reader, reg: Registry) -> Found:
    """The claim the spec names, or the class to make one from."""
    obj, namespace = reg.spec.config.storage.object_storage, names.namespace(reg)
    found: list[Problem] = []
    if obj is None:
        return Found()
    if obj.bucket_claim and reader.get(COSI_API_VERSION, "BucketClaim", namespace, obj.bucket_claim) is None:
        found.append(Problem(
            "MissingBucketClaim",
            f"BucketClaim {obj.bucket_claim} (spec.config.storage.objectStorage.bucketClaim) not found "
            f"in namespace {namespace}",
        ))
    if obj.bucket_class and reader.class_missing(COSI_API_VERSION, "BucketClass", obj.bucket_class):
        found.append(Problem(
            "MissingBucketClass",
            f"BucketClass {obj.bucket_class} (spec.config.storage.objectStorage.bucketClass) not found",
        ))
    return Found(found)


def waiting(reader: Reader, reg: Registry) -> list[Problem]:
    name = claim_name(reg)
    if name is None:
        return []
    claim = reader.get(COSI_API_VERSION, "BucketClaim", names.namespace(reg), name)
    # v1alpha1 says bucketReady; v1alpha2 readyToUse (docs/upstream.md#cosi-resources)
    if claim is not None and not (status(claim).get("bucketReady") or status(claim).get("readyToUse")):
        return [Problem("WaitingForBucket", f"BucketClaim {name} is not ready yet")]
    return []
