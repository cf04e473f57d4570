"""What every Kubernetes API client of the agent shares: the patch type it writes status with, and how a
failed call is described (HTTP status and reason, never the response body, which can carry secrets)."""

from __future__ import annotations

MERGE_PATCH = "application/merge-patch+json"


class WatchErrorEvent(Exception):
    """An ERROR event other than 410 in a watch stream; the message holds its code and reason only."""


def describe_api_error(exc: BaseException) -> str:
    """A short, secret-free description: the HTTP status and reason, or the connection error's type.

    Never str(ApiException): it carries response headers and body.
    """
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status:
        reason = getattr(exc, "reason", None) or ""
        return f"API answered {status} {reason}".rstrip()
    if isinstance(exc, WatchErrorEvent):
        return str(exc)
    if isinstance(exc, OSError) or type(exc).__module__.startswith("urllib3"):
        reason = getattr(exc, "reason", None)  # urllib3 MaxRetryError / ProtocolError wrap the real cause
        inner = reason if isinstance(reason, BaseException) else exc
        return f"cannot reach the API server ({type(inner).__name__})"
    if isinstance(exc, ValueError):
        return f"malformed answer from the API server ({type(exc).__name__})"
    return type(exc).__name__



__all__ = ["MERGE_PATCH", "WatchErrorEvent", "describe_api_error"]
