"""SecretApiWatcher: one Secret the pod mounts, watched by name over the Kubernetes API
(docs/decisions/0012-secrets-over-the-api.md).

The kubelet brings a changed Secret into the pod's volume 60 to 90 s after the API change
(docs/upstream.md#k8s-secret-refresh); the API server shows it at once. So, in API mode, the agent watches each
mounted Secret (`--api-secret VOLUME=NAME`) as a single object, with the same list/watch machinery as its Registry
(resume from the last resourceVersion, relist on 410 Gone, server and client timeouts, backoff:
kube_watch.SingleObjectWatcher), and hands the pipeline a SecretCopy. Which copy, mount or API, a render uses is
decided in berth_agent.sources.api_secrets.

The Role names exactly these Secrets (resourceNames), which a single-object watch honours
(docs/upstream.md#k8s-rbac-resource-names).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.health import Health
from ..kube.client import ApiClient, api_path
from .change import Change, Emit
from .kube_watch import SingleObjectWatcher

SECRETS_PATH = "/api/v1/namespaces/{namespace}/secrets"
CONFIG_MAPS_PATH = "/api/v1/namespaces/{namespace}/configmaps"


def data_fingerprint(data: Mapping[str, bytes]) -> str:
    """Identity of a Secret's payload (every key and value), the same for an API copy and a mounted volume."""
    digest = hashlib.sha256()
    for key in sorted(data):
        value = data[key]
        digest.update(key.encode() + b"\0" + str(len(value)).encode() + b"\0" + value)
    return digest.hexdigest()


@dataclass(frozen=True, repr=False)
class SecretCopy:
    """A Secret as the API server showed it: decoded data, never printed (the repr names the Secret only)."""

    volume: str  # the mount directory it stands for: cosi, htpasswd, http-secret, redis, tls
    name: str
    resource_version: str
    data: Mapping[str, bytes]
    fingerprint: str

    def __repr__(self) -> str:
        return f"SecretCopy(volume={self.volume!r}, name={self.name!r}, resource_version={self.resource_version!r})"

    __str__ = __repr__


def secret_copy(volume: str, obj: dict, kind: str = "Secret") -> SecretCopy:
    """The decoded copy of a Secret object (or a ConfigMap's: `data` as UTF-8 text, `binaryData` base64, as the
    kubelet writes both into its volume); ValueError (naming the key only) if base64 data is not base64."""
    data: dict[str, bytes] = {}
    if kind == "ConfigMap":
        data.update({key: str(value or "").encode() for key, value in (obj.get("data") or {}).items()})
    encoded = (obj.get("binaryData") if kind == "ConfigMap" else obj.get("data")) or {}
    for key, value in encoded.items():
        try:
            data[key] = base64.b64decode(value or "", validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise ValueError(f"data key {key!r} is not base64") from None
    meta = obj.get("metadata") or {}
    return SecretCopy(volume=volume, name=str(meta.get("name") or ""),
                      resource_version=str(meta.get("resourceVersion") or ""),
                      data=data, fingerprint=data_fingerprint(data))


class SecretApiWatcher(SingleObjectWatcher):
    """Emits Change("secret:<volume>", secret=SecretCopy) when the payload changes (a new resourceVersion with
    the same data is not a change), or Change("secret:<volume>", error=...) when it cannot be read. With
    kind="ConfigMap" it watches a ConfigMap (token auth's trust) the same way."""

    kind = "Secret"
    log_key = "secret"

    def __init__(self, api_client: ApiClient, namespace: str, name: str, volume: str, health: Health,
                 kind: str = "Secret", **options: Any) -> None:
        super().__init__(api_client, namespace, name, health, **options)
        self.volume = volume
        if kind == "ConfigMap":
            self.kind, self.log_key = "ConfigMap", "configmap"
        self.name = f"secret-api-{volume}"  # metrics label and liveness loop: one bounded value per volume

    def _collection_path(self) -> str:
        return api_path(CONFIG_MAPS_PATH if self.kind == "ConfigMap" else SECRETS_PATH, namespace=self.namespace)

    def _offer(self, emit: Emit, obj: dict) -> None:
        try:
            copy = secret_copy(self.volume, obj, self.kind)
        except ValueError as exc:
            self._offer_state(emit, ("error", f"{self.kind} {self.ref}: {exc}"), None)
            return
        self._offer_state(emit, ("ok", copy.fingerprint), copy)

    def _offer_state(self, emit: Emit, state: tuple[str, str], obj: Any) -> None:
        if state == self._last:
            return
        self._last = state
        source = f"secret:{self.volume}"
        emit(Change(source, secret=obj) if state[0] == "ok" else Change(source, error=state[1]))


__all__ = ["SecretApiWatcher", "SecretCopy", "data_fingerprint", "secret_copy"]
