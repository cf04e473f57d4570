"""Pre-flight of Azure Blob storage (spec.config.storage.azure): the credentials a new config carries must
open the container before the registry restarts onto them.

The registry's azure driver (Distribution 3.1.1, `registry/storage/driver/azure/auth.go`) signs every request with
the account key (shared_key) or gets a token for https://storage.azure.com from Microsoft Entra ID with the client
secret (client_secret, azidentity's ClientSecretCredential); it never checks the container at start, so a key that
was regenerated, or a container that does not exist, would show only as 500s on every push and pull. So before a
restart: one Get Container Properties (`GET <serviceurl>/<container>?restype=container`), signed the way the driver
signs (SharedKey over the canonical request) or with a token got from the client secret. 200 passes; anything else
raises PreflightError quoting the service's HTTP status and its `x-ms-error-code` (AuthorizationFailure,
AuthenticationFailed, ContainerNotFound, invalid_client...), never a credential. default_credentials come from the
pod's identity, not from the config, and are not checked here.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from ..core.errors import PreflightError
from . import preflight_http

TIMEOUT_SECONDS = 5.0
WHERE = "spec.config.storage.azure"
API_VERSION = "2021-08-06"  # a Blob service version both Azure and Azurite 3.37 serve; bearer tokens need >= 2017-11-09
STORAGE_SCOPE = "https://storage.azure.com/.default"
DEFAULT_AUTHORITY = "https://login.microsoftonline.com"  # azidentity's default; AZURE_AUTHORITY_HOST overrides it
_CODE = re.compile(r"^[A-Za-z0-9_.]{1,64}$")


@dataclass(frozen=True, repr=False)
class AzureTarget:
    """What the rendered azure section makes the driver use (parser.go's defaults applied)."""

    account: str
    container: str
    service_url: str
    credentials_type: str
    account_key: str | None  # shared_key
    tenant_id: str | None  # client_secret
    client_id: str | None
    client_secret: str | None

    def __repr__(self) -> str:
        return (f"AzureTarget(account={self.account!r}, container={self.container!r}, "
                f"service_url={self.service_url!r}, type={self.credentials_type!r}, credentials=<hidden>)")


def azure_target(document: dict[str, Any]) -> AzureTarget | None:
    """The container and credentials a rendered config uses, or None for other storage."""
    section = (document.get("storage") or {}).get("azure")
    if not isinstance(section, dict):
        return None
    account = str(section.get("accountname", ""))
    credentials = section.get("credentials") or {}
    realm = section.get("realm") or "core.windows.net"
    return AzureTarget(
        account=account, container=str(section.get("container", "")),
        service_url=str(section.get("serviceurl") or f"https://{account}.blob.{realm}").rstrip("/"),
        credentials_type=str(credentials.get("type", "")),
        account_key=section.get("accountkey"), tenant_id=credentials.get("tenantid"),
        client_id=credentials.get("clientid"), client_secret=credentials.get("secret"))


def check_container(target: AzureTarget, *, timeout: float = TIMEOUT_SECONDS) -> None:
    """Get Container Properties with the target's credentials: 200 passes, anything else raises PreflightError."""
    if target.credentials_type == "default_credentials":
        return
    url = f"{target.service_url}/{quote(target.container, safe='')}?restype=container"
    headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": API_VERSION}
    if target.credentials_type == "shared_key":
        if not target.account_key:
            raise PreflightError(f"{WHERE}.credentials.secret: the account key is empty")
        headers["Authorization"] = shared_key_authorization("GET", url, headers, target.account, target.account_key)
    elif target.credentials_type == "client_secret":
        headers["Authorization"] = "Bearer " + _token(target, timeout=timeout)
    else:
        raise PreflightError(f"{WHERE}.credentials.type: {target.credentials_type!r} is not one the driver knows")
    answer = preflight_http.request("GET", url, headers, None, timeout=timeout, where=WHERE, what="the Blob service")
    status, answer_headers, body = answer.status, answer.headers, answer.body
    if status == 200:
        return
    code = answer_headers.get("x-ms-error-code", "") or _xml_code(body)
    code = code if _CODE.match(code) else ""
    raise PreflightError(
        f"{WHERE}: the container {target.container!r} of account {target.account!r} refused the new credentials "
        f"(HTTP {status}{', ' + code if code else ''}); keeping the running config")


def shared_key_authorization(method: str, url: str, headers: dict[str, str], account: str, key: str) -> str:
    """`SharedKey account:signature` for a Blob request without a body (the Storage services' Shared Key scheme,
    version 2015-02-21 and later: an empty Content-Length for a zero-length request)."""
    parts = urlsplit(url)
    lowered = {name.lower(): value.strip() for name, value in headers.items()}
    standard = ["content-encoding", "content-language", "content-length", "content-md5", "content-type", "date",
                "if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range"]
    canonical_headers = "".join(f"{name}:{lowered[name]}\n" for name in sorted(lowered) if name.startswith("x-ms-"))
    resource = f"/{account}{parts.path or '/'}"
    query: dict[str, list[str]] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        query.setdefault(name.lower(), []).append(value)
    resource += "".join(f"\n{name}:{','.join(sorted(values))}" for name, values in sorted(query.items()))
    string_to_sign = "\n".join([method, *(lowered.get(name, "") for name in standard)]) + "\n" + canonical_headers \
        + resource
    try:
        secret = base64.b64decode(key, validate=True)
    except ValueError:
        raise PreflightError(f"{WHERE}.credentials.secret: the account key is not base64") from None
    signature = base64.b64encode(hmac.new(secret, string_to_sign.encode(), hashlib.sha256).digest()).decode()
    return f"SharedKey {account}:{signature}"


def _token(target: AzureTarget, *, timeout: float) -> str:
    """An access token for the storage scope from Microsoft Entra ID (client credentials grant)."""
    authority = os.environ.get("AZURE_AUTHORITY_HOST", DEFAULT_AUTHORITY).rstrip("/")
    url = f"{authority}/{quote(str(target.tenant_id), safe='')}/oauth2/v2.0/token"
    form = urlencode({"grant_type": "client_credentials", "client_id": target.client_id,
                      "client_secret": target.client_secret or "", "scope": STORAGE_SCOPE}).encode()
    reply = preflight_http.request("POST", url, {"Content-Type": "application/x-www-form-urlencoded"}, form,
                                   timeout=timeout, where=WHERE, what="Microsoft Entra ID")
    status, body = reply.status, reply.body
    try:
        answer = json.loads(body)
    except ValueError:
        answer = {}
    if status == 200 and isinstance(answer.get("access_token"), str):
        return answer["access_token"]
    error = str(answer.get("error", "")) if isinstance(answer, dict) else ""
    codes = answer.get("error_codes") if isinstance(answer, dict) else None
    detail = ", ".join(x for x in [error if _CODE.match(error) else "",
                                   *(f"AADSTS{c}" for c in (codes or [])[:2] if isinstance(c, int))] if x)
    raise PreflightError(f"{WHERE}.credentials: Microsoft Entra ID refused the client secret for tenant "
                         f"{target.tenant_id} (HTTP {status}{', ' + detail if detail else ''}); keeping the running "
                         "config")


def _xml_code(body: bytes) -> str:
    match = re.search(rb"<Code>([A-Za-z0-9.]{1,64})</Code>", body)
    return match.group(1).decode() if match else ""
