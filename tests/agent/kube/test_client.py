"""kube/client.py, the agent's API client, against the test API server (kmock plus our gap fillers, real HTTP on
127.0.0.1): JSON calls, refusals without their body, keep-alive reuse, watch streams (events, a clean end, 410 as
an event and as the answer, a cut connection, the read timeout, close() from another thread) and the bearer token
read again when its file changes. The real kube-apiserver's TLS and credentials: test_client_apiserver.py."""

from __future__ import annotations

import http.client
import http.server
import os
import threading
import time

import pytest

from berth_agent.kube import client as kube_client
from berth_agent.kube.api import MERGE_PATCH, describe_api_error, registry_path
from berth_agent.kube.client import ApiClient, ApiError, api_path
from berth_agent.kube.config import KubeConfig, TokenFile

SECRETS = "/api/v1/namespaces/{namespace}/secrets"
REGISTRY = {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "reg", "namespace": "default"},
            "spec": {"config": {"storage": {"inmemory": {}}}}}


def secret(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"},
            "data": data}


def _idle_ports(client: ApiClient) -> list[int]:
    """The local ports of the pool's idle connections: the same port twice is one connection kept alive."""
    return [conn.sock.getsockname()[1] for conn in client._idle]


def test_calls_send_and_decode_json_and_reuse_one_connection(kube_api):
    client = kube_api.agent_client()
    created = client.request("POST", api_path(SECRETS, namespace="default"), body=secret("s1", k="dg=="))
    assert created["metadata"]["name"] == "s1" and created["metadata"]["resourceVersion"]
    [port] = _idle_ports(client)
    listing = client.request("GET", api_path(SECRETS, namespace="default"),
                             query={"fieldSelector": "metadata.name=s1", "limit": None})
    assert [item["metadata"]["name"] for item in listing["items"]] == ["s1"]
    assert _idle_ports(client) == [port]  # kept alive: the second call went over the first one's connection
    kube_api.create(REGISTRY)
    patched = client.request("PATCH", registry_path("default", "reg", "status"), content_type=MERGE_PATCH,
                             body={"status": {"agents": {"pod": {"configHash": "h"}}}})
    assert patched["status"]["agents"] == {"pod": {"configHash": "h"}}
    assert kube_api.get("berth.dev/v1alpha1/registries", "default", "reg")["status"]["agents"]["pod"] == {
        "configHash": "h"}
    requests = kube_api.requests()
    assert requests[1] == ("GET", "/api/v1/namespaces/default/secrets?fieldSelector=metadata.name%3Ds1")
    assert requests[-1] == ("PATCH", "/apis/berth.dev/v1alpha1/namespaces/default/registries/reg/status")


def test_a_refusal_is_status_and_reason_without_the_body(kube_api):
    client = kube_api.agent_client()
    with pytest.raises(ApiError) as refused:
        client.request("GET", api_path(SECRETS + "/{name}", namespace="default", name="planted-secret-name"))
    error = refused.value
    assert (error.status, error.reason, error.args) == (404, "Not Found", (404, "Not Found"))
    assert str(error) == "API answered 404 Not Found" == describe_api_error(error)
    assert "planted" not in str(error) + repr(error) and not hasattr(error, "body")
    assert len(client._idle) == 1  # the refusal's body was read: its connection serves the next call
    kube_api.fail_next(1, status=503)
    with pytest.raises(ApiError, match="^API answered 503 Service Unavailable$"):
        client.request("GET", api_path(SECRETS, namespace="default"))


def test_a_watch_streams_events_and_ends_cleanly_at_its_timeout(kube_api):
    client = kube_api.agent_client()
    listing = client.request("GET", api_path(SECRETS, namespace="default"))
    stream = client.stream(api_path(SECRETS, namespace="default"),
                           {"watch": True, "resourceVersion": listing["metadata"]["resourceVersion"],
                            "timeoutSeconds": 2, "allowWatchBookmarks": True}, timeout=(5, 10))
    kube_api.create(secret("s1"))
    kube_api.create(secret("s2"))
    began = time.monotonic()
    events = [(event["type"], event["object"]["metadata"]["name"]) for event in stream]
    assert events == [("ADDED", "s1"), ("ADDED", "s2")]
    assert time.monotonic() - began < 5  # ended by the server's timeoutSeconds, not by the client's read timeout
    assert len(client._idle) == 1  # a cleanly ended watch hands its connection back
    watch = [path for _, path in kube_api.requests() if "watch=" in path]
    assert watch and "watch=true" in watch[0] and "allowWatchBookmarks=true" in watch[0]


def test_410_comes_as_an_event_or_as_the_answer(kube_api):
    client = kube_api.agent_client()
    old = client.request("GET", api_path(SECRETS, namespace="default"))["metadata"]["resourceVersion"]
    kube_api.create(secret("s1"))
    kube_api.compact()
    stream = client.stream(api_path(SECRETS, namespace="default"), {"watch": True, "resourceVersion": old})
    [event] = list(stream)
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    kube_api.fail_next(1, status=410, verb="watch")
    with pytest.raises(ApiError) as gone:
        client.stream(api_path(SECRETS, namespace="default"), {"watch": True})
    assert gone.value.status == 410


def test_a_cut_watch_raises_a_transport_error(kube_api):
    client = kube_api.agent_client()
    stream = client.stream(api_path(SECRETS, namespace="default"), {"watch": True, "timeoutSeconds": 30})
    events = iter(stream)
    kube_api.create(secret("s1"))
    assert next(events)["object"]["metadata"]["name"] == "s1"
    deadline = time.monotonic() + 10
    while kube_api.open_watches != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert kube_api.drop_watches() == 1
    with pytest.raises((OSError, http.client.HTTPException)) as cut:
        next(events)
    assert describe_api_error(cut.value).startswith("cannot reach the API server (")
    assert client._idle == []  # a broken connection is never reused


def test_the_read_timeout_ends_a_silent_watch(kube_api):
    client = kube_api.agent_client()
    stream = client.stream(api_path(SECRETS, namespace="default"), {"watch": True, "timeoutSeconds": 60},
                           timeout=(5, 0.5))
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        list(stream)
    assert 0.4 < time.monotonic() - began < 5


def test_close_from_another_thread_wakes_the_reader(kube_api):
    client = kube_api.agent_client()
    stream = client.stream(api_path(SECRETS, namespace="default"), {"watch": True, "timeoutSeconds": 60},
                           timeout=(5, 60))
    ended = threading.Event()

    def read():
        try:
            list(stream)
        except (OSError, http.client.HTTPException):
            pass
        ended.set()

    threading.Thread(target=read, daemon=True).start()
    time.sleep(0.3)
    assert not ended.is_set()
    stream.close()
    assert ended.wait(5)
    assert client._idle == []


class _ClosingHandler(http.server.BaseHTTPRequestHandler):
    """Answers {} over HTTP/1.1 and then closes the connection without saying so (no Connection: close): what a
    kept-alive connection looks like when the server dropped it while it sat idle."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
        self.close_connection = True

    def log_message(self, *args):
        pass


def test_a_kept_alive_connection_the_server_closed_is_replaced(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ClosingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = ApiClient.for_host(f"http://127.0.0.1:{server.server_address[1]}")
        assert client.request("GET", "/api") == {}
        assert len(client._idle) == 1
        # Seen closed before reuse: dropped from the pool, the call goes over a new connection.
        time.sleep(0.2)
        assert client.request("GET", "/api") == {}
        # Not seen (closed just after the check): the request fails on it and is sent once more on a new one.
        monkeypatch.setattr(kube_client, "_dropped", lambda conn: False)
        time.sleep(0.2)
        assert client.request("GET", "/api") == {}
    finally:
        server.shutdown()
        server.server_close()


def test_the_token_is_read_again_when_its_file_changes(kube_api, tmp_path):
    """As the kubelet rotates a projected ServiceAccount token: a new file swapped in under the same name."""
    token_path = tmp_path / "token"
    token_path.write_text("first-token\n")
    client = ApiClient(KubeConfig(kube_api.url, token=TokenFile(token_path)))
    client.request("GET", api_path(SECRETS, namespace="default"))
    client.request("GET", api_path(SECRETS, namespace="default"))
    swapped = tmp_path / "token.new"
    swapped.write_text("second-token")
    os.replace(swapped, token_path)
    client.request("GET", api_path(SECRETS, namespace="default"))
    assert [token for token, _, _ in kube_api.requests_by_token()] == ["first-token", "first-token", "second-token"]
