"""spec.config.storage.azure and spec.config.storage.gcs: Azure Blob and Google Cloud Storage
(docs/decisions/0036-azure-and-gcs-not-through-cosi.md).

Distribution 3 only: Debian's 2.8.2 has neither driver, so nothing here can be tested on 2.8 and both are refused
there (the model and CEL, as every 3.x-only field). The parameters follow Distribution 3.1.1's drivers
(registry/storage/driver/azure/parser.go, registry/storage/driver/gcs/gcs.go); credentials come from a Secret
(mounted whole as the `azure` or `gcs` volume and watched over the API, so a rotation is hot) or, with
`default_credentials`, from the pod's workload identity.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from .types import INT32_MAX, ApiModel, Duration, SecretKeyRef

AZURE_PATH = "spec.config.storage.azure"
GCS_PATH = "spec.config.storage.gcs"
# Azure's rules: an account name is 3-24 lowercase letters and digits; a container name 3-63 lowercase letters,
# digits and single hyphens, starting and ending with a letter or digit.
AccountName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]{3,24}$")]
ContainerName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9](-?[a-z0-9])+$", min_length=3, max_length=63)]
# GCS bucket names: 3-63 (222 with dots) lowercase letters, digits, -, _ and ., starting and ending alphanumeric.
BucketName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][-_.a-z0-9]{1,220}[a-z0-9]$")]
Realm = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$",
                                         max_length=253)]
ServiceURL = Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$", max_length=2048)]
RootDirectory = Annotated[str, StringConstraints(pattern=r"^[^\s]*$", max_length=1024)]
GUID = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")]
# The gcs driver's floor and step for chunksize (minChunkSize, gcs.go).
GCS_CHUNK_STEP = 256 * 1024
GCS_MAX_CHUNK = 5 * 1024 * 1024 * 1024


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


class AzureCredentials(ApiModel):
    """How the azure driver authenticates (its `credentials.type`)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                _rule("self.type == 'default_credentials' || has(self.secret)",
                      "shared_key and client_secret need secret (the Secret and key holding the account key or "
                      "the client secret)"),
                _rule("self.type != 'default_credentials' || !has(self.secret)",
                      "default_credentials takes no secret (the pod's workload identity authenticates)"),
                _rule("(self.type == 'client_secret') == (has(self.tenantID) && has(self.clientID))",
                      "client_secret needs tenantID and clientID, and only client_secret takes them"),
            ]
        }
    }

    type: Literal["shared_key", "client_secret", "default_credentials"] = Field(
        description="shared_key: the storage account's key from secret (one of its two keys: rotate one while the "
        "other serves). client_secret: a Microsoft Entra application's secret from secret, with tenantID and "
        "clientID. default_credentials: the pod's workload identity (no Secret; label the pod template and "
        "annotate the ServiceAccount as docs/guide/placement-and-identity.md, Cloud identity, says).")
    secret: SecretKeyRef | None = Field(
        None, description="The Secret and key holding the account key (shared_key) or the client secret "
        "(client_secret). A new value is applied hot: checked against the service first, then a hitless restart.")
    tenant_id: GUID | None = Field(None, alias="tenantID", description="client_secret: the directory (tenant) ID.")
    client_id: GUID | None = Field(None, alias="clientID", description="client_secret: the application (client) ID.")

    @model_validator(mode="after")
    def _fits_type(self) -> AzureCredentials:
        if self.type != "default_credentials" and self.secret is None:
            raise ValueError("shared_key and client_secret need secret (the Secret and key holding the account key "
                             "or the client secret)")
        if self.type == "default_credentials" and self.secret is not None:
            raise ValueError("default_credentials takes no secret (the pod's workload identity authenticates)")
        if (self.type == "client_secret") != (self.tenant_id is not None and self.client_id is not None):
            raise ValueError("client_secret needs tenantID and clientID, and only client_secret takes them")
        return self


class AzureStorage(ApiModel):
    """Registry data in an Azure Blob Storage container (Distribution 3; the container must exist)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                _rule("!(has(self.realm) && has(self.serviceURL))", "set realm or serviceURL, not both"),
            ]
        }
    }

    account_name: AccountName = Field(alias="accountName", description="The storage account.")
    container: ContainerName = Field(description="The blob container (created beforehand: the driver does not).")
    realm: Realm | None = Field(
        None, description="The cloud's storage domain (core.windows.net, the default; core.chinacloudapi.cn, "
        "core.usgovcloudapi.net). The service is https://<accountName>.blob.<realm>.")
    service_url: ServiceURL | None = Field(
        None, alias="serviceURL", description="The Blob service's URL, instead of realm (a private endpoint, or "
        "an emulator such as Azurite: http://host:10000/<accountName>).")
    root_directory: RootDirectory | None = Field(
        None, alias="rootDirectory", description="A prefix inside the container under which the registry keeps "
        "its data.")
    max_retries: int | None = Field(None, alias="maxRetries", ge=1, le=INT32_MAX,
                                    description="Retries of a failed request to the service (the driver's default 5).")
    retry_delay: Duration | None = Field(None, alias="retryDelay",
                                         description="Delay before the first retry (the driver's default 100ms).")
    credentials: AzureCredentials = Field(description="How the registry authenticates to the storage account.")

    @model_validator(mode="after")
    def _realm_or_url(self) -> AzureStorage:
        if self.realm is not None and self.service_url is not None:
            raise ValueError("set realm or serviceURL, not both")
        return self

    @property
    def endpoint(self) -> str:
        """The Blob service's URL, as the driver derives it (parser.go: https://<account>.blob.<realm>)."""
        return self.service_url or f"https://{self.account_name}.blob.{self.realm or 'core.windows.net'}"


class GcsCredentials(ApiModel):
    """How the gcs driver authenticates."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                _rule("(self.type == 'key') == has(self.secret)",
                      "key needs secret (the Secret and key holding the service account's JSON key), and "
                      "default_credentials takes none"),
            ]
        }
    }

    type: Literal["key", "default_credentials"] = Field(
        description="key: a service account's JSON key from secret, written beside config.yml as the driver's "
        "keyfile (it also signs redirect URLs). default_credentials: the pod's workload identity (GKE Workload "
        "Identity; no Secret). Redirect URLs are then signed through the IAM signBlob API, which needs the "
        "service account allowed to sign for itself (roles/iam.serviceAccountTokenCreator), else set "
        "storage.redirect.disabled.")
    secret: SecretKeyRef | None = Field(
        None, description="The Secret and key holding the JSON key. A new key is applied hot: exchanged for a "
        "token and checked against the bucket first, then a hitless restart.")

    @model_validator(mode="after")
    def _fits_type(self) -> GcsCredentials:
        if (self.type == "key") != (self.secret is not None):
            raise ValueError("key needs secret (the Secret and key holding the service account's JSON key), and "
                             "default_credentials takes none")
        return self


class GcsStorage(ApiModel):
    """Registry data in a Google Cloud Storage bucket (Distribution 3; the bucket must exist)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                _rule(f"!has(self.chunkSize) || self.chunkSize % {GCS_CHUNK_STEP} == 0",
                      f"chunkSize must be a multiple of {GCS_CHUNK_STEP} (256 KiB)"),
            ]
        }
    }

    bucket: BucketName = Field(description="The bucket.")
    root_directory: RootDirectory | None = Field(
        None, alias="rootDirectory", description="A prefix inside the bucket under which the registry keeps its "
        "data.")
    chunk_size: int | None = Field(
        None, alias="chunkSize", ge=GCS_CHUNK_STEP, le=GCS_MAX_CHUNK,
        description="Bytes per resumable-upload chunk: a multiple of 256 KiB (the driver's default 16 MiB).")
    credentials: GcsCredentials = Field(description="How the registry authenticates to Cloud Storage.")

    @model_validator(mode="after")
    def _chunk_step(self) -> GcsStorage:
        if self.chunk_size is not None and self.chunk_size % GCS_CHUNK_STEP:
            raise ValueError(f"chunkSize must be a multiple of {GCS_CHUNK_STEP} (256 KiB)")
        return self
