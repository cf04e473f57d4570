"""Constrained scalar types shared by the Registry API models.

Each type carries its own regular expression so the same rule is enforced by
pydantic and, through the generated CRD, by the Kubernetes API server.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

# Go's time.ParseDuration syntax, which is what the registry's config uses ("168h", "10ms", "1h30m").
DURATION_PATTERN = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"
# Kubernetes resource.Quantity, restricted to the non-negative forms people write for sizes and CPU (500m).
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
# RFC 1123 subdomain: names of Secrets, PVCs, BucketClaims and classes.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Keys of a Secret's data.
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# host:port or :port, as the registry's http.addr and health.tcp[].addr take it.
ADDR_PATTERN = r"^([^:/\s]*|\[[0-9a-fA-F:.]+\]):[0-9]{1,5}$"

Duration = Annotated[str, StringConstraints(pattern=DURATION_PATTERN)]
Quantity = Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN)]
ObjectName = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN_PATTERN, min_length=1, max_length=253)]
SecretKey = Annotated[str, StringConstraints(pattern=SECRET_KEY_PATTERN, min_length=1, max_length=253)]


def _valid_port(addr: str) -> str:
    port = int(addr.rsplit(":", 1)[1])
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is outside 1-65535")
    return addr


Addr = Annotated[str, StringConstraints(pattern=ADDR_PATTERN), AfterValidator(_valid_port)]

# Distribution compiles these with Go's RE2, which has no look-around and no back-references.
_RE2_UNSUPPORTED = re.compile(r"\(\?<?[=!]|\\[1-9]")


def _valid_regex(pattern: str) -> str:
    if _RE2_UNSUPPORTED.search(pattern):
        raise ValueError(f"regular expression {pattern!r} uses look-around or a back-reference, which Go's RE2 lacks")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


Regex = Annotated[str, StringConstraints(min_length=1), AfterValidator(_valid_regex)]


class ApiModel(BaseModel):
    """Base of every API model: camelCase aliases as written in the CR, unknown fields refused, and JSON types
    taken exactly (strict): the CRD refuses `enabled: 'yes'` or `replicas: "2"`, so a Registry file must not
    render them either (tests/api/test_strict_types.py)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True, strict=True)


class SecretKeyRef(ApiModel):
    """A key inside a Secret in the Registry's namespace."""

    name: ObjectName = Field(description="Name of the Secret, in the Registry's namespace.")
    field: SecretKey = Field(description="Key inside the Secret's data that holds the value.")
