"""The `storage` section of the registry config: the driver and the storage options (docs/design.md §4.1)."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from berth_api import RegistrySpec
from berth_api.cloud_storage import AZURE_PATH, GCS_PATH, AzureStorage, GcsStorage
from berth_api.s3 import S3_PATH, S3Options

from ..core.errors import InputError
from ..mounted.mounts import MountedInputs, S3Credentials
from .paths import GCS_KEY_FILE, S3_CA_FILE, S3_CREDENTIALS_FILE, RenderPaths

# S3Options attribute -> the s3-aws driver's parameter: the option's API name lowercased, as the driver spells
# every parameter (docs/decisions/0035-s3-credentials-and-ca.md), so a new option needs no second entry here.
S3_PARAMETERS = {attribute: (field.alias or attribute).lower() for attribute, field in S3Options.model_fields.items()}


def storage_section(spec: RegistrySpec, inputs: MountedInputs, major: Literal["2", "3"],
                    paths: RenderPaths, files: dict[str, bytes]) -> dict[str, Any]:
    """The storage section; a file the driver reads (the gcs keyfile) goes into `files`, beside config.yml."""
    storage = spec.config.storage
    section: dict[str, Any]
    if storage.filesystem is not None:
        section = {"filesystem": {"rootdirectory": str(paths.data_dir)}}
        if storage.filesystem.max_threads is not None:
            section["filesystem"]["maxthreads"] = storage.filesystem.max_threads
    elif storage.object_storage is not None or storage.s3 is not None:
        options: S3Options = storage.object_storage or storage.s3  # type: ignore[assignment]
        if inputs.s3 is None:
            raise InputError("spec.config.storage.objectStorage" if storage.s3 is None else S3_PATH,
                             "is set but no credentials were read")
        path = "spec.config.storage.objectStorage" if storage.s3 is None else S3_PATH
        for field in options.v3_fields_set() if major == "2" else ():  # --distribution 2 over a 3 spec
            raise InputError(f"{path}.{field}", "needs Distribution 3; this registry runs Distribution 2")
        section = {"s3": _s3(inputs.s3, options, major)}
        if inputs.s3.session_token:
            files[S3_CREDENTIALS_FILE] = shared_credentials(inputs.s3)
        if inputs.s3_ca is not None:
            files[S3_CA_FILE] = inputs.s3_ca  # the registry's SSL_CERT_DIR (berth_api.pod.S3_CA_DIR)
    elif storage.azure is not None or storage.gcs is not None:
        if major == "2":  # the model refuses these for the spec's own distribution; --distribution may say 2
            raise InputError(AZURE_PATH if storage.azure is not None else GCS_PATH,
                             "needs Distribution 3; this registry runs Distribution 2")
        section = {"azure": _azure(storage.azure, inputs)} if storage.azure is not None else {
            "gcs": _gcs(storage.gcs, inputs, paths, files)}
    else:
        section = {"inmemory": {}}

    section["delete"] = {"enabled": storage.delete.enabled}
    # The registry's key is `disable`; the API's `disabled` follows the architecture document.
    section["redirect"] = {"disable": storage.redirect.disabled}
    if storage.cache is not None:
        cache: dict[str, Any] = {"blobdescriptor": storage.cache.blobdescriptor}
        # blobdescriptorsize is new in Distribution 3 (docs/upstream.md#dist-v3-config); 2.8 has a fixed-size cache.
        if major == "3" and storage.cache.blobdescriptorsize is not None:
            cache["blobdescriptorsize"] = storage.cache.blobdescriptorsize
        section["cache"] = cache
    purging = storage.maintenance.uploadpurging
    # Always the whole block: a partial maintenance section (e.g. only readonly) panics v3
    # (docs/upstream.md#dist-maintenance-block).
    section["maintenance"] = {
        "uploadpurging": {
            "enabled": purging.enabled,
            "age": purging.age,
            "interval": purging.interval,
            "dryrun": purging.dryrun,
        },
        "readonly": {"enabled": storage.maintenance.readonly.enabled},
    }
    return section


def _azure(azure: AzureStorage, inputs: MountedInputs) -> dict[str, Any]:
    """Distribution 3.1.1's azure parameters (parser.go): the account key sits at accountkey, a client secret
    under credentials."""
    credentials = azure.credentials
    section: dict[str, Any] = {"accountname": azure.account_name, "container": azure.container}
    creds: dict[str, Any] = {"type": credentials.type}
    if credentials.secret is not None:
        if inputs.azure_secret is None:
            raise InputError(f"{AZURE_PATH}.credentials.secret", "is set but no credentials were read")
        if credentials.type == "shared_key":
            section["accountkey"] = inputs.azure_secret
        else:
            creds |= {"clientid": credentials.client_id, "tenantid": credentials.tenant_id,
                      "secret": inputs.azure_secret}
    section["credentials"] = creds
    if azure.service_url is not None:
        section["serviceurl"] = azure.service_url
    if azure.realm is not None:
        section["realm"] = azure.realm
    if azure.root_directory is not None:
        section["rootdirectory"] = azure.root_directory
    if azure.max_retries is not None:
        section["max_retries"] = azure.max_retries
    if azure.retry_delay is not None:
        section["retry_delay"] = azure.retry_delay
    return section


def _gcs(gcs: GcsStorage, inputs: MountedInputs, paths: RenderPaths, files: dict[str, bytes]) -> dict[str, Any]:
    """Distribution 3.1.1's gcs parameters (gcs.go FromParameters); the key is the keyfile, read at start, so a
    new key is a restart; without one the driver takes the pod's default credentials."""
    section: dict[str, Any] = {"bucket": gcs.bucket}
    if gcs.credentials.secret is not None:
        if inputs.gcs_key is None:
            raise InputError(f"{GCS_PATH}.credentials.secret", "is set but no key was read")
        files[GCS_KEY_FILE] = inputs.gcs_key.data
        section["keyfile"] = str(paths.config_dir / GCS_KEY_FILE)
    if gcs.root_directory is not None:
        section["rootdirectory"] = gcs.root_directory
    if gcs.chunk_size is not None:
        section["chunksize"] = gcs.chunk_size
    return section


def shared_credentials(creds: S3Credentials) -> bytes:
    """The AWS shared credentials file of temporary credentials (the SDK reads the token from it, in 2.8's chain
    after the empty static key and the environment, in 3.1.1's default chain)."""
    return (f"[default]\naws_access_key_id = {creds.access_key_id}\naws_secret_access_key = "
            f"{creds.secret_access_key}\naws_session_token = {creds.session_token}\n").encode()


def _s3(creds: S3Credentials, options: S3Options, major: Literal["2", "3"]) -> dict[str, Any]:
    """COSI's and storage.s3's bucket and key alike, with the options both share. Without a key (the pod's identity) no
    accesskey is written: the SDK's default chain finds one (Distribution 3,
    docs/decisions/0035-s3-credentials-and-ca.md). With a session token neither: the key is in the shared credentials
    file (shared_credentials)."""
    s3: dict[str, Any] = {"accesskey": creds.access_key_id, "secretkey": creds.secret_access_key} \
        if creds.has_key and not creds.session_token else {}
    s3["region"] = creds.region
    secure = True
    if creds.endpoint:
        s3["regionendpoint"] = creds.endpoint
        secure = urlsplit(creds.endpoint).scheme != "http"
    if major == "3":
        # 2.8 always uses path style when regionendpoint is set and has no forcepathstyle key; 3 defaults to
        # virtual-hosted style, which S3-compatible stores on a custom endpoint usually lack
        # (docs/upstream.md#dist-v3-config).
        path_style = creds.addressing_style == "path" or (creds.endpoint is not None and creds.addressing_style is None)
        if path_style or creds.addressing_style == "virtual":
            s3["forcepathstyle"] = path_style
    s3["bucket"] = creds.bucket
    s3["secure"] = secure
    s3["v4auth"] = True
    for attribute, parameter in S3_PARAMETERS.items():
        value = getattr(options, attribute)
        if value is not None:
            s3[parameter] = value
    return s3
