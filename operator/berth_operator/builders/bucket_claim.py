"""The COSI BucketClaim created from spec.config.storage.objectStorage.bucketClass (docs/upstream.md#cosi-resources);
the one the spec names (bucketClaim) or the class looked up (missing), and the bucket's readiness (waiting)."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from .behaviour import Behaviour
from .checks import Checks, Found, Problem, Reader, status
from .context import ClusterFacts
from .meta import STORAGE_COMPONENT, data_meta, namespace, registry_name

COSI_API_VERSION = "objectstorage.k8s.io/v1alpha1"
OBJECT_STORAGE = "spec.config.storage.objectStorage"


def name(reg: Registry) -> str:
    return f"{registry_name(reg)}-bucket"


def object_storage_fields(reg: Registry) -> tuple[str, ...]:
    """The field that needs COSI's claims and accesses (a Registry on object storage names or makes both)."""
    return (OBJECT_STORAGE,) if reg.spec.config.storage.object_storage is not None else ()


def bucket_class_fields(reg: Registry) -> tuple[str, ...]:
    obj = reg.spec.config.storage.object_storage
    return (f"{OBJECT_STORAGE}.bucketClass",) if obj is not None and obj.bucket_class else ()


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    object_storage = reg.spec.config.storage.object_storage
    if object_storage is None or object_storage.bucket_class is None:
        return None
    return {
        "apiVersion": COSI_API_VERSION,
        "kind": "BucketClaim",
        "metadata": data_meta(reg, name(reg), STORAGE_COMPONENT, object_storage.deletion_policy),
        "spec": {"bucketClassName": object_storage.bucket_class, "protocols": ["S3"]},
    }


def claim_name(reg: Registry) -> str | None:
    """The BucketClaim the registry's bucket comes from: the one named in the spec, or the one created here."""
    object_storage = reg.spec.config.storage.object_storage
    if object_storage is None:
        return None
    return object_storage.bucket_claim or name(reg)


def missing(reader: Reader, reg: Registry) -> Found:
    """The claim the spec names, or the class to make one from."""
    obj, ns = reg.spec.config.storage.object_storage, namespace(reg)
    found: list[Problem] = []
    if obj is None:
        return Found()
    if obj.bucket_claim and reader.get(COSI_API_VERSION, "BucketClaim", ns, obj.bucket_claim) is None:
        found.append(Problem(
            "MissingBucketClaim",
            f"BucketClaim {obj.bucket_claim} (spec.config.storage.objectStorage.bucketClaim) not found "
            f"in namespace {ns}",
        ))
    if obj.bucket_class and reader.class_missing(COSI_API_VERSION, "BucketClass", obj.bucket_class):
        found.append(Problem(
            "MissingBucketClass",
            f"BucketClass {obj.bucket_class} (spec.config.storage.objectStorage.bucketClass) not found",
        ))
    return Found(found)


def waiting(reader: Reader, reg: Registry) -> list[Problem]:
    named = claim_name(reg)
    if named is None:
        return []
    claim = reader.get(COSI_API_VERSION, "BucketClaim", namespace(reg), named)
    # v1alpha1 says bucketReady; v1alpha2 readyToUse (docs/upstream.md#cosi-resources)
    if claim is not None and not (status(claim).get("bucketReady") or status(claim).get("readyToUse")):
        return [Problem("WaitingForBucket", f"BucketClaim {named} is not ready yet")]
    return []


# The claim holds data: created, never applied or pruned (it goes with its Registry, by its owner reference). The
# class it is made from is the admin's, read only.
BEHAVIOURS = (
    Behaviour(COSI_API_VERSION, "BucketClaim", builders=(build,), needed_by=object_storage_fields,
              checks=Checks(missing, waiting)),
    Behaviour(COSI_API_VERSION, "BucketClass", needed_by=bucket_class_fields),
)
