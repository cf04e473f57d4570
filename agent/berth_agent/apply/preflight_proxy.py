"""Pre-flight of a pull-through cache's upstream (spec.config.proxy;
docs/decisions/0020-pull-through-cache-restarts.md).

What the registry does with `proxy` (read in distribution v2.8.2 and v3.1.1, `registry/proxy/proxyauth.go`,
`proxyregistry.go`, `registry/handlers/app.go`; measured here,
docs/decisions/0020-pull-through-cache-restarts.md):

- At start it GETs the upstream's `/v2/` once (no timeout on 2.8) to learn its challenge, and PANICS when that
  request fails: a proxy registry cannot start, so cannot restart, while its upstream is unreachable (both
  versions, with or without credentials). The credentials and the token realms are fixed from then on, so new
  credentials need a restart.
- 2.8 offers the credentials only to a Bearer token realm found in that answer; it has no basic handler, so an
  upstream that answers `Basic` never gets them (every pull is a 401 upstream, `manifest unknown` downstream).
- 3.1 also answers `Basic` challenges with them, and offers them to a token realm only when the realm is on the
  upstream's host:port or, for names that are not IP addresses or `localhost`, under the same registrable
  domain (`realmAllowed`: auth.docker.io for registry-1.docker.io).

So, before a restart onto a proxy config, `check_upstream` asks what the new registry will ask, the way it will:
GET `/v2/`; on a `Basic` challenge, `/v2/` again with the credentials; on a `Bearer` challenge, a token from the
realm (with the credentials, when there are any), then `/v2/` with it. Any refusal raises PreflightError
carrying the upstream's answer (HTTP status and a short reason taken from its error body, never the
credentials), so the round is refused and the running registry keeps serving its cache.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

from ..core.errors import PreflightError
from . import preflight_http

TIMEOUT_SECONDS = 5.0
WHERE = "spec.config.proxy"
REASON_LIMIT = 120  # characters of the upstream's own reason kept in a message
_PARAM = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
_PRINTABLE = re.compile(r"[^ -~]+")


@dataclass(frozen=True)
class Answer:
    status: int
    challenge: str  # the WWW-Authenticate header, "" when none
    reason: str  # short and secret-free: an error code and message from the body, else the HTTP reason


@dataclass(frozen=True)
class UpstreamCheck:
    """What the upstream answered: the status record's source (status.agents.<pod>.upstream)."""

    url: str
    reachable: bool
    scheme: str = ""  # "none" (anonymous /v2/), "basic" or "bearer"; "" when unreachable
    authenticated: bool | None = None  # None: no credentials were tried (anonymous)
    failure_status: int | None = None  # the refusal's HTTP status (0: no HTTP answer)
    failure_reason: str = ""
    checked_at: float = field(default_factory=time.time)

    @property
    def failure(self) -> str:
        return f"HTTP {self.failure_status}: {self.failure_reason}" if self.failure_status else self.failure_reason


class UpstreamRefused(PreflightError):
    """A PreflightError that keeps the check that failed, for the status record."""

    def __init__(self, message: str, check: UpstreamCheck) -> None:
        super().__init__(message)
        self.check = check


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="...",service="..."` -> ("bearer", {"realm": ..., "service": ...})."""
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), dict(_PARAM.findall(params))


def _clean(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, "<hidden>")
    text = _PRINTABLE.sub(" ", text).strip()
    return text[:REASON_LIMIT] + ("..." if len(text) > REASON_LIMIT else "")


def _reason(status: int, http_reason: str, body: bytes, secrets: tuple[str, ...]) -> str:
    """The registry's `{"errors": [{"code", "message"}]}` or a token service's `{"error"/"details"}`, else the
    HTTP reason phrase; cut short and cleaned of anything that looks like a credential."""
    text = ""
    try:
        document = json.loads(body[:16384]) if body else None
    except (ValueError, UnicodeDecodeError):
        document = None
    if isinstance(document, dict):
        errors = document.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            first = errors[0]
            text = ": ".join(str(first[k]) for k in ("code", "message") if isinstance(first.get(k), str))
        else:
            text = ": ".join(str(document[k]) for k in ("error", "details", "message")
                             if isinstance(document.get(k), str))
    return _clean(text or http_reason or f"HTTP {status}", secrets)


def _request(url: str, *, authorization: str | None, timeout: float,
             secrets: tuple[str, ...]) -> tuple[Answer, bytes]:
    """One GET, no redirects followed (a redirect would carry the credentials elsewhere). OSError and
    HTTPException pass up to the caller."""
    headers = {"User-Agent": "berth-agent preflight", "Accept": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    reply = preflight_http.exchange("GET", url, headers, timeout=timeout)
    return Answer(reply.status, reply.headers.get("www-authenticate", ""),
                  _reason(reply.status, reply.reason, reply.body, secrets)), reply.body


def realm_allowed(remote_url: str, realm: str) -> bool:
    """Distribution 3.1's `realmAllowed`, without a public suffix list: the same host:port, else (names only,
    not IP addresses or localhost) the same last two labels, an approximation of the registrable domain that
    agrees with it for registry-1.docker.io/auth.docker.io, ghcr.io and quay.io."""
    remote, target = urlsplit(remote_url), urlsplit(realm)
    if not target.netloc or not remote.netloc:
        return False
    if remote.netloc.lower() == target.netloc.lower():
        return True
    hosts = [(remote.hostname or "").lower(), (target.hostname or "").lower()]
    if not all(hosts) or any(_literal_or_local(host) for host in hosts):
        return False
    return hosts[0].split(".")[-2:] == hosts[1].split(".")[-2:]


def _literal_or_local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


_lock = threading.Lock()
_published: list[UpstreamCheck] = []


def publish(check: UpstreamCheck) -> None:
    """Every check's result (pre-flight and the upstream watch alike) is kept for the watch, which reports the
    newest on status.agents.<pod>.upstream (apply/upstream_watch.py)."""
    with _lock:
        _published.append(check)
        del _published[:-8]


def take() -> list[UpstreamCheck]:
    """The results published since the last take, oldest first."""
    with _lock:
        taken = list(_published)
        _published.clear()
    return taken


def distribution_of(rendered) -> str:
    """The Distribution major a render is for: the renderer writes `http.h2c` for Distribution 3 only."""
    return "3" if "h2c" in rendered.http else "2"


def check_upstream(remote_url: str, username: str | None, password: str | None, *, major: str,
                   reachability_only: bool = False, timeout: float = TIMEOUT_SECONDS) -> UpstreamCheck:
    """Ask the upstream what the new registry will ask (module doc). Returns the check when the registry will
    start and authenticate; raises UpstreamRefused (a PreflightError) naming the field and the upstream's
    answer otherwise. `reachability_only`: only the start-up `/v2/` (the credentials did not change)."""
    secrets = tuple(s for s in (password,) if s)
    base = remote_url.rstrip("/")
    creds = username is not None and password is not None

    def refuse(message: str, status: int | None, reason: str, *, reachable: bool = True,
               scheme: str = "") -> UpstreamRefused:
        check = UpstreamCheck(base, reachable, scheme, False if creds and reachable else None, status, reason)
        return UpstreamRefused(f"{WHERE}: {message}; keeping the running config", check)

    try:
        first, _ = _request(f"{base}/v2/", authorization=None, timeout=timeout, secrets=secrets)
    except (OSError, http.client.HTTPException) as exc:
        detail = "timed out" if isinstance(exc, (TimeoutError, socket.timeout)) else type(exc).__name__
        raise refuse(f"remoteURL {base} is unreachable ({detail}): the registry cannot start without an answer "
                     "from its upstream's /v2/", 0, detail, reachable=False) from None
    if first.status == 200:
        return UpstreamCheck(base, True, "none", None)
    scheme, params = parse_challenge(first.challenge) if first.status == 401 else ("", {})
    if first.status != 401 or scheme not in ("basic", "bearer"):
        raise refuse(f"the upstream's /v2/ answered HTTP {first.status} ({first.reason}), not 200 or a 401 "
                     "challenge", first.status, first.reason)
    if reachability_only:
        return UpstreamCheck(base, True, scheme, None)
    if scheme == "basic":
        if not creds:
            raise refuse("the upstream asks for basic auth (HTTP 401) and spec.config.proxy.credentials is not "
                         "set", 401, first.reason, scheme=scheme)
        if major == "2":
            raise refuse("the upstream asks for basic auth, which Distribution 2 cannot answer as a proxy (it "
                         "offers spec.config.proxy.credentials only to a token realm): use a Distribution 3 "
                         "image", 401, first.reason, scheme=scheme)
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        answer = _get_or_refuse(f"{base}/v2/", f"Basic {token}", timeout, secrets, refuse, scheme, "the upstream")
        if answer.status != 200:
            raise refuse(f"the upstream refused spec.config.proxy.credentials (HTTP {answer.status}: "
                         f"{answer.reason})", answer.status, answer.reason, scheme=scheme)
        return UpstreamCheck(base, True, scheme, True)
    realm = params.get("realm", "")
    if not realm.startswith(("http://", "https://")):
        raise refuse("the upstream's Bearer challenge has no http(s) realm", 401, first.reason, scheme=scheme)
    if creds and major == "3" and not realm_allowed(base, realm):
        raise refuse(f"the upstream's token realm {urlsplit(realm).netloc} is on another host than remoteURL: "
                     "Distribution 3 sends spec.config.proxy.credentials only to a realm on the upstream's host "
                     "or its domain", 401, first.reason, scheme=scheme)
    query = {k: v for k, v in (("service", params.get("service", "")),) if v}
    token_url = realm + (("&" if "?" in realm else "?") + urlencode(query) if query else "")
    basic = base64.b64encode(f"{username}:{password}".encode()).decode() if creds else None
    answer, body = _get_or_refuse_body(token_url, f"Basic {basic}" if basic else None, timeout, secrets, refuse,
                                       scheme, "the upstream's token service")
    if answer.status != 200:
        what = "refused spec.config.proxy.credentials" if creds else "refused an anonymous token"
        raise refuse(f"the upstream's token service {urlsplit(realm).netloc} {what} (HTTP {answer.status}: "
                     f"{answer.reason})", answer.status, answer.reason, scheme=scheme)
    try:
        document = json.loads(body)
        bearer = document.get("token") or document.get("access_token")
    except (ValueError, UnicodeDecodeError, AttributeError):
        bearer = None
    if not isinstance(bearer, str) or not bearer:
        raise refuse("the upstream's token service answered 200 without a token", 200, "no token in the answer",
                     scheme=scheme)
    answer = _get_or_refuse(f"{base}/v2/", f"Bearer {bearer}", timeout, secrets + (bearer,), refuse, scheme,
                            "the upstream")
    if answer.status != 200:
        raise refuse(f"the upstream refused the token its token service issued (HTTP {answer.status}: "
                     f"{answer.reason})", answer.status, answer.reason, scheme=scheme)
    return UpstreamCheck(base, True, scheme, True if creds else None)


def _get_or_refuse_body(url, authorization, timeout, secrets, refuse, scheme, who):
    try:
        return _request(url, authorization=authorization, timeout=timeout, secrets=secrets)
    except (OSError, http.client.HTTPException) as exc:
        detail = "timed out" if isinstance(exc, (TimeoutError, socket.timeout)) else type(exc).__name__
        raise refuse(f"{who} at {urlsplit(url).netloc} is unreachable ({detail})", 0, detail,
                     scheme=scheme) from None


def _get_or_refuse(url, authorization, timeout, secrets, refuse, scheme, who) -> Answer:
    return _get_or_refuse_body(url, authorization, timeout, secrets, refuse, scheme, who)[0]


__all__ = ["UpstreamCheck", "UpstreamRefused", "check_upstream", "distribution_of", "parse_challenge", "publish",
           "realm_allowed", "take"]
