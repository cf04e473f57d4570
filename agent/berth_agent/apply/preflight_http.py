"""One HTTP(S) request of a pre-flight (cloud storage credentials, a cache's upstream): no redirect followed (it
would carry the credentials elsewhere), at most 64 KiB of the answer read, the connection closed after it.

Through the registry's egress proxy when it has one (spec.env): the operator hands the agent the proxy variables
of spec.env as BERTH_PREFLIGHT_<name> (under their own names the official Kubernetes client would send the
agent's API calls through the proxy too). Chosen as the registry's Go net/http chooses
(golang.org/x/net/http/httpproxy): HTTPS_PROXY for https URLs, HTTP_PROXY for http ones, each in upper case else
lower case; NO_PROXY's hosts, domains (and their subdomains; a leading dot: subdomains only), IP addresses,
CIDR ranges and `*` go direct, and so do localhost and loopback addresses. So a pre-flight never calls
unreachable an upstream the registry reaches, nor the other way round.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

from berth_api.pod import PREFLIGHT_ENV_PREFIX

from ..core.errors import PreflightError

MAX_BODY = 65536


@dataclass(frozen=True)
class Proxy:
    host: str
    port: int
    authorization: str | None  # Proxy-Authorization, from the proxy URL's user:password


def _variable(env: Mapping[str, str], name: str) -> str:
    return env.get(PREFLIGHT_ENV_PREFIX + name.upper()) or env.get(PREFLIGHT_ENV_PREFIX + name.lower()) or ""


def _no_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Whether httpproxy's NO_PROXY rules (and its loopback exception) send host:port direct."""
    host = host.lower().strip("[]")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None and address.is_loopback:
        return True
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry.strip("[]"), strict=False):
                    return True
                continue
            except ValueError:
                pass
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        if name.startswith("*."):
            name = name[1:]
        if name.startswith("."):
            if host.endswith(name):
                return True
        elif host == name or host.endswith("." + name):
            return True
    return False


def proxy_for(url: SplitResult, env: Mapping[str, str] | None = None) -> Proxy | None:
    """The egress proxy a request to `url` goes through, None: direct. PreflightError for a proxy URL the
    pre-flight cannot use (it names the variable, never its value, which may hold a password)."""
    env = os.environ if env is None else env
    name = "HTTPS_PROXY" if url.scheme == "https" else "HTTP_PROXY"
    value = _variable(env, name)
    if not value or _no_proxy(url.hostname or "", url.port or (443 if url.scheme == "https" else 80),
                              _variable(env, "NO_PROXY")):
        return None
    proxy = urlsplit(value if "://" in value else f"http://{value}")
    if proxy.scheme != "http" or not proxy.hostname:
        raise PreflightError(f"env {name}: the pre-flight can use an http:// proxy only (scheme {proxy.scheme!r})")
    authorization = None
    if proxy.username is not None:
        pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode()
    return Proxy(proxy.hostname, proxy.port or 80, authorization)


def _connection(parts: SplitResult, timeout: float, trust: Trust | None = None
                ) -> tuple[http.client.HTTPConnection, str]:
    """The connection for a request to `parts`, and the request target to send on it."""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    proxy = proxy_for(parts)
    if parts.scheme == "https":
        context = ssl.create_default_context()
        if trust is not None and trust.ca:
            context.load_verify_locations(cadata=trust.ca.decode("ascii", "replace"))  # besides the system's
        if trust is not None and trust.skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if proxy is None:
            return http.client.HTTPSConnection(parts.netloc, timeout=timeout, context=context), target
        connection = http.client.HTTPSConnection(proxy.host, proxy.port, timeout=timeout, context=context)
        headers = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
        connection.set_tunnel(parts.hostname or "", parts.port or 443, headers=headers)  # CONNECT, then TLS
        return connection, target
    if proxy is None:
        return http.client.HTTPConnection(parts.netloc, timeout=timeout), target
    # Plain HTTP through a proxy: the absolute URL as the target (http.client then sends Host from it).
    return http.client.HTTPConnection(proxy.host, proxy.port, timeout=timeout), f"http://{parts.netloc}{target}"


@dataclass(frozen=True)
class Trust:
    """What the registry trusts for one endpoint besides the system roots: `ca` (PEM), or nothing (skip_verify).
    `field` names where the CA is given, for a refusal."""

    ca: bytes | None = None
    skip_verify: bool = False
    field: str | None = None


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: dict[str, str]  # names in lower case, a repeated one's values joined with ", "
    body: bytes


def exchange(method: str, url: str, headers: dict[str, str], body: bytes | None = None, *,
             timeout: float, trust: Trust | None = None) -> Answer:
    """The answer to one request; OSError and HTTPException pass up to the caller."""
    parts = urlsplit(url)
    connection, target = _connection(parts, timeout, trust)
    if parts.scheme == "http" and target.startswith("http://"):
        proxy = proxy_for(parts)
        if proxy is not None and proxy.authorization:
            headers = {**headers, "Proxy-Authorization": proxy.authorization}
    try:
        connection.request(method, target, body=body, headers=headers)
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
            what: str, trust: Trust | None = None) -> Answer:
    """`exchange`, a failure to get any answer raised as PreflightError naming `where` and the service."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PreflightError(f"{where}: {what} is not an http(s) URL")
    try:
        return exchange(method, url, headers, body, timeout=timeout, trust=trust)
    except ssl.SSLCertVerificationError as exc:
        field = trust.field if trust is not None and trust.field else None
        hint = (f"; the CA that signed it belongs in {field}" if field and not (trust and trust.ca)
                else f" by {field}" if field else "")
        raise PreflightError(f"{where}: {what} at {parts.scheme}://{parts.netloc} has a certificate that is not "
                             f"trusted ({exc.verify_message}){hint}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise PreflightError(f"{where}: cannot reach {what} at {parts.scheme}://{parts.netloc}: "
                             f"{type(exc).__name__}") from None


__all__ = ["Answer", "Proxy", "Trust", "exchange", "proxy_for", "request"]
