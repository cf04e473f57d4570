"""The `storage` section of the registry config: the driver and the storage options (docs/design.md §4.1)."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from berth_api import RegistrySpec

from ..core.errors import InputError
from ..inputs.mounts import MountedInputs, S3Credentials
from .paths import RenderPaths


def storage_section(spec: RegistrySpec, inputs: MountedInputs, major: Literal["2", "3"],
                    paths: RenderPaths) -> dict[str, Any]:
    storage = spec.config.storage
    section: dict[str, Any]
    if storage.filesystem is not None:
        section = {"filesystem": {"rootdirectory": str(paths.data_dir)}}
    elif storage.object_storage is not None:
        if inputs.s3 is None:
            raise InputError("spec.config.storage.objectStorage", "is set but no COSI credentials were read")
        section = {"s3": _s3(inputs.s3, storage.object_storage.chunk_size, major)}
    else:
        section = {"inmemory": {}}

    section["delete"] = {"enabled": storage.delete.enabled}
    # The registry's key is `disable`; the API's `disabled` follows the architecture document.
    section["redirect"] = {"disable": storage.redirect.disabled}
    if storage.cache is not None:
        cache: dict[str, Any] = {"blobdescriptor": storage.cache.blobdescriptor}
        # blobdescriptorsize is new in Distribution 3 (field-notes §1); 2.8 has a fixed-size cache.
        if major == "3" and storage.cache.blobdescriptorsize is not None:
            cache["blobdescriptorsize"] = storage.cache.blobdescriptorsize
        section["cache"] = cache
    purging = storage.maintenance.uploadpurging
    # Always the whole block: a partial maintenance section (e.g. only readonly) panics v3 (field-notes §1).
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


def _s3(creds: S3Credentials, chunk_size: int | None, major: Literal["2", "3"]) -> dict[str, Any]:
    s3: dict[str, Any] = {
        "accesskey": creds.access_key_id,
        "secretkey": creds.secret_access_key,
        "region": creds.region,
    }
    secure = True
    if creds.endpoint:
        s3["regionendpoint"] = creds.endpoint
        secure = urlsplit(creds.endpoint).scheme != "http"
    if major == "3":
        # 2.8 always uses path style when regionendpoint is set and has no forcepathstyle key; 3 defaults to
        # virtual-hosted style, which S3-compatible stores on a custom endpoint usually lack (field-notes §1).
        path_style = creds.addressing_style == "path" or (creds.endpoint is not None and creds.addressing_style is None)
        if path_style or creds.addressing_style == "virtual":
            s3["forcepathstyle"] = path_style
    s3["bucket"] = creds.bucket
    s3["secure"] = secure
    s3["v4auth"] = True
    if chunk_size is not None:
        s3["chunksize"] = chunk_size
    return s3
