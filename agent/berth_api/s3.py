"""spec.config.storage.s3 (a bucket the user has) and the S3 options it shares with objectStorage
(docs/decisions/0035-s3-credentials-and-ca.md).

One options model, `S3Options`, for both backends: every s3 parameter of the architecture document plus skipVerify,
storageClass and objectAcl, with the ranges Distribution's s3-aws driver enforces at start
(docs/decisions/0035-s3-credentials-and-ca.md cites the lines). Options that exist only in Distribution 3 are refused on
2 by RegistrySpec (v3_fields_set below; CEL says the same).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from .auth import TrustKeyRef
from .types import ApiModel, ObjectName, SecretKey

S3_PATH = "spec.config.storage.s3"
OBJECT_STORAGE_PATH = "spec.config.storage.objectStorage"
MIB = 1024 * 1024
# The s3-aws driver's bounds (2.8.2 s3.go:50-53, 3.1.1 s3.go:49 and s3_64bit.go:7).
MIN_CHUNK_SIZE = 5 * MIB
MAX_CHUNK_SIZE = 5 * 1024 * MIB
INT64_MAX = 2**63 - 1
# Storage classes: 2.8's list, and what 3.1.1 adds (s3.go 2.8.2 / 3.1.1:76-86). NONE sends no header.
STORAGE_CLASSES_2 = ("NONE", "STANDARD", "REDUCED_REDUNDANCY")
STORAGE_CLASSES_3 = STORAGE_CLASSES_2 + ("STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "OUTPOSTS",
                                         "GLACIER_IR", "EXPRESS_ONEZONE")
OBJECT_ACLS = ("private", "public-read", "public-read-write", "authenticated-read", "aws-exec-read",
               "bucket-owner-read", "bucket-owner-full-control")
LOG_LEVELS = ("off", "debug", "debugwithsigning", "debugwithhttpbody", "debugwithrequestretries",
              "debugwithrequesterrors", "debugwitheventstreambody")
# Options read only by Distribution 3's driver (2.8 ignores them silently): refused on 2, naming the field.
V3_OPTIONS = {"useDualStack": "use_dual_stack", "accelerate": "accelerate", "logLevel": "log_level"}
BucketName = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9][-_.a-zA-Z0-9]{1,253}[a-zA-Z0-9]$")]
Region = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][-a-z0-9]{0,62}$")]
EndpointURL = Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+/?$", max_length=2048)]
RootDirectory = Annotated[str, StringConstraints(pattern=r"^[^\s]*$", max_length=1024)]
KeyID = Annotated[str, StringConstraints(pattern=r"^[^\s]+$", max_length=2048)]


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


KEY_ID_MESSAGE = "keyId needs encrypt: true (the driver ignores the key otherwise)"


class S3Options(ApiModel):
    """The s3 driver's options, on storage.s3 and storage.objectStorage alike."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {"x-kubernetes-validations": [
            _rule("!has(self.keyId) || (has(self.encrypt) && self.encrypt)", KEY_ID_MESSAGE)]}
    }

    encrypt: bool | None = Field(None, description="Server-side encryption of every object (SSE-S3, or SSE-KMS "
                                 "with keyId).")
    key_id: KeyID | None = Field(None, alias="keyId", description="The KMS key (ID or ARN) for SSE-KMS; needs "
                                 "encrypt.")
    secure: bool | None = Field(None, description="HTTPS to the endpoint (default: true, or the regionEndpoint's "
                                "scheme).")
    skip_verify: bool | None = Field(None, alias="skipVerify", description="Do not verify the endpoint's TLS "
                                     "certificate (the registry only; tests only: give ca instead).")
    v4auth: bool | None = Field(None, description="AWS Signature Version 4 (default true; AWS S3 needs it).")
    chunk_size: int | None = Field(None, alias="chunkSize", ge=MIN_CHUNK_SIZE, le=MAX_CHUNK_SIZE,
                                   description="Bytes per multipart upload part, 5 MiB to 5 GiB (default 10 MiB). "
                                   "A blob has at most 10,000 parts: raise it for layers over ~97 GiB.")
    multipart_copy_chunk_size: int | None = Field(
        None, alias="multipartCopyChunkSize", ge=MIN_CHUNK_SIZE, le=MAX_CHUNK_SIZE,
        description="Bytes per part of a multipart copy, 5 MiB to 5 GiB (default 32 MiB).")
    multipart_copy_max_concurrency: int | None = Field(
        None, alias="multipartCopyMaxConcurrency", ge=1, le=INT64_MAX,
        description="Parts copied at once in a multipart copy (default 100).")
    multipart_copy_threshold_size: int | None = Field(
        None, alias="multipartCopyThresholdSize", ge=0, le=MAX_CHUNK_SIZE,
        description="Objects larger than this are copied in parts, 0 to 5 GiB (default 32 MiB).")
    root_directory: RootDirectory | None = Field(None, alias="rootDirectory",
                                                 description="A prefix in the bucket for the registry's data.")
    storage_class: Literal[STORAGE_CLASSES_3] | None = Field(  # type: ignore[valid-type]
        None, alias="storageClass", description="The objects' storage class (default STANDARD; NONE sends none). "
        "Distribution 2 knows only NONE, STANDARD and REDUCED_REDUNDANCY.")
    object_acl: Literal[OBJECT_ACLS] | None = Field(  # type: ignore[valid-type]
        None, alias="objectAcl", description="The canned ACL of every object (default private).")
    use_dual_stack: bool | None = Field(None, alias="useDualStack",
                                        description="AWS dual-stack (IPv6) endpoints (Distribution 3 only).")
    accelerate: bool | None = Field(None, description="S3 Transfer Acceleration (Distribution 3 only).")
    log_level: Literal[LOG_LEVELS] | None = Field(  # type: ignore[valid-type]
        None, alias="logLevel", description="The AWS SDK's log level (Distribution 3 only). debugwithsigning "
        "and debugwithhttpbody log signed requests and bodies.")

    @model_validator(mode="after")
    def _key_id_needs_encrypt(self) -> S3Options:
        if self.key_id is not None and not self.encrypt:
            raise ValueError(KEY_ID_MESSAGE)
        return self

    def v3_fields_set(self) -> list[str]:
        """The options set here that Distribution 2 does not have."""
        fields = [name for name, attribute in V3_OPTIONS.items() if getattr(self, attribute) is not None]
        if self.storage_class is not None and self.storage_class not in STORAGE_CLASSES_2:
            fields.append(STORAGE_CLASS_FIELD)
        return fields


STORAGE_CLASS_FIELD = f"storageClass {'/'.join(STORAGE_CLASSES_3[3:])}"
# What Distribution 2 cannot do on storage.s3 (the rules' field names, as v3_fields_set gives them).
POD_IDENTITY_FIELD = "credentials (left out: the pod's identity, which Distribution 2.8's s3 driver never uses)"
PATH_STYLE_FIELD = "forcePathStyle (Distribution 2 uses path style exactly when regionEndpoint is set)"


def v3_options_rules(path: str) -> list[tuple[str, str]]:
    """CEL conditions (true = refused on 2) with the field each names, for the backend at `path`."""
    where = "self." + path.removeprefix("spec.")
    allowed = ", ".join(f"'{c}'" for c in STORAGE_CLASSES_2)
    rules = [(f"has({where}) && has({where}.{name})", name) for name in V3_OPTIONS]
    rules.append((f"has({where}) && has({where}.storageClass) && !({where}.storageClass in [{allowed}])",
                  STORAGE_CLASS_FIELD))
    if path == S3_PATH:
        rules.append((f"has({where}) && !has({where}.credentials)", POD_IDENTITY_FIELD))
        rules.append((f"has({where}) && has({where}.forcePathStyle) && "
                      f"{where}.forcePathStyle != has({where}.regionEndpoint)", PATH_STYLE_FIELD))
    return rules


class S3Credentials(ApiModel):
    """An access key from a Secret: each value by its key name in the Secret."""

    secret_name: ObjectName = Field(alias="secretName", description="The Secret in the Registry's namespace.")
    access_key_id_key: SecretKey = Field("AWS_ACCESS_KEY_ID", alias="accessKeyIdKey",
                                         description="The key holding the access key ID.")
    secret_access_key_key: SecretKey = Field("AWS_SECRET_ACCESS_KEY", alias="secretAccessKeyKey",
                                             description="The key holding the secret access key.")
    session_token_key: SecretKey | None = Field(
        None, alias="sessionTokenKey", description="The key holding a session token, for temporary credentials "
        "(an ASIA... access key from STS): the key must then be in the Secret, and each new token is applied hot "
        "like a new key. Left out: the key is a long-lived one, with no token.")


class S3Storage(S3Options):
    """Registry data in an existing S3 (or S3-compatible) bucket."""

    model_config = S3Options.model_config

    bucket: BucketName = Field(description="The bucket (it must exist).")
    region: Region = Field("us-east-1", description="The bucket's region (any value against a regionEndpoint "
                           "that ignores it).")
    region_endpoint: EndpointURL | None = Field(
        None, alias="regionEndpoint", description="An S3-compatible endpoint (MinIO, Ceph RGW, "
        "https://storage.googleapis.com), or an AWS endpoint for a region the SDK does not know.")
    force_path_style: bool | None = Field(
        None, alias="forcePathStyle", description="Path-style requests (default: true with regionEndpoint, else "
        "virtual-hosted). Distribution 2 always uses path style with regionEndpoint and never without.")
    credentials: S3Credentials | None = Field(
        None, description="The access key, from a Secret; a new key is checked against the bucket and applied "
        "hot. Leave it out to use the pod's own identity (IRSA or EKS Pod Identity through "
        "spec.serviceAccount.annotations, or the node's instance profile): Distribution 3 only.")
    ca: TrustKeyRef | None = Field(
        None, description="The CA certificate (PEM) that signed the endpoint's certificate, from a Secret or "
        "ConfigMap key: trusted by the registry and the agent's pre-flight, besides the system roots.")

    def v3_fields_set(self) -> list[str]:
        fields = super().v3_fields_set()
        if self.credentials is None:
            fields.append(POD_IDENTITY_FIELD)
        if self.force_path_style is not None and self.force_path_style != (self.region_endpoint is not None):
            fields.append(PATH_STYLE_FIELD)
        return fields

    @property
    def path_style(self) -> bool:
        return self.force_path_style if self.force_path_style is not None else self.region_endpoint is not None
