"""What every Kubernetes API call of the agent shares: the patch type it writes status with, the path of its own
Registry, and how a failed call is described (HTTP status and reason, never the response body, which can carry
secrets)."""

from __future__ import annotations

import http.client

from berth_api import GROUP, PLURAL, VERSION

from .client import api_path

MERGE_PATCH = "application/merge-patch+json"
REGISTRIES_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}"


class WatchErrorEvent(Exception):
    """An ERROR event other than 410 in a watch stream; the message holds its code and reason only."""


def registry_path(namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    """The Registries of `namespace`, one of them by `name`, or that one's `subresource` (status)."""
    path = api_path(REGISTRIES_PATH, namespace=namespace)
    if name:
        path += api_path("/{name}", name=name)
    return f"{path}/{subresource}" if subresource else path


def describe_api_error(exc: BaseException) -> str:
    """A short, secret-free description: the HTTP status and reason, or the connection error's type.

    Never str() of an error from elsewhere: an HTTP library's can carry response headers and body.
    """
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status:
        reason = getattr(exc, "reason", None) or ""
        return f"API answered {status} {reason}".rstrip()
    if isinstance(exc, WatchErrorEvent):
        return str(exc)
    if isinstance(exc, OSError | http.client.HTTPException):
        return f"cannot reach the API server ({type(exc).__name__})"
    if isinstance(exc, ValueError):
        return f"malformed answer from the API server ({type(exc).__name__})"
    return type(exc).__name__


__all__ = ["MERGE_PATCH", "REGISTRIES_PATH", "WatchErrorEvent", "describe_api_error", "registry_path"]
