"""spec.config.notifications: Distribution's webhook notifications (docs/design.md §4.7).

Distribution's `notifications` section (configuration.go): `endpoints[]` {name, disabled, url, headers, timeout,
threshold, backoff, ignoredmediatypes} on 2.8 and 3.x; `endpoints[].ignore` {mediatypes, actions} and
`events.includereferences` on 3.x only. The registry reads it once, at start: an edit, or a rotated header value,
is applied with a hitless restart. Its queue is in memory (distribution#2422): events still queued when a process
exits are lost.

Header values that are credentials (an Authorization token) come from one Secret (`secretName`, mounted whole as
the `notifications` volume and watched over the API like every Secret): each header names its key there. One
Secret for every endpoint keeps the pod's volumes and the agent's Role to one more name, whatever the number of
endpoints.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .types import ApiModel, Duration, ObjectName, SecretKey, v3_only_message

NOTIFICATIONS_PATH = "spec.config.notifications"
# The fields Distribution 2.8 does not know (path below spec.config.notifications), refused on 2.8.
NOTIFICATIONS_V3_FIELDS = ("endpoints[].ignore", "events.includeReferences")
# RFC 7230 token: what Go's http.Header accepts as a field name.
HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
MEDIA_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$"


HEADER_SOURCE_MESSAGE = "a header takes exactly one of value and secretKey"
SECRET_NEEDED_MESSAGE = "a header with secretKey needs config.notifications.secretName"
UNIQUE_NAMES_MESSAGE = "config.notifications.endpoints: each name once"


def notifications_v3_message(field: str) -> str:
    return v3_only_message(f"config.notifications.{field}")


class NotificationHeader(ApiModel):
    """One request header: a plain value, or a key of the notifications Secret (never both)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "has(self.value) != has(self.secretKey)", "message": HEADER_SOURCE_MESSAGE},
            ]
        }
    }

    name: str = Field(min_length=1, max_length=256, pattern=HEADER_NAME_PATTERN,
                      description="Header name, e.g. Authorization.")
    value: str | None = Field(None, max_length=4096, pattern=r"^[^\r\n]*$",
                              description="A value that is no secret (it is part of the Registry object).")
    secret_key: SecretKey | None = Field(
        None, alias="secretKey",
        description="Key of spec.config.notifications.secretName holding the value (e.g. an Authorization "
        "token). Rotating it restarts the registry hitlessly; the value is never logged nor put in status.")

    @model_validator(mode="after")
    def _one_source(self) -> NotificationHeader:
        if (self.value is None) == (self.secret_key is None):
            raise ValueError(HEADER_SOURCE_MESSAGE)
        return self


class NotificationIgnore(ApiModel):
    media_types: list[str] = Field(default_factory=list, alias="mediaTypes", max_length=64,
                                   description="Media types whose events are not sent.")
    actions: list[Literal["pull", "push", "delete", "mount"]] = Field(
        default_factory=list, max_length=4, description="Actions whose events are not sent.")


class NotificationEndpoint(ApiModel):
    name: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$",
                      description="Name of the endpoint (labels the registry's registry_notifications_* metrics).")
    disabled: bool = Field(False, description="Keep the endpoint configured but send nothing.")
    url: str = Field(min_length=1, max_length=2048, pattern=r"^https?://[^\s/?#]+(/[^\s]*)?$",
                     description="URL events are POSTed to (application/vnd.docker.distribution.events.v2+json).")
    headers: list[NotificationHeader] = Field(default_factory=list, max_length=32,
                                              description="Headers sent with every request.")
    timeout: Duration = Field("1s", description="Time to wait for the endpoint to answer.")
    threshold: int = Field(10, ge=1, le=10000, description="Failures before the endpoint is backed off.")
    backoff: Duration = Field("1s", description="How long a backed-off endpoint waits before trying again.")
    ignored_media_types: list[str] = Field(
        default_factory=list, alias="ignoredMediaTypes", max_length=64,
        description="Media types of manifests whose events are not sent (2.8 and 3.x).")
    ignore: NotificationIgnore | None = Field(
        None, description="Media types and actions whose events are not sent (Distribution 3 only).")


class NotificationEvents(ApiModel):
    include_references: bool = Field(
        False, alias="includeReferences",
        description="Include the references of a manifest (its layers and config) in its events "
        "(Distribution 3 only).")


class Notifications(ApiModel):
    """Webhook notifications of pushes, pulls, deletes and mounts (Distribution's notifications section)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "has(self.secretName) || "
                         "self.endpoints.all(e, !has(e.headers) || e.headers.all(h, !has(h.secretKey)))",
                 "message": SECRET_NEEDED_MESSAGE},
                {"rule": "self.endpoints.all(e, self.endpoints.exists_one(f, f.name == e.name))",
                 "message": UNIQUE_NAMES_MESSAGE},
            ]
        }
    }

    secret_name: ObjectName | None = Field(
        None, alias="secretName",
        description="Secret holding the header values named by secretKey (one Secret for every endpoint).")
    endpoints: list[NotificationEndpoint] = Field(min_length=1, max_length=16, description="Where events go.")
    events: NotificationEvents | None = Field(None, description="What events carry (Distribution 3 only).")

    @model_validator(mode="after")
    def _keys_need_the_secret(self) -> Notifications:
        if self.secret_name is None and self.secret_keys():
            raise ValueError(SECRET_NEEDED_MESSAGE)
        names = [endpoint.name for endpoint in self.endpoints]
        if len(set(names)) != len(names):
            raise ValueError(UNIQUE_NAMES_MESSAGE)
        return self

    def secret_keys(self) -> list[str]:
        """Every key of the Secret some header reads, once, in order."""
        keys: list[str] = []
        for endpoint in self.endpoints:
            for header in endpoint.headers:
                if header.secret_key is not None and header.secret_key not in keys:
                    keys.append(header.secret_key)
        return keys

    def v3_fields_set(self) -> list[str]:
        """The Distribution-3-only fields set, as paths below config.notifications."""
        found = []
        if any(endpoint.ignore is not None for endpoint in self.endpoints):
            found.append("endpoints[].ignore")
        if self.events is not None:
            found.append("events.includeReferences")
        return found


__all__ = ["HEADER_SOURCE_MESSAGE", "NOTIFICATIONS_PATH", "NOTIFICATIONS_V3_FIELDS", "SECRET_NEEDED_MESSAGE",
           "UNIQUE_NAMES_MESSAGE", "NotificationEndpoint", "NotificationEvents",
           "NotificationHeader", "NotificationIgnore", "Notifications", "notifications_v3_message"]
