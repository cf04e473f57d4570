"""spec.config.storage: the backend and the storage-level options of the registry.

Field names and nesting follow the architecture document, section 2.3.3 (delete, redirect, cache,
maintenance and auth sit under storage there, and so they do here).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .types import INT32_MAX, ApiModel, ConfigMapKeyRef, Duration, ObjectName, Quantity, SecretKeyRef

# Smallest chunk S3 accepts for a multipart upload part, and the registry's own floor.
MIN_CHUNK_SIZE = 5 * 1024 * 1024
# Largest part S3 accepts; both registry versions refuse a larger chunksize at start (s3-aws driver, maxChunkSize).
MAX_CHUNK_SIZE = 5 * 1024 * 1024 * 1024


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

    @model_validator(mode="after")
    def _claim_xor_class(self) -> FilesystemStorage:
        if (self.persistent_volume_claim is None) == (self.storage_class is None):
            raise ValueError("set exactly one of persistentVolumeClaim and storageClass")
        return self


class ObjectStorage(ApiModel):
    """Registry data in an S3 bucket provisioned through COSI (objectstorage.k8s.io)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
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
    chunk_size: int | None = Field(
        None,
        alias="chunkSize",
        ge=MIN_CHUNK_SIZE,
        le=MAX_CHUNK_SIZE,
        description="Size in bytes of each part of a multipart upload to S3 (5 MiB to 5 GiB).",
    )

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


class Htpasswd(ApiModel):
    secret: SecretKeyRef = Field(description="Secret key holding an htpasswd file (bcrypt entries).")


# The JWS algorithms Distribution 3 accepts in auth.token.signingalgorithms (its default is all of them;
# registry/auth/token/accesscontroller.go, go-jose names).
SIGNING_ALGORITHMS = ("EdDSA", "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512",
                      "PS256", "PS384", "PS512")
SigningAlgorithm = Literal["EdDSA", "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512",
                           "PS256", "PS384", "PS512"]
# The token fields Distribution 2.8 does not know (API name), refused on 2.8 by the model and the CRD.
TOKEN_V3_FIELDS = ("jwks", "signingAlgorithms", "autoRedirectPath")


def token_v3_message(field: str) -> str:
    return (f"config.storage.auth.token.{field} needs Distribution 3, and this registry runs Distribution 2 "
            "(spec.distribution, else the image tag)")


class TrustKeyRef(ApiModel):
    """A key of a Secret or of a ConfigMap (trust bundles are often ConfigMaps, e.g. trust-manager's)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "has(self.secret) != has(self.configMap)",
                 "message": "set exactly one of secret and configMap"}
            ]
        }
    }

    secret: SecretKeyRef | None = Field(None, description="A key of a Secret.")
    config_map: ConfigMapKeyRef | None = Field(None, alias="configMap", description="A key of a ConfigMap.")

    @model_validator(mode="after")
    def _exactly_one(self) -> TrustKeyRef:
        if (self.secret is None) == (self.config_map is None):
            raise ValueError("set exactly one of secret and configMap")
        return self

    @property
    def kind(self) -> Literal["Secret", "ConfigMap"]:
        return "Secret" if self.secret is not None else "ConfigMap"

    @property
    def ref(self) -> SecretKeyRef | ConfigMapKeyRef:
        ref = self.secret if self.secret is not None else self.config_map
        assert ref is not None
        return ref


class TokenAuth(ApiModel):
    """Bearer tokens (JWTs) from an external issuer, trusted through its certificates or keys. The registry
    reads the bundle and the JWKS once at start: the agent restarts it (hitlessly) when they change."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "has(self.rootCertBundle) || has(self.jwks)",
                 "message": "set rootCertBundle, jwks or both: the registry needs keys to trust"}
            ]
        }
    }

    realm: str = Field(min_length=1, max_length=2048, pattern=r"^https?://[^\s]+$",
                       description="URL of the token endpoint that clients are sent to (WWW-Authenticate realm).")
    service: str = Field(min_length=1, max_length=1024, description="Service name tokens must be issued for (aud).")
    issuer: str = Field(min_length=1, max_length=1024, description="Issuer name tokens must carry (iss).")
    auto_redirect: bool = Field(False, alias="autoRedirect",
                                description="Redirect clients to the realm on this registry's own host.")
    root_cert_bundle: TrustKeyRef | None = Field(
        None, alias="rootCertBundle",
        description="PEM certificates the token signing certificates (x5c) must chain to, from a Secret or "
        "ConfigMap key.")
    jwks: TrustKeyRef | None = Field(
        None, description="A JSON Web Key Set of trusted signing keys, from a Secret or ConfigMap key "
        "(Distribution 3 only).")
    signing_algorithms: list[SigningAlgorithm] | None = Field(
        None, alias="signingAlgorithms", min_length=1, max_length=len(SIGNING_ALGORITHMS),
        description="JWS algorithms accepted (Distribution 3 only; default: all).")
    auto_redirect_path: str | None = Field(
        None, alias="autoRedirectPath", min_length=1, max_length=1024, pattern=r"^/[^\s]*$",
        description="Path of the realm when autoRedirect is set (Distribution 3 only; default /auth/token).")

    @model_validator(mode="after")
    def _some_trust(self) -> TokenAuth:
        if self.root_cert_bundle is None and self.jwks is None:
            raise ValueError("set rootCertBundle, jwks or both: the registry needs keys to trust")
        return self

    def v3_fields_set(self) -> list[str]:
        """The Distribution-3-only fields this spec sets, by API name."""
        values = {"jwks": self.jwks, "signingAlgorithms": self.signing_algorithms,
                  "autoRedirectPath": self.auto_redirect_path}
        return [name for name in TOKEN_V3_FIELDS if values[name] is not None]


class SillyAuth(ApiModel):
    """FOR TESTS ONLY: lets in any request that carries an Authorization header, whatever it holds. The agent
    posts a Warning Event while a Registry uses it."""

    realm: str = Field(min_length=1, max_length=2048, description="Realm sent in the WWW-Authenticate challenge.")
    service: str = Field(min_length=1, max_length=1024, description="Service sent in the challenge.")


AUTH_MESSAGE = "set at most one auth provider: htpasswd, token or silly"


class Auth(ApiModel):
    """At most one provider: the registry refuses more than one."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "[has(self.htpasswd), has(self.token), has(self.silly)].filter(x, x).size() <= 1",
                 "message": AUTH_MESSAGE}
            ]
        }
    }

    htpasswd: Htpasswd | None = Field(None, description="Basic authentication from an htpasswd file.")
    token: TokenAuth | None = Field(None, description="Bearer tokens from an external issuer.")
    silly: SillyAuth | None = Field(
        None, description="FOR TESTS ONLY: any Authorization header is let in. Never use it in production.")

    @model_validator(mode="after")
    def _at_most_one(self) -> Auth:
        if sum(p is not None for p in (self.htpasswd, self.token, self.silly)) > 1:
            raise ValueError(AUTH_MESSAGE)
        return self


class Storage(ApiModel):
    """Exactly one backend (filesystem, objectStorage or inmemory) plus storage options."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.filesystem), has(self.objectStorage), has(self.inmemory)]"
                    ".filter(x, x).size() == 1",
                    "message": "set exactly one storage backend: filesystem, objectStorage or inmemory",
                }
            ]
        }
    }

    filesystem: FilesystemStorage | None = Field(None, description="Store data on a PersistentVolumeClaim.")
    object_storage: ObjectStorage | None = Field(
        None, alias="objectStorage", description="Store data in an S3 bucket through COSI."
    )
    inmemory: InMemoryStorage | None = Field(None, description="Keep data in memory (tests only).")
    delete: Delete = Field(default_factory=Delete, description="Deletion of blobs and manifests.")
    redirect: Redirect = Field(default_factory=Redirect, description="Redirects to the storage backend.")
    cache: Cache | None = Field(None, description="Blob descriptor cache.")
    maintenance: Maintenance = Field(default_factory=Maintenance, description="Upload purging and read-only mode.")
    auth: Auth = Field(default_factory=Auth, description="Authentication: at most one of htpasswd, token and silly.")

    @model_validator(mode="after")
    def _exactly_one_backend(self) -> Storage:
        backends = [self.filesystem, self.object_storage, self.inmemory]
        if sum(b is not None for b in backends) != 1:
            raise ValueError("set exactly one storage backend: filesystem, objectStorage or inmemory")
        return self

    @property
    def backend(self) -> Literal["filesystem", "objectStorage", "inmemory"]:
        if self.filesystem is not None:
            return "filesystem"
        if self.object_storage is not None:
            return "objectStorage"
        return "inmemory"
