"""Where the agent's API server is and how it proves who it is: in-cluster, a kubeconfig file, or a plain host.

`load(kube_host, kubeconfig)` picks as `berth-agent run` documents it: `--kube-host URL` (no credentials: tests,
kubectl proxy), `--kubeconfig FILE`, else the pod's ServiceAccount (KUBERNETES_SERVICE_HOST/PORT, the mounted
token and CA), else $KUBECONFIG or ~/.kube/config.

Of a kubeconfig this reads the current context's cluster (`server`, `certificate-authority` / `-data`,
`insecure-skip-tls-verify`) and user (`token`, `tokenFile`, `client-certificate` / `-data` with `client-key` /
`-data`); a user that authenticates any other way (exec plugins, auth providers, basic auth) or a cluster behind a
proxy is refused with a ConfigError naming the field, not half-used. A token file is read again whenever it changes:
the kubelet rotates a pod's projected ServiceAccount token in place (docs/upstream.md#k8s-bound-token-rotation).
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
UNSUPPORTED_USER = ("exec", "auth-provider", "username", "password")
UNSUPPORTED_CLUSTER = ("proxy-url", "tls-server-name")


class ConfigError(Exception):
    """No usable configuration (not in a pod, a missing or unsupported kubeconfig)."""


class StaticToken:
    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self) -> str:
        return self._token


class TokenFile:
    """A bearer token in a file, read again when the file changes (its inode, size or mtime)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._token = ""
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            try:
                stat = os.stat(self.path)
                seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
                if seen != self._seen:
                    self._token, self._seen = self.path.read_text().strip(), seen
            except OSError:
                if self._seen is None:
                    raise
                # Gone for a moment (a volume swapping it): the last token read is still the best one.
            return self._token


@dataclass(frozen=True)
class KubeConfig:
    """An API server's URL, the TLS context to reach it with (https) and the source of its bearer token."""

    server: str
    ssl_context: ssl.SSLContext | None = None
    token: Callable[[], str] | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"not an http(s) URL: {self.server!r}")

    @property
    def scheme(self) -> str:
        return urlsplit(self.server).scheme

    @property
    def host(self) -> str:
        return urlsplit(self.server).hostname or ""

    @property
    def port(self) -> int:
        return urlsplit(self.server).port or (443 if self.scheme == "https" else 80)

    @property
    def prefix(self) -> str:
        """The server URL's path, before every API path (a server behind a proxy that routes by path)."""
        return urlsplit(self.server).path.rstrip("/")


def load(kube_host: str | None = None, kubeconfig: Path | None = None,
         environ: Mapping[str, str] = os.environ) -> KubeConfig:
    """The configuration `berth-agent run` uses (see the module's docstring for the order)."""
    if kube_host:
        return KubeConfig(kube_host)
    if kubeconfig:
        return from_kubeconfig([kubeconfig])
    try:
        return in_cluster(environ)
    except ConfigError:
        paths = environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        return from_kubeconfig([Path(p) for p in paths.split(os.pathsep) if p])


def in_cluster(environ: Mapping[str, str] = os.environ, root: Path = SERVICE_ACCOUNT) -> KubeConfig:
    """The pod's ServiceAccount: the API server's Service from the environment, the mounted token and CA."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not in a pod: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set")
    token = TokenFile(root / "token")
    try:
        if not token():
            raise ConfigError(f"{token.path} is empty")
    except OSError as exc:
        raise ConfigError(f"cannot read {token.path} ({type(exc).__name__})") from None
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    return KubeConfig(f"https://{host}:{port}", _tls(cafile=root / "ca.crt"), token)


def from_kubeconfig(paths: list[Path]) -> KubeConfig:
    """The current context of these kubeconfig files, merged as kubectl merges $KUBECONFIG (the first file
    that names a cluster, user or context, or sets current-context, wins)."""
    merged: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": None}
    bases: dict[tuple[str, str], Path] = {}  # where each entry came from: relative paths in it are relative to that
    found = [path for path in paths if path.exists()]
    if not found:
        raise ConfigError(f"not in a pod, and no kubeconfig at {os.pathsep.join(map(str, paths))}")
    for path in found:
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read kubeconfig {path} ({type(exc).__name__})") from None
        merged["current-context"] = merged["current-context"] or document.get("current-context")
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in document.get(section) or ():
                if entry.get("name") not in merged[section]:
                    merged[section][entry.get("name")] = entry.get(key) or {}
                    bases[(section, entry.get("name"))] = path.parent
    name = merged["current-context"]
    if not name:
        raise ConfigError(f"no current-context in {os.pathsep.join(map(str, paths))}")
    context = _entry(merged, "contexts", name)
    cluster, user = _entry(merged, "clusters", context.get("cluster")), _entry(merged, "users", context.get("user"))
    return _from_entries(cluster, user, bases[("clusters", context["cluster"])], bases[("users", context["user"])])


def _entry(merged: dict[str, Any], section: str, name: Any) -> dict:
    if name not in merged[section]:
        raise ConfigError(f"kubeconfig: no {section[:-1]} named {name!r}")
    return merged[section][name]


def _from_entries(cluster: dict, user: dict, cluster_base: Path, user_base: Path) -> KubeConfig:
    for field in UNSUPPORTED_CLUSTER:
        if cluster.get(field):
            raise ConfigError(f"kubeconfig: the cluster's {field} is not supported by berth-agent")
    for field in UNSUPPORTED_USER:
        if user.get(field):
            raise ConfigError(f"kubeconfig: the user's {field} is not supported by berth-agent")
    server = cluster.get("server") or ""
    context = None
    if urlsplit(server).scheme == "https":
        context = _tls(cafile=_path(cluster.get("certificate-authority"), cluster_base),
                       cadata=_data(cluster, "certificate-authority-data"),
                       verify=not cluster.get("insecure-skip-tls-verify"))
        _client_certificate(context, user, user_base)
    token: Callable[[], str] | None = None
    if user.get("token"):
        token = StaticToken(str(user["token"]))
    elif user.get("tokenFile"):
        token = TokenFile(_path(user["tokenFile"], user_base))
    return KubeConfig(server, context, token)


def _tls(*, cafile: Path | None = None, cadata: bytes | None = None, verify: bool = True) -> ssl.SSLContext:
    """A client TLS context trusting `cafile` / `cadata`, else the system's trust store."""
    try:
        context = ssl.create_default_context(cafile=str(cafile) if cafile else None,
                                             cadata=cadata.decode() if cadata else None)
    except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot load the API server's CA ({type(exc).__name__})") from None
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _client_certificate(context: ssl.SSLContext, user: dict, base: Path) -> None:
    """Load the user's client certificate and key into `context`. Given as data, they go through a private
    temporary file (ssl loads them from files only), removed as soon as they are loaded."""
    certificate, key = _data(user, "client-certificate-data"), _data(user, "client-key-data")
    cert_file, key_file = _path(user.get("client-certificate"), base), _path(user.get("client-key"), base)
    if not (certificate or cert_file):
        return
    if not (key or key_file):
        raise ConfigError("kubeconfig: a client certificate without its client key")
    import tempfile  # only here: a pod's agent never needs it

    try:
        if cert_file and key_file:
            context.load_cert_chain(str(cert_file), str(key_file))
            return
        with tempfile.TemporaryDirectory(prefix="berth-agent-") as private:  # mode 0700
            if certificate:
                cert_file = _private_file(Path(private) / "client.crt", certificate)
            if key:
                key_file = _private_file(Path(private) / "client.key", key)
            context.load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the client certificate ({type(exc).__name__})") from None


def _private_file(path: Path, content: bytes) -> Path:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(content)
    return path


def _data(entry: dict, field: str) -> bytes | None:
    value = entry.get(field)
    if not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"kubeconfig: {field} is not base64") from None


def _path(value: Any, base: Path) -> Path | None:
    return base / os.path.expanduser(str(value)) if value else None


__all__ = ["ConfigError", "KubeConfig", "StaticToken", "TokenFile", "from_kubeconfig", "in_cluster", "load"]
