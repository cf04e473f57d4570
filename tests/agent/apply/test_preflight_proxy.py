"""Pre-flight of a pull-through cache's upstream: the credentials authenticate against the upstream's
/v2/ the way the registry will (basic, or a token from the realm the upstream's challenge names), against real
registries on 127.0.0.1 (support.registries.upstream); a refusal carries the upstream's answer and never the
password."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from berth_agent.apply.preflight_proxy import UpstreamRefused, check_upstream, parse_challenge, realm_allowed
from berth_agent.core.errors import PreflightError
from support.common.ports import free_port
from support.registries.registry import REGISTRY_BINARY, running_registry
from support.registries.upstream import htpasswd_upstream, token_upstream

GOOD = ("mirror", "s3cret-good-password")
BAD = ("mirror", "s3cret-wrong-password")


@pytest.fixture(scope="module")
def basic_upstream(tmp_path_factory):
    with htpasswd_upstream(tmp_path_factory.mktemp("basic"), dict([GOOD]), binary=REGISTRY_BINARY) as up:
        yield up


@pytest.fixture(scope="module")
def bearer_upstream(tmp_path_factory):
    with token_upstream(tmp_path_factory.mktemp("token"), {GOOD[0]: {GOOD[1]}}, binary=REGISTRY_BINARY) as up:
        yield up


def refusal(url: str, creds: tuple[str | None, str | None], major: str) -> UpstreamRefused:
    with pytest.raises(UpstreamRefused) as caught:
        check_upstream(url, *creds, major=major)
    assert isinstance(caught.value, PreflightError)
    message = str(caught.value)
    assert message.startswith("spec.config.proxy: ") and message.endswith("; keeping the running config")
    for secret in (GOOD[1], BAD[1]):
        assert secret not in message and secret not in repr(caught.value.check)
    return caught.value


def test_basic_upstream_with_the_right_credentials_passes_on_3(basic_upstream):
    check = check_upstream(basic_upstream.url, *GOOD, major="3")
    assert (check.reachable, check.scheme, check.authenticated) == (True, "basic", True)


def test_basic_upstream_refuses_wrong_credentials_with_its_401(basic_upstream):
    refused = refusal(basic_upstream.url, BAD, "3")
    assert "the upstream refused spec.config.proxy.credentials (HTTP 401: UNAUTHORIZED: authentication required)" \
        in str(refused)
    assert (refused.check.failure_status, refused.check.authenticated, refused.check.reachable) == (401, False, True)


def test_basic_upstream_credentials_are_refused_on_distribution_2(basic_upstream):
    """2.8 offers proxy credentials only to a token realm (registry/proxy/proxyauth.go v2.8.2): never to basic."""
    assert "which Distribution 2 cannot answer as a proxy" in str(refusal(basic_upstream.url, GOOD, "2"))


def test_basic_upstream_without_credentials_is_refused(basic_upstream):
    assert "spec.config.proxy.credentials is not set" in str(refusal(basic_upstream.url, (None, None), "3"))


def test_a_changed_url_with_unchanged_credentials_only_needs_an_answer(basic_upstream):
    check = check_upstream(basic_upstream.url, *BAD, major="3", reachability_only=True)
    assert (check.reachable, check.scheme, check.authenticated) == (True, "basic", None)


@pytest.mark.parametrize("major", ["2", "3"])
def test_token_upstream_with_the_right_credentials_passes(bearer_upstream, major):
    before = len(bearer_upstream.front.token_log)
    check = check_upstream(bearer_upstream.url, *GOOD, major=major)
    assert (check.scheme, check.authenticated) == ("bearer", True)
    assert [(e.status, e.password) for e in bearer_upstream.front.token_log[before:]] == [(200, GOOD[1])]


@pytest.mark.parametrize("major", ["2", "3"])
def test_token_upstream_refuses_wrong_credentials_with_its_401(bearer_upstream, major):
    refused = refusal(bearer_upstream.url, BAD, major)
    host = bearer_upstream.url.removeprefix("http://")
    assert (f"the upstream's token service {host} refused spec.config.proxy.credentials "
            "(HTTP 401: incorrect username or password)") in str(refused)
    assert refused.check.failure_status == 401


def test_token_upstream_that_wants_credentials_refuses_anonymous(bearer_upstream):
    assert "refused an anonymous token (HTTP 401" in str(refusal(bearer_upstream.url, (None, None), "3"))


def test_anonymous_upstream_passes(tmp_path):
    config = b"version: 0.1\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: ':5000'}\n" % (
        str(tmp_path / "data").encode())
    with running_registry(config, tmp_path) as up:  # a free port on 127.0.0.1
        check = check_upstream(up.url, None, None, major="2")
        assert (check.reachable, check.scheme, check.authenticated) == (True, "none", None)


def test_an_unreachable_upstream_is_refused():
    url = f"http://127.0.0.1:{free_port()}"
    refused = refusal(url, GOOD, "3")
    assert f"remoteURL {url} is unreachable (ConnectionRefusedError)" in str(refused)
    assert (refused.check.reachable, refused.check.failure_status) == (False, 0)


def test_a_token_realm_on_another_port_is_refused_on_3_only(tmp_path):
    """3.1's realmAllowed: credentials go to a realm on the upstream's host:port or domain, never to another
    port of an IP address; 2.8 sends them to any realm the upstream names."""
    with token_upstream(tmp_path, {GOOD[0]: {GOOD[1]}}) as up:
        direct = up.registry.url  # the registry itself: its realm is the front's port
        assert "is on another host than remoteURL" in str(refusal(direct, GOOD, "3"))
        assert check_upstream(direct, *GOOD, major="2").authenticated is True


@pytest.mark.parametrize(("remote", "realm", "allowed"), [
    ("https://registry-1.docker.io", "https://auth.docker.io/token", True),
    ("https://ghcr.io", "https://ghcr.io/token", True),
    ("https://quay.io", "https://quay.io/v2/auth", True),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000/token", True),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5001/token", False),
    ("http://localhost:5000", "http://localhost:5001/token", False),
    ("https://registry.example.com", "https://auth.other.org/token", False),
])
def test_realm_allowed_follows_distribution_3(remote, realm, allowed):
    assert realm_allowed(remote, realm) is allowed


def test_parse_challenge():
    assert parse_challenge('Bearer realm="https://a/token",service="reg"') == (
        "bearer", {"realm": "https://a/token", "service": "reg"})
    assert parse_challenge('Basic realm="up"') == ("basic", {"realm": "up"})


def test_an_upstream_that_echoes_the_password_does_not_get_it_into_the_message():
    """The reason is the upstream's text: cleaned of the password and cut short, whatever the upstream sends."""

    class Echo(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            import base64
            header = self.headers.get("Authorization", "")
            if not header:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="echo"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            password = base64.b64decode(header[6:]).decode().partition(":")[2]
            error = {"code": "DENIED", "message": f"password {password} is wrong {'x' * 500}"}
            body = json.dumps({"errors": [error]}).encode()
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        refused = refusal(f"http://127.0.0.1:{server.server_address[1]}", GOOD, "3")
        assert "HTTP 403: DENIED: password <hidden> is wrong" in str(refused)
        assert len(refused.check.failure_reason) <= 124
    finally:
        server.shutdown()
        server.server_close()


def rendered_proxy(url: str, creds: tuple[str, str] | None, major: str = "3"):
    from berth_agent.mounted.mounts import MountedInputs
    from berth_agent.render.config import render
    from berth_api import Registry

    proxy = {"remoteURL": url, **({"credentials": {"secretName": "up"}} if creds else {})}
    spec = Registry.model_validate({"spec": {"image": f"registry:{major}", "config": {
        "storage": {"inmemory": {}}, "proxy": proxy}}}).spec
    inputs = MountedInputs(proxy_username=creds[0], proxy_password=creds[1]) if creds else MountedInputs()
    return render(spec, inputs)


def test_check_render_refuses_a_restart_onto_refused_credentials_and_warns_on_a_first_start(basic_upstream):
    from berth_agent.apply.preflight import check_render

    good, bad = rendered_proxy(basic_upstream.url, GOOD), rendered_proxy(basic_upstream.url, BAD)
    assert check_render(good, None) == []
    with pytest.raises(PreflightError, match=r"HTTP 401"):
        check_render(bad, good)
    (warning,) = check_render(bad, None)  # nothing runs yet: start, and serve what the storage has cached
    assert warning.reason == "UpstreamAuthFailed" and "HTTP 401" in warning.message
    assert BAD[1] not in warning.message


def test_the_upstream_watch_keeps_the_last_auth_failure_after_a_success(basic_upstream):
    from berth_agent.apply.preflight_proxy import take
    from berth_agent.apply.upstream_watch import UpstreamWatch

    take()
    watch = UpstreamWatch(applier=None)  # absorb() alone: no applier needed
    refused = refusal(basic_upstream.url, BAD, "3").check
    assert watch.absorb([refused])
    failure = watch.record()["lastAuthFailure"]
    assert failure["status"] == 401 and "authentication required" in failure["reason"]
    assert watch.absorb([check_upstream(basic_upstream.url, *GOOD, major="3")])
    record = watch.record()
    assert record["reachable"] is True and record["auth"] == "basic" and record["lastAuthFailure"] == failure
    assert record["checkedAt"] >= failure["at"]  # checked after the failure, and no failure since: accepted
    assert not watch.absorb([])  # nothing new: no write
    assert BAD[1] not in str(record)


@pytest.mark.parametrize("major", ["2", "3"])
def test_a_first_start_with_the_upstream_unreachable_warns_that_the_registry_will_not_serve(major):
    from berth_agent.apply.preflight import check_render

    (warning,) = check_render(rendered_proxy(f"http://127.0.0.1:{free_port()}", None, major), None)
    assert warning.reason == "UpstreamUnreachable" and "is unreachable" in warning.message
    assert "panics" in warning.message and "serves nothing" in warning.message
    assert "serves what it has cached" not in warning.message  # the registry panics: nothing is served


def test_the_real_registry_panics_at_start_while_its_upstream_does_not_answer(tmp_path):
    """The fact the UpstreamUnreachable warning rests on (docs/upstream.md#dist-proxy-start), with the real binary."""
    import subprocess

    config = tmp_path / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'data'}\n"
                      f"http:\n  addr: 127.0.0.1:{free_port()}\n"
                      f"proxy:\n  remoteurl: http://127.0.0.1:{free_port()}\n")
    done = subprocess.run([REGISTRY_BINARY, "serve", str(config)], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "panic: Get" in done.stderr + done.stdout
