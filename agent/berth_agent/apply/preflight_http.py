"""One HTTP(S) request of a pre-flight (cloud storage credentials, a cache's upstream): no redirect followed (it
would carry the credentials elsewhere), at most 64 KiB of the answer read, the connection closed after it."""

from __future__ import annotations

import http.client
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..core.errors import PreflightError

MAX_BODY = 65536


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: dict[str, str]  # names in lower case, a repeated one's values joined with ", "
    body: bytes


def exchange(method: str, url: str, headers: dict[str, str], body: bytes | None = None, *,
             timeout: float) -> Answer:
    """The answer to one request; OSError and HTTPException pass up to the caller."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.netloc, timeout=timeout, context=ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(parts.netloc, timeout=timeout)
    try:
        connection.request(method, (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), body=body,
                           headers=headers)
        response = connection.getresponse()
        data = response.read(MAX_BODY)
        found: dict[str, str] = {}
        for name, value in response.getheaders():  # a repeated header joined, as getheader() gives it
            name = name.lower()
            found[name] = f"{found[name]}, {value}" if name in found else value
        return Answer(response.status, response.reason, found, data)
    finally:
        connection.close()


def request(method: str, url: str, headers: dict[str, str], body: bytes | None, *, timeout: float, where: str,
            what: str) -> Answer:
    """`exchange`, a failure to get any answer raised as PreflightError naming `where` and the service."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PreflightError(f"{where}: {what} is not an http(s) URL")
    try:
        return exchange(method, url, headers, body, timeout=timeout)
    except (OSError, http.client.HTTPException) as exc:
        raise PreflightError(f"{where}: cannot reach {what} at {parts.scheme}://{parts.netloc}: "
                             f"{type(exc).__name__}") from None


__all__ = ["Answer", "exchange", "request"]
