"""COSI bucket credentials, in both Secret formats (docs/design.md §3).

v1alpha1 (docs/upstream.md#cosi-v1alpha1-secret): one key `BucketInfo` holding JSON (`spec.bucketName`,
`spec.authenticationType` Key/KEY, `spec.secretS3.{endpoint, region, accessKeyID, accessSecretKey}`). v1alpha2
(docs/upstream.md#cosi-v1alpha2-secret): one key per field, either the `COSI_S3_*` names the COSI code writes or the
AWS-style names of the KEP. Only static keys are supported: the registry's s3 config takes an access key, so
`authenticationType: IAM` is refused with a clear error.

A COSI Secret for Azure Blob or GCS is refused saying why (docs/decisions/0036-azure-and-gcs-not-through-cosi.md): COSI
hands Azure out as a SAS token (v1alpha1 `spec.secretAzure.accessToken`, v1alpha2 `COSI_AZURE_ACCESS_TOKEN`) and GCS as
HMAC keys (`COSI_GCS_ACCESS_ID`/`_SECRET`), and Distribution's azure and gcs drivers take neither.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from ..core.errors import InputError
from .secret_volume import DOCUMENT_LIMIT, list_keys, read_text

SOURCE = "cosi"
BUCKET_INFO_KEY = "BucketInfo"
# Used when the credentials name no region: any region works against a custom endpoint, and it is AWS's default.
DEFAULT_REGION = "us-east-1"
WHY = "spec.config.storage.objectStorage"
# BucketInfo is 3 levels deep (spec.secretS3.accessKeyID); room for fields COSI may add, none for abuse.
MAX_JSON_DEPTH = 16
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_BRACKET = re.compile(r"[][{}]")

# v1alpha2 key names: (bucket, endpoint, region, addressing style, access key id, secret access key).
COSI_KEYS = ("COSI_S3_BUCKET_ID", "COSI_S3_ENDPOINT", "COSI_S3_REGION", "COSI_S3_ADDRESSING_STYLE",
             "COSI_S3_ACCESS_KEY_ID", "COSI_S3_ACCESS_SECRET_KEY")
# What COSI v1alpha2 writes for the other protocols (client/apis/objectstorage/v1alpha2/protocols.go).
AZURE_PREFIX, GCS_PREFIX = "COSI_AZURE_", "COSI_GCS_"
AZURE_REFUSAL = ("holds Azure Blob credentials, which COSI hands out as a SAS token; the registry's azure driver "
                 "takes an account key, a client secret or the pod's identity, never a SAS token: use "
                 "spec.config.storage.azure with the account key in a Secret")
GCS_REFUSAL = ("holds GCS credentials, which COSI hands out as HMAC keys; the registry's gcs driver takes a "
               "service account's JSON key or the pod's identity: use spec.config.storage.gcs")
KEP_KEYS = ("BUCKET_NAME", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", None,
            "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@dataclass(frozen=True, repr=False)
class S3Credentials:
    """Where the registry's bucket is and the static key that opens it."""

    bucket: str
    endpoint: str | None
    region: str
    access_key_id: str
    secret_access_key: str
    addressing_style: Literal["path", "virtual"] | None = None
    session_token: str = ""  # temporary credentials (storage.s3.credentials.sessionTokenKey)

    @property
    def has_key(self) -> bool:
        """False for the pod's own identity (storage.s3 without credentials): the SDK finds the key itself."""
        return bool(self.access_key_id and self.secret_access_key)

    def __repr__(self) -> str:
        return (
            f"S3Credentials(bucket={self.bucket!r}, endpoint={self.endpoint!r}, region={self.region!r}, "
            f"access_key_id=<hidden>, secret_access_key=<hidden>, addressing_style={self.addressing_style!r}, "
            f"session_token={'<hidden>' if self.session_token else None})"
        )

    __str__ = __repr__


def read_cosi(directory: Path) -> S3Credentials:
    """Read the BucketAccess credentials Secret mounted at `directory` (the mount root's cosi/)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{SOURCE}/", f"the Secret volume {SOURCE}/ is not mounted ({WHY} needs the "
                         "BucketAccess credentials Secret)")
    keys = set(list_keys(directory))
    if BUCKET_INFO_KEY in keys:
        return _from_bucket_info(directory)
    if keys & {k for k in COSI_KEYS if k}:
        return _from_keys(directory, COSI_KEYS)
    if keys & {k for k in KEP_KEYS if k}:
        return _from_keys(directory, KEP_KEYS)
    if any(k.startswith(AZURE_PREFIX) for k in keys):
        raise InputError(f"{SOURCE}/", AZURE_REFUSAL)
    if any(k.startswith(GCS_PREFIX) for k in keys):
        raise InputError(f"{SOURCE}/", GCS_REFUSAL)
    raise InputError(f"{SOURCE}/", f"holds neither key {BUCKET_INFO_KEY} (COSI v1alpha1) nor COSI_S3_* or AWS_* "
                     f"keys (COSI v1alpha2); keys present: {', '.join(sorted(keys)) or 'none'}")


def _from_bucket_info(directory: Path) -> S3Credentials:
    where = f"{SOURCE}/{BUCKET_INFO_KEY}"
    text = read_text(directory.parent, SOURCE, BUCKET_INFO_KEY, why=WHY, limit=DOCUMENT_LIMIT)
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        # json.loads recurses once per level: a 200k-deep document would end in RecursionError.
        raise InputError(where, f"nests JSON {depth} levels deep; at most {MAX_JSON_DEPTH} are accepted "
                         "(BucketInfo needs 3)")
    try:
        info = json.loads(text)
    except json.JSONDecodeError as exc:
        # exc.msg and the position never include the document's text.
        raise InputError(where, f"is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    spec = _member(info, "spec", where, "", dict)
    bucket = _member(spec, "bucketName", where, "spec.", str)
    auth_type = _member(spec, "authenticationType", where, "spec.", str)
    if auth_type == "IAM":
        raise InputError(f"{where}: spec.authenticationType", "is IAM, which Berth does not support: the "
                         "registry's s3 driver needs a static access key (use a BucketAccessClass with "
                         "authenticationType Key)")
    if auth_type not in ("Key", "KEY"):
        raise InputError(f"{where}: spec.authenticationType", f"is {auth_type[:32]!r}; expected Key (or KEY)")
    if not spec.get("secretS3") and spec.get("secretAzure"):
        raise InputError(f"{where}: spec.secretAzure", AZURE_REFUSAL)
    s3 = _member(spec, "secretS3", where, "spec.", dict)
    access_key_id = _member(s3, "accessKeyID", where, "spec.secretS3.", str)
    secret_access_key = _member(s3, "accessSecretKey", where, "spec.secretS3.", str)
    endpoint = _member(s3, "endpoint", where, "spec.secretS3.", str, required=False)
    region = _member(s3, "region", where, "spec.secretS3.", str, required=False)
    return S3Credentials(
        bucket=bucket,
        endpoint=_endpoint(endpoint, f"{where}: spec.secretS3.endpoint"),
        region=region or DEFAULT_REGION,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
    )


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in a JSON text (brackets inside strings do not count); linear in the
    text's size, without recursion."""
    depth = deepest = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _member(obj: Any, name: str, where: str, prefix: str, kind: type, *, required: bool = True) -> Any:
    """obj[name], checked for type and emptiness; errors name the JSON path, never the value."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: {prefix.rstrip('.')}" if prefix else where, "is not a JSON object")
    value = obj.get(name)
    path = f"{where}: {prefix}{name}"
    if value is None or value == "" or value == {}:
        if required:
            raise InputError(path, "is missing" if name not in obj else "is empty")
        return None
    if not isinstance(value, kind):
        expected = "an object" if kind is dict else "a string"
        raise InputError(path, f"is not {expected}")
    return value.strip() if isinstance(value, str) else value


def _from_keys(directory: Path, names: tuple[str | None, ...]) -> S3Credentials:
    bucket_key, endpoint_key, region_key, style_key, id_key, secret_key = names
    root = directory.parent

    def required(key: str) -> str:
        return read_text(root, SOURCE, key, why=WHY)

    def optional(key: str | None) -> str | None:
        if key is None or not os.path.lexists(directory / key):
            return None
        try:
            return read_text(root, SOURCE, key, why=WHY)
        except InputError as exc:
            if exc.message.startswith("is empty"):
                return None
            raise

    style = optional(style_key)
    if style is not None:
        style = style.lower()
        if style not in ("path", "virtual"):
            raise InputError(f"{SOURCE}/{style_key}", "must be path or virtual")
    bucket = required(bucket_key)
    endpoint = _endpoint(optional(endpoint_key), f"{SOURCE}/{endpoint_key}")
    return S3Credentials(
        bucket=bucket,
        endpoint=endpoint,
        region=optional(region_key) or DEFAULT_REGION,
        access_key_id=required(id_key),
        secret_access_key=required(secret_key),
        addressing_style=style,  # type: ignore[arg-type]
    )


def _endpoint(value: str | None, where: str) -> str | None:
    """A full http(s) URL; a bare host[:port] (as some COSI drivers write it) is taken as https."""
    if not value:
        return None
    if "://" not in value:
        value = f"https://{value}"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise InputError(where, "is not a valid http(s) URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(where, "is not a valid http(s) URL")
    return value.rstrip("/")
