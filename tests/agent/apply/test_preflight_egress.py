"""The pre-flights go through the registry's egress proxy: which requests take the proxy, as the
registry's Go net/http decides (golang.org/x/net/http/httpproxy), and a real upstream check and S3 check through a
real proxy (Debian's tinyproxy), whose log shows them."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import pytest

from berth_agent.apply import preflight_http
from berth_agent.apply.preflight import check_bucket
from berth_agent.apply.preflight_http import Proxy, proxy_for
from berth_agent.apply.preflight_proxy import check_upstream
from berth_agent.core.errors import PreflightError
from berth_agent.render.targets import S3Target
from support.registries.registry import running_registry
from support.services.tinyproxy import running_tinyproxy

PROXY = {"BERTH_PREFLIGHT_HTTPS_PROXY": "http://user:p%40ss@proxy.corp:3128",
         "BERTH_PREFLIGHT_HTTP_PROXY": "proxy.corp:8080"}


def chosen(url: str, **env: str) -> Proxy | None:
    return proxy_for(urlsplit(url), {**PROXY, **{f"BERTH_PREFLIGHT_{k}": v for k, v in env.items()}})


def test_each_scheme_takes_its_own_variable_and_the_proxy_password_becomes_basic_auth() -> None:
    https = chosen("https://registry-1.docker.io/v2/")
    assert (https.host, https.port) == ("proxy.corp", 3128)
    assert https.authorization == "Basic dXNlcjpwQHNz"  # user:p@ss
    assert chosen("http://mirror.example:5000/v2/") == Proxy("proxy.corp", 8080, None)  # no scheme: http://


@pytest.mark.parametrize(("url", "no_proxy", "direct"), [
    ("https://s3.eu-west-1.amazonaws.com/b", "", False),
    ("https://s3.eu-west-1.amazonaws.com/b", "amazonaws.com", True),  # a domain and its subdomains
    ("https://amazonaws.com/b", ".amazonaws.com", False),  # a leading dot: subdomains only
    ("https://s3.amazonaws.com/b", ".amazonaws.com", True),
    ("https://s3.amazonaws.com/b", "*.amazonaws.com", True),
    ("https://storage.googleapis.com/b", "*", True),
    ("http://10.96.4.2:5000/v2/", "10.96.0.0/16", True),  # CIDR
    ("http://10.97.4.2:5000/v2/", "10.96.0.0/16", False),
    ("http://minio.storage.svc:9000/", "foo, .svc ,bar", True),  # spaces around entries
    ("http://minio.storage.svc:9000/", "minio.storage.svc:9001", False),  # the port must match when given
    ("http://minio.storage.svc:9000/", "minio.storage.svc:9000", True),
    ("http://localhost:5000/v2/", "", True),  # Go never proxies localhost and loopback addresses
    ("http://127.0.0.1:5000/v2/", "", True),
    ("http://[::1]:5000/v2/", "", True),
])
def test_no_proxy_as_go_reads_it(url: str, no_proxy: str, direct: bool) -> None:
    assert (chosen(url, NO_PROXY=no_proxy) is None) is direct


def test_lower_case_variables_and_none_at_all() -> None:
    env = {"BERTH_PREFLIGHT_https_proxy": "http://lower:1", "BERTH_PREFLIGHT_no_proxy": "example.com"}
    assert proxy_for(urlsplit("https://a.b/"), env) == Proxy("lower", 1, None)
    assert proxy_for(urlsplit("https://x.example.com/"), env) is None
    assert proxy_for(urlsplit("https://a.b/"), {}) is None
    # The registry's own names are not the agent's: they would send its API calls through the proxy too.
    assert proxy_for(urlsplit("https://a.b/"), {"HTTPS_PROXY": "http://p:1"}) is None


def test_a_proxy_the_preflight_cannot_use_is_named_without_its_value() -> None:
    with pytest.raises(PreflightError) as refused:
        proxy_for(urlsplit("https://a.b/"), {"BERTH_PREFLIGHT_HTTPS_PROXY": "socks5://u:secret@p:1080"})
    assert "HTTPS_PROXY" in str(refused.value) and "secret" not in str(refused.value)


def _loopback_name() -> str:
    """A host name (not localhost) that resolves to a loopback address: Go proxies a request to it, and the
    proxy reaches 127.0.0.1 through it. This machine's own name, as /etc/hosts maps it."""
    name = socket.gethostname()
    try:
        address = ipaddress.ip_address(socket.gethostbyname(name))
    except OSError:
        pytest.skip(f"this machine's name {name!r} does not resolve")
    if name == "localhost" or not address.is_loopback:
        pytest.skip(f"this machine's name {name!r} is not a loopback name other than localhost")
    return name


@pytest.fixture
def proxied(tmp_path, monkeypatch):
    """(tinyproxy, the upstream's URL by this machine's loopback name, monkeypatch): a real registry upstream and a
    real proxy, the pre-flights' proxy variables pointing at it."""
    name = _loopback_name()
    config = b"version: 0.1\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: ':5000'}\n" % (
        str(tmp_path / "data").encode())
    with running_tinyproxy(tmp_path / "proxy") as proxy, running_registry(config, tmp_path / "up") as up:
        monkeypatch.setenv("BERTH_PREFLIGHT_HTTP_PROXY", proxy.url)
        monkeypatch.setenv("BERTH_PREFLIGHT_HTTPS_PROXY", proxy.url)
        yield proxy, f"{name}:{urlsplit(up.url).port}", monkeypatch


def test_the_upstream_check_and_the_s3_check_go_through_a_real_proxy(proxied) -> None:
    proxy, host, monkeypatch = proxied
    remote = f"http://{host}"
    check = check_upstream(remote, None, None, major="3")
    assert (check.reachable, check.scheme) == (True, "none")
    assert f"GET {remote}/v2/ HTTP/1.1" in proxy.requests(), proxy.log()
    # An S3 endpoint the same way (the registry answers 404 for the bucket path: refused, but reached).
    target = S3Target(bucket="b", region="us-east-1", access_key="AKIA", secret_key="s", endpoint=remote,
                      secure=False, path_style=True)
    with pytest.raises(PreflightError, match="refused the new credentials"):
        check_bucket(target, timeout=5)
    assert any(line.startswith(f"GET {remote}/b?list-type=2") for line in proxy.requests()), proxy.log()
    # NO_PROXY: direct, the proxy sees nothing more.
    monkeypatch.setenv("BERTH_PREFLIGHT_NO_PROXY", host.rsplit(":", 1)[0])
    seen = len(proxy.requests())
    check_upstream(remote, None, None, major="3")
    assert len(proxy.requests()) == seen


def test_https_goes_through_a_connect_tunnel(proxied) -> None:
    """The CONNECT reaches the target through tinyproxy (the TLS handshake then fails: the target speaks HTTP)."""
    proxy, host, _ = proxied
    with pytest.raises(PreflightError, match="cannot reach"):
        preflight_http.request("GET", f"https://{host}/v2/", {}, None, timeout=5, where="w", what="it")
    assert f"CONNECT {host} HTTP/1.0" in proxy.requests(), proxy.log()  # http.client says 1.0
