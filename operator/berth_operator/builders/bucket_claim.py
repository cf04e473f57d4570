"""The COSI BucketClaim created from spec.config.storage.objectStorage.bucketClass (field-notes section 2)."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import names
from .context import ClusterFacts
from .meta import object_meta

COSI_API_VERSION = "objectstorage.k8s.io/v1alpha1"


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    object_storage = reg.spec.config.storage.object_storage
    if object_storage is None or object_storage.bucket_class is None:
        return None
    return {
        "apiVersion": COSI_API_VERSION,
        "kind": "BucketClaim",
        "metadata": object_meta(reg, names.bucket_claim_name(reg), names.STORAGE_COMPONENT),
        "spec": {"bucketClassName": object_storage.bucket_class, "protocols": ["S3"]},
    }


def claim_name(reg: Registry) -> str | None:
    """The BucketClaim the registry's bucket comes from: the one named in the spec, or the one created here."""
    object_storage = reg.spec.config.storage.object_storage
    if object_storage is None:
        return None
    return object_storage.bucket_claim or names.bucket_claim_name(reg)
