"""spec.config.storage: the backend and the storage-level options of the registry.

Field names and nesting follow the architecture document, section 2.3.3 (delete, redirect, cache,
maintenance and auth sit under storage there, and so they do here; auth is also accepted at spec.config.auth,
where Distribution's own config.yml has it: see auth.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .auth import Auth
from .cloud_storage import AzureStorage, GcsStorage
from .s3 import S3Options, S3Storage
from .types import INT32_MAX, ApiModel, Duration, ObjectName, Quantity

BACKENDS_MESSAGE = "set exactly one storage backend: filesystem, objectStorage, s3, azure, gcs or inmemory"
# The filesystem driver's floor for maxthreads: it silently raises a smaller value to this (base/regulator.go).
MIN_THREADS = 25

# What happens to the objects Berth creates to hold a Registry's data when the Registry is deleted. Retain: they
# are not owned by the Registry (the garbage collector leaves them) and a Registry created again with the same name
# adopts them; Delete: owned, they go with it. The names follow a PersistentVolume's reclaim policy and a COSI
# BucketClass's deletionPolicy. docs/guide/uninstall.md says what each keeps.
DeletionPolicy = Literal["Retain", "Delete"]
RETAIN: DeletionPolicy = "Retain"
DELETE: DeletionPolicy = "Delete"


class FilesystemStorage(ApiModel):
    """Registry data on a PersistentVolumeClaim: an existing claim, or one the operator creates from a class."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.persistentVolumeClaim) != has(self.storageClass)",
                    "message": "set exactly one of persistentVolumeClaim and storageClass",
                }
            ]
        }
    }

    persistent_volume_claim: ObjectName | None = Field(
        None, alias="persistentVolumeClaim", description="Name of an existing PersistentVolumeClaim to store data on."
    )
    storage_class: ObjectName | None = Field(
        None,
        alias="storageClass",
        description="StorageClass from which the operator creates a PersistentVolumeClaim for this registry.",
    )
    size: Quantity = Field("10Gi", description="Requested size of the claim created from storageClass.")
    deletion_policy: DeletionPolicy = Field(
        RETAIN, alias="deletionPolicy",
        description="What deleting the Registry does to the claim created from storageClass. Retain (the default) "
        "keeps the claim and its data, and a Registry created again with this name in this namespace uses it; "
        "Delete deletes the claim with the Registry (and the volume, if its StorageClass's reclaimPolicy is Delete). "
        "A change applies to the live claim at once. A claim named in persistentVolumeClaim is never deleted.")
    max_threads: int | None = Field(
        None, alias="maxThreads", ge=MIN_THREADS, le=INT32_MAX,
        description="Most concurrent filesystem operations (at least 25, Distribution's floor; default 100).")

    @model_validator(mode="after")
    def _claim_xor_class(self) -> FilesystemStorage:
        if (self.persistent_volume_claim is None) == (self.storage_class is None):
            raise ValueError("set exactly one of persistentVolumeClaim and storageClass")
        return self


class ObjectStorage(S3Options):
    """Registry data in an S3 bucket provisioned through COSI (objectstorage.k8s.io), with the s3 options."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                *S3Options.model_config["json_schema_extra"]["x-kubernetes-validations"],
                {
                    "rule": "has(self.bucketClaim) != has(self.bucketClass)",
                    "message": "set exactly one of bucketClaim and bucketClass",
                },
                {
                    "rule": "has(self.bucketAccess) != has(self.bucketAccessClass)",
                    "message": "set exactly one of bucketAccess and bucketAccessClass",
                },
            ]
        }
    }

    bucket_claim: ObjectName | None = Field(None, alias="bucketClaim", description="Name of an existing BucketClaim.")
    bucket_class: ObjectName | None = Field(
        None, alias="bucketClass", description="BucketClass from which the operator creates a BucketClaim."
    )
    bucket_access: ObjectName | None = Field(
        None, alias="bucketAccess", description="Name of an existing BucketAccess whose credentials Secret is used."
    )
    bucket_access_class: ObjectName | None = Field(
        None, alias="bucketAccessClass", description="BucketAccessClass from which the operator creates a BucketAccess."
    )
    deletion_policy: DeletionPolicy = Field(
        RETAIN, alias="deletionPolicy",
        description="What deleting the Registry does to the BucketClaim and BucketAccess created from bucketClass "
        "and bucketAccessClass. Retain (the default) keeps both (the bucket and its data stay), and a Registry "
        "created again with this name in this namespace uses them; Delete deletes them with the Registry (and the "
        "bucket, if its BucketClass's deletionPolicy is Delete). A change applies to the live objects at once. "
        "Objects named in bucketClaim and bucketAccess are never deleted.")

    @model_validator(mode="after")
    def _exactly_one_each(self) -> ObjectStorage:
        if (self.bucket_claim is None) == (self.bucket_class is None):
            raise ValueError("set exactly one of bucketClaim and bucketClass")
        if (self.bucket_access is None) == (self.bucket_access_class is None):
            raise ValueError("set exactly one of bucketAccess and bucketAccessClass")
        return self


class InMemoryStorage(ApiModel):
    """In-memory storage, lost when the registry process restarts. For tests only; takes no parameters."""


class Delete(ApiModel):
    enabled: bool = Field(False, description="Allow deleting blobs and manifests by digest.")


class Redirect(ApiModel):
    disabled: bool = Field(False, description="Serve blobs through the registry instead of redirecting to storage.")


class Cache(ApiModel):
    blobdescriptor: Literal["inmemory", "redis"] = Field(
        description="Where to cache blob descriptors; redis needs spec.redis."
    )
    blobdescriptorsize: int | None = Field(
        None, ge=1, le=INT32_MAX, description="Entries in the in-memory blob descriptor cache (Distribution 3 only)."
    )


class UploadPurging(ApiModel):
    enabled: bool = Field(True, description="Periodically remove abandoned uploads.")
    age: Duration = Field("168h", description="Uploads older than this are purged.")
    interval: Duration = Field("24h", description="How often to purge.")
    dryrun: bool = Field(False, description="Only log what would be purged.")


class ReadOnly(ApiModel):
    enabled: bool = Field(False, description="Refuse writes (pushes and deletes), e.g. during garbage collection.")


class Maintenance(ApiModel):
    uploadpurging: UploadPurging = Field(
        default_factory=UploadPurging, description="Removal of abandoned uploads."
    )
    readonly: ReadOnly = Field(default_factory=ReadOnly, description="Read-only mode.")


class Storage(ApiModel):
    """Exactly one backend (filesystem, objectStorage, s3, azure, gcs or inmemory) plus storage options."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.filesystem), has(self.objectStorage), has(self.s3), has(self.azure), "
                    "has(self.gcs), has(self.inmemory)].filter(x, x).size() == 1",
                    "message": BACKENDS_MESSAGE,
                }
            ]
        }
    }

    filesystem: FilesystemStorage | None = Field(None, description="Store data on a PersistentVolumeClaim.")
    object_storage: ObjectStorage | None = Field(
        None, alias="objectStorage", description="Store data in an S3 bucket through COSI."
    )
    s3: S3Storage | None = Field(None, description="Store data in an existing S3 or S3-compatible bucket, with an "
                                 "access key from a Secret or the pod's own identity.")
    azure: AzureStorage | None = Field(
        None, description="Store data in an Azure Blob Storage container (Distribution 3 only).")
    gcs: GcsStorage | None = Field(
        None, description="Store data in a Google Cloud Storage bucket (Distribution 3 only).")
    inmemory: InMemoryStorage | None = Field(None, description="Keep data in memory (tests only).")
    delete: Delete = Field(default_factory=Delete, description="Deletion of blobs and manifests.")
    redirect: Redirect = Field(default_factory=Redirect, description="Redirects to the storage backend.")
    cache: Cache | None = Field(None, description="Blob descriptor cache.")
    maintenance: Maintenance = Field(default_factory=Maintenance, description="Upload purging and read-only mode.")
    auth: Auth = Field(default_factory=Auth, description="Authentication, where the architecture document "
                       "(section 2.3.3) puts it: the same as spec.config.auth; set it in one of the two places.")

    @model_validator(mode="after")
    def _exactly_one_backend(self) -> Storage:
        backends = [self.filesystem, self.object_storage, self.s3, self.azure, self.gcs, self.inmemory]
        if sum(b is not None for b in backends) != 1:
            raise ValueError(BACKENDS_MESSAGE)
        return self

    @property
    def backend(self) -> Literal["filesystem", "objectStorage", "s3", "azure", "gcs", "inmemory"]:
        if self.filesystem is not None:
            return "filesystem"
        if self.object_storage is not None:
            return "objectStorage"
        if self.s3 is not None:
            return "s3"
        if self.azure is not None:
            return "azure"
        if self.gcs is not None:
            return "gcs"
        return "inmemory"
