"""The COSI BucketAccess created from spec.config.storage.objectStorage.bucketAccessClass
(docs/upstream.md#cosi-resources). Its credentials Secret has a deterministic name, so the pod template can mount it at
once. The one the spec names (bucketAccess) gives its Secret's name as a fact, or the class is looked up (missing);
waiting: access not granted yet, or its Secret not written yet."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import bucket_claim
from .behaviour import Behaviour
from .checks import Checks, Found, Problem, Reader, status
from .context import ClusterFacts
from .meta import STORAGE_COMPONENT, data_meta, namespace, registry_name

SECRET_NOT_YET = "does not exist yet"  # the COSI driver's Secret: no label of Berth's, watched by name (named.py)


def name(reg: Registry) -> str:
    return f"{registry_name(reg)}-bucket-access"


def secret_name(reg: Registry) -> str:
    """credentialsSecretName of the BucketAccess the operator creates."""
    return f"{registry_name(reg)}-cosi-credentials"


def bucket_access_class_fields(reg: Registry) -> tuple[str, ...]:
    obj = reg.spec.config.storage.object_storage
    return (f"{bucket_claim.OBJECT_STORAGE}.bucketAccessClass",) if obj is not None and obj.bucket_access_class else ()


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    object_storage = reg.spec.config.storage.object_storage
    if object_storage is None or object_storage.bucket_access_class is None:
        return None
    return {
        "apiVersion": bucket_claim.COSI_API_VERSION,
        "kind": "BucketAccess",
        "metadata": data_meta(reg, name(reg), STORAGE_COMPONENT, object_storage.deletion_policy),
        "spec": {
            "bucketClaimName": bucket_claim.claim_name(reg),
            "bucketAccessClassName": object_storage.bucket_access_class,
            "credentialsSecretName": secret_name(reg),
            "protocol": "S3",
        },
    }


def missing(reader: Reader, reg: Registry) -> Found:
    """The access the spec names (its credentials Secret is a fact for the pod), or the class to make one from."""
    obj, ns = reg.spec.config.storage.object_storage, namespace(reg)
    found: list[Problem] = []
    facts: dict[str, Any] = {}
    if obj is None:
        return Found()
    if obj.bucket_access:
        access = reader.get(bucket_claim.COSI_API_VERSION, "BucketAccess", ns, obj.bucket_access)
        if access is None:
            found.append(Problem(
                "MissingBucketAccess",
                f"BucketAccess {obj.bucket_access} (spec.config.storage.objectStorage.bucketAccess) not found "
                f"in namespace {ns}",
            ))
        else:
            facts["bucket_access_secret"] = (access.get("spec") or {}).get("credentialsSecretName") or None
    if obj.bucket_access_class and reader.class_missing(bucket_claim.COSI_API_VERSION, "BucketAccessClass",
                                                        obj.bucket_access_class):
        found.append(Problem(
            "MissingBucketAccessClass",
            f"BucketAccessClass {obj.bucket_access_class} "
            "(spec.config.storage.objectStorage.bucketAccessClass) not found",
        ))
    return Found(found, facts)


def waiting(reader: Reader, reg: Registry) -> list[Problem]:
    obj, ns = reg.spec.config.storage.object_storage, namespace(reg)
    if obj is None:
        return []
    access_name = obj.bucket_access or name(reg)
    access = reader.get(bucket_claim.COSI_API_VERSION, "BucketAccess", ns, access_name)
    if access is None:
        return []
    granted = status(access).get("accessGranted") or status(access).get("readyToUse")
    credentials = (access.get("spec") or {}).get("credentialsSecretName")
    if not granted:
        return [Problem("WaitingForBucketAccess", f"BucketAccess {access_name} has not granted access yet")]
    if credentials and reader.get("v1", "Secret", ns, credentials) is None:
        return [Problem(
            "WaitingForBucketAccess",
            f"BucketAccess {access_name} granted access but its Secret {credentials} {SECRET_NOT_YET}",
        )]
    return []


# Pruned when the spec stops making it (a retained one too: a spec that stops making it revokes its access); the
# class it is made from is the admin's, read only.
BEHAVIOURS = (
    Behaviour(bucket_claim.COSI_API_VERSION, "BucketAccess", builders=(build,), prune=name,
              needed_by=bucket_claim.object_storage_fields, checks=Checks(missing, waiting)),
    Behaviour(bucket_claim.COSI_API_VERSION, "BucketAccessClass", needed_by=bucket_access_class_fields),
)
