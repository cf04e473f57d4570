"""Constrained scalar types shared by the Registry API models.

Each type carries its own regular expression so the same rule is enforced by
pydantic and, through the generated CRD, by the Kubernetes API server.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, WithJsonSchema

# Counts (thresholds, cache entries, database numbers) are Go `int`s in the registry; a YAML integer past int64
# makes it refuse its config at start. Kubernetes' own counts (replicas) are int32: bound every count there.
INT32_MAX = 2**31 - 1

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



def v3_only_message(field_path: str) -> str:
    """The refusal of a Distribution-3-only field (`config.proxy.ttl`) on a spec that runs Distribution 2."""
    return (f"{field_path} needs Distribution 3, and this registry runs Distribution 2 "
            "(spec.distribution, else the image tag)")


def _bounded_number(digits: int) -> str:
    return rf"[0-9]{{1,{digits}}}(\.[0-9]+)?"


# What both registry versions accept: Go's time.Duration is int64 nanoseconds, so ParseDuration fails above
# 2562047h47m16.854775807s and the registry refuses its config at start (`drainTimeout: 100000000h` did).
# The bound is written as a pattern the API server enforces too: units in Go's printed order, each at most
# once, with at most 6 digits of hours, 7 of minutes, 9 of seconds, 12 of ms, 15 of us and 18 of ns. The
# largest sum (999999h + 9999999m + 999999999s + ...) is under 2277800h, inside Go's range.
DURATION_MAX_HOURS = 999999
DURATION_BOUNDED_PATTERN = (
    "^(0|"
    + "".join(f"({_bounded_number(d)}{unit})?" for d, unit in
              ((6, "h"), (7, "m"), (9, "s"), (12, "ms"), (15, "(us|µs)"), (18, "ns")))
    + ")$"
)
_DURATION_BOUNDED = re.compile(DURATION_BOUNDED_PATTERN)
GO_DURATION_MAX_NANOSECONDS = 2**63 - 1


def _duration_in_range(text: str) -> str:
    if not _DURATION_BOUNDED.fullmatch(text):
        # The value is not repeated: errors name the field, never the input.
        raise ValueError(
            f"must be at most {DURATION_MAX_HOURS}h (Go's time.Duration ends at 2562047h, and the registry "
            "refuses a longer one at start), with units in the order h, m, s, ms, us, ns, each at most once")
    return text


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str | None) -> float:
    """Seconds in a Go duration ("30s", "1m30s", "500ms", "0"); 0 for None or anything that is not one. The
    one parser of the operator and the agent; berth-supervise, which cannot import pydantic, keeps a copy
    (berth_supervise/notify.py duration_seconds) that tests/api/test_durations.py holds to the same answers."""
    if not text:
        return 0.0
    parts = _DURATION_PART.findall(text)
    if "".join(number + unit for number, unit in parts) != text:
        return 0.0
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


# The language (pattern) is checked first so a malformed value keeps its "should match pattern" message; the
# CRD carries the bounded pattern, which accepts exactly what the two checks accept together.
Duration = Annotated[
    str,
    StringConstraints(pattern=DURATION_PATTERN),
    AfterValidator(_duration_in_range),
    WithJsonSchema({"type": "string", "pattern": DURATION_BOUNDED_PATTERN, "minLength": 1}),
]
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


class ConfigMapKeyRef(ApiModel):
    """A key inside a ConfigMap in the Registry's namespace."""

    name: ObjectName = Field(description="Name of the ConfigMap, in the Registry's namespace.")
    field: SecretKey = Field(description="Key inside the ConfigMap's data that holds the value.")
