"""The generated HTTP secret (signs upload state; every replica must share it,
docs/upstream.md#dist-http-secret)."""

from __future__ import annotations

import base64
from typing import Any

from berth_api import Registry
from berth_api.pod import HTTP_SECRET_KEY

from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import HTTP_SECRET_COMPONENT, object_meta, registry_name


def name(reg: Registry) -> str:
    """The Secret the operator generates when spec.http.secret is absent (key berth_api.pod.HTTP_SECRET_KEY)."""
    return f"{registry_name(reg)}-http-secret"


def needed(reg: Registry) -> bool:
    return reg.spec.http.secret is None


def build(reg: Registry, facts: ClusterFacts, value: str) -> dict[str, Any] | None:
    """None when spec.http.secret names a Secret of the user's. The apply layer generates `value` once and
    never overwrites an existing Secret with a new one."""
    if not needed(reg):
        return None
    if not value:
        raise ValueError("the generated HTTP secret value is empty")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(reg, name(reg), HTTP_SECRET_COMPONENT),
        "type": "Opaque",
        # data, not stringData: what is read back equals what was written, also on API servers (kmock) that do
        # not convert stringData.
        "data": {HTTP_SECRET_KEY: base64.b64encode(value.encode()).decode("ascii")},
    }


BEHAVIOURS = (Behaviour("v1", "Secret", builders=(build,)),)
