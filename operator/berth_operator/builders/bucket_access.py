"""The COSI BucketAccess created from spec.config.storage.objectStorage.bucketAccessClass (field-notes
section 2). Its credentials Secret has a deterministic name, so the pod template can mount it at once."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import bucket_claim, names
from .context import ClusterFacts
from .meta import object_meta


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    object_storage = reg.spec.config.storage.object_storage
    if object_storage is None or object_storage.bucket_access_class is None:
        return None
    return {
        "apiVersion": bucket_claim.COSI_API_VERSION,
        "kind": "BucketAccess",
        "metadata": object_meta(reg, names.bucket_access_name(reg), names.STORAGE_COMPONENT),
        "spec": {
            "bucketClaimName": bucket_claim.claim_name(reg),
            "bucketAccessClassName": object_storage.bucket_access_class,
            "credentialsSecretName": names.cosi_secret_name(reg),
            "protocol": "S3",
        },
    }
