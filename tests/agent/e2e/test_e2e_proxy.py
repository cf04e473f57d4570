"""A pull-through cache with its upstream credentials rotated hot.

Real agents (`berth-agent run --registry default/reg --api-secret proxy=upstream-creds`), berth-supervise and
registries, 2.8 and 3.1.1, with the test API server; the upstream is a second real registry on 127.0.0.1
(support.registries.upstream): htpasswd (basic auth, Distribution 3 only: 2.8 cannot answer basic as a proxy), or token
auth behind a one-port front that counts every request and tells which password got each token. Clients are
skopeo and a plain HTTP client (support.traffic.pull_loop). The credential rotation runs against both upstreams:
with htpasswd, whose file holds one password per user, it moves to a second user and removes the first.
"""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path

import pytest

from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import filesystem_spec
from support.registries.registry import (
    REGISTRY3_BINARY,
    REGISTRY_BINARY,
    http_get,
    make_oci_image,
    pull_image,
    push_image,
    requires_registry3,
)
from support.registries.replicas import backends, running_replicas
from support.registries.upstream import Upstream, htpasswd_upstream, set_htpasswd, token_upstream
from support.traffic.balancer import Balancer
from support.traffic.pull_loop import KeptAlivePullLoop, PullLoop

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

REGISTRIES = "berth.dev/v1alpha1/registries"
SECRETS = "v1/secrets"
CREDS = "upstream-creds"
USER = "mirror"
OLD, NEW, WRONG = "old-upstream-password", "new-upstream-password", "wrong-upstream-password"
# htpasswd holds one password per user: a basic-auth upstream's rotation moves to a second user, the old one revoked.
NEW_USER = "mirror-next"
DRAIN = 5  # seconds: spec.http.drainTimeout
LEAVE_SECONDS = 0.3

FLOWS = [pytest.param(("2", REGISTRY_BINARY, "token"), id="dist2-token"),
         pytest.param(("3", REGISTRY3_BINARY, "token"), id="dist3-token", marks=requires_registry3),
         pytest.param(("3", REGISTRY3_BINARY, "basic"), id="dist3-basic", marks=requires_registry3)]


def secret_data(password: str, user: str = USER) -> dict[str, str]:
    return {"username": base64.b64encode(user.encode()).decode(),
            "password": base64.b64encode(password.encode()).decode()}


def records(kube_api) -> dict:
    return ((kube_api.get(REGISTRIES, "default", "reg") or {}).get("status") or {}).get("agents") or {}


def upstream_for(tmp_path, kind: str, binary: str, passwords: set[str]):
    if kind == "token":
        return token_upstream(tmp_path / "upstream", {USER: passwords}, binary=binary)
    return htpasswd_upstream(tmp_path / "upstream", {USER: sorted(passwords)[0]}, binary=binary)


def start(tmp_path, kube_api, dist, upstream: Upstream, count: int):
    major, binary, _ = dist
    kube_api.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/basic-auth",
                     "metadata": {"name": CREDS, "namespace": "default"}, "data": secret_data(OLD)})
    port = free_port()
    spec = filesystem_spec(port, major=major, http={"addr": f"127.0.0.1:{port}", "drainTimeout": f"{DRAIN}s"})
    spec["config"]["proxy"] = {"remoteURL": upstream.url, "credentials": {"secretName": CREDS}}
    return running_replicas(tmp_path / "pods", kube_api, spec, count=count, leave_seconds=LEAVE_SECONDS,
                            binary=binary, mounts={"proxy": {"username": USER, "password": OLD}},
                            extra=["--api-secret", f"proxy={CREDS}", "--upstream-interval", "1"])


def blob_gets(upstream: Upstream) -> list[str]:
    """Blob GETs the upstream served (the front's log for a token upstream, the access log for htpasswd)."""
    if upstream.front is not None:
        return [e.path for e in upstream.front.log if e.method == "GET" and "/blobs/" in e.path and e.status == 200]
    return upstream.content_requests("blobs")


def seed(tmp_path, upstream: Upstream, reference: str, *, user: str = USER, password: str = OLD, layers: int = 1,
         layer_size: int = 256 * 1024):
    image = make_oci_image(tmp_path / reference.replace("/", "_").replace(":", "_"), layers=layers,
                           layer_size=layer_size)
    push_image(image, upstream.registry, reference, creds=(user, password))
    return image


@pytest.mark.parametrize("dist", FLOWS)
def test_pull_through_once_then_from_cache_also_with_the_upstream_stopped(tmp_path, kube_api, dist):
    with upstream_for(tmp_path, dist[2], dist[1], {OLD}) as upstream, \
            start(tmp_path, kube_api, dist, upstream, count=1) as pods:
        (pod,) = pods.values()
        image = seed(tmp_path, upstream, "lib/app:1")
        blobs_in_image = len(image.blobs) - 1  # the config and the layer; the manifest is no blob
        first = pull_image(pod.host, "lib/app:1", tmp_path / "first")
        assert first.blobs == image.blobs  # byte-identical
        per_fill = 2 if dist[0] == "2" else 1
        fetched = wait_for(lambda: len(blob_gets(upstream)) >= blobs_in_image * per_fill and blob_gets(upstream),
                           what="the cache's blob fetches in the upstream's log")
        second = pull_image(pod.host, "lib/app:1", tmp_path / "second")
        assert second.blobs == image.blobs
        time.sleep(0.5)
        assert blob_gets(upstream) == fetched, "the second pull fetched blobs from the upstream again"
        # 3.x tees a miss into the cache while serving it; 2.8 serves it from one upstream GET and stores it
        # from a second, in the background (registry/proxy/proxyblobstore.go v2.8.2: storeLocal beside
        # copyContent). Either way, once per cache fill.
        assert all(fetched.count(path) == per_fill for path in fetched), fetched
        assert len(set(fetched)) == blobs_in_image
        record = wait_for(lambda: (records(kube_api).get("pod-a") or {}).get("upstream"), what="upstream status")
        assert record["url"] == upstream.url and record["reachable"] is True
        assert record["auth"] == ("bearer" if dist[2] == "token" else "basic")
        assert record.get("lastAuthFailure") is None

        # A push to the cache is refused, with its status code.
        answer = http_get(f"{pod.url}/v2/lib/pushed/blobs/uploads/", method="POST")
        assert answer.status == 405, answer
        with pytest.raises(RuntimeError, match="unsupported"):
            push_image(make_oci_image(tmp_path / "other", layer_size=1024), pod.host, "lib/pushed:1")

        # The upstream stops: cached content still pulls, byte-identical; content not cached does not.
        upstream.stop()
        assert pull_image(pod.host, "lib/app:1", tmp_path / "stopped").blobs == image.blobs
        with pytest.raises(RuntimeError, match="manifest unknown"):
            pull_image(pod.host, "lib/never-pulled:1", tmp_path / "missing")
        record = wait_for(lambda: (r := (records(kube_api).get("pod-a") or {}).get("upstream")) and
                          r["reachable"] is False and r, what="the upstream reported unreachable")
        # A restart now would panic the registry (it asks the upstream's /v2/ at start): a CR edit is refused
        # before any restart and the cache keeps serving.
        pid, starts = pod.registry_pid(), pod.registry_starts()
        kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"config": {"log": {"level": "debug"}}}})
        error = wait_for(lambda: (records(kube_api).get("pod-a") or {}).get("error"), timeout=30,
                         what="the refusal of a restart with the upstream down")
        assert f"spec.config.proxy: remoteURL {upstream.url} is unreachable" in error, error
        assert pod.registry_pid() == pid and pod.registry_starts() == starts
        assert pull_image(pod.host, "lib/app:1", tmp_path / "still").blobs == image.blobs
        # The upstream back: the edit goes through.
        upstream.start_again()
        wait_for(lambda: not (records(kube_api).get("pod-a") or {}).get("error"), timeout=60,
                 what="the edit applied once the upstream answers")
        assert pod.registry_pid() != pid


@pytest.mark.parametrize("dist", FLOWS)
def test_wrong_credentials_are_refused_before_any_restart_with_the_upstreams_answer(tmp_path, kube_api, dist):
    with upstream_for(tmp_path, dist[2], dist[1], {OLD}) as upstream, \
            start(tmp_path, kube_api, dist, upstream, count=1) as pods:
        (pod,) = pods.values()
        image = seed(tmp_path, upstream, "lib/app:1")
        layer = image.layer_digests[0]
        url = f"{pod.url}/v2/lib/app/blobs/{layer}"
        assert http_get(url).body == image.blobs[layer]  # cached now
        pid, starts = pod.registry_pid(), pod.registry_starts()
        kube_api.patch(SECRETS, "default", CREDS, {"data": secret_data(WRONG)})
        error = wait_for(lambda: (records(kube_api).get("pod-a") or {}).get("error"), timeout=30,
                         what=lambda: f"the pre-flight refusal\n{pod.agent_log_text()[-2000:]}")
        assert "not applied: spec.config.proxy: " in error and "HTTP 401" in error, error
        assert pod.registry_pid() == pid and pod.registry_starts() == starts, "the registry was restarted"
        assert http_get(url).body == image.blobs[layer]  # the cache keeps serving
        record = wait_for(lambda: (r := records(kube_api)["pod-a"].get("upstream")) and r.get("lastAuthFailure")
                          and r, what="lastAuthFailure")
        assert record["lastAuthFailure"]["status"] == 401 and record["reachable"] is True
        assert pod.metric("reload_failures_total", 'reason="preflight"') >= 1
        # Right again: applied, and the error goes.
        kube_api.patch(SECRETS, "default", CREDS, {"data": secret_data(OLD)})
        wait_for(lambda: not (records(kube_api).get("pod-a") or {}).get("error"), timeout=30, what="recovery")
        text = pod.agent_log_text() + pod.metrics_text() + json.dumps(kube_api.list("v1/events", "default")) + \
            json.dumps(records(kube_api))
        # The registry container's log and registry-output too: the registry prints its proxy's URL at start,
        # never the credentials (checked on 2.8.2 and 3.1.1).
        registry_log = (pod.root / "registry.log").read_text(errors="replace")
        assert "configured as a proxy cache to" in registry_log
        text += registry_log + (pod.config_dir / "registry-output").read_text(errors="replace")
        for secret in (OLD, WRONG):
            assert secret not in text


class MissLoop(PullLoop):
    """Pulls a blob not pulled before on each request (a cache miss, fetched through), from `blobs` in turn."""

    def __init__(self, base: str, blobs: list[tuple[str, bytes]], **kwargs) -> None:
        super().__init__(base, b"", **kwargs)
        self.base, self.blobs, self.index = base, blobs, 0

    def one_request(self) -> None:
        digest, data = self.blobs[self.index % len(self.blobs)]
        self.index += 1
        self.url, self.expected = f"{self.base}/v2/lib/many/blobs/{digest}", data
        super().one_request()


class KeptAliveMissLoop(KeptAlivePullLoop):
    """The same misses on one kept-alive connection (before docs/decisions/0001-retirement-bounded-by-drain-timeout.md,
    an old registry kept serving such a client with the
    old credentials for up to 90 s, and its misses failed after the revoke)."""

    def __init__(self, base: str, blobs: list[tuple[str, bytes]], **kwargs) -> None:
        super().__init__(base, b"", **kwargs)
        self.base, self.blobs, self.index = base, blobs, len(blobs) // 2  # not the other loop's next misses

    def one_request(self) -> None:
        digest, data = self.blobs[self.index % len(self.blobs)]
        self.index += 1
        self.url, self.expected = f"{self.base}/v2/lib/many/blobs/{digest}", data
        super().one_request()


def rotate(kube_api, pods: dict, upstream: Upstream, loops: list[PullLoop]) -> dict:
    """docs/guide/rotation.md's order: 1. the upstream gets the new password; 2. the Secret is updated; 3. once
    every pod reports the new config and the drain timeout has passed, the old password is revoked at the upstream. A
    basic-auth upstream gets a second user with the new password instead, and the old user is removed."""
    before = {name: records(kube_api)[name]["configHash"] for name in pods}
    if upstream.front is not None:
        upstream.front.passwords[USER].add(NEW)  # 1
        data = secret_data(NEW)
    else:
        set_htpasswd(upstream, {USER: OLD, NEW_USER: NEW})  # 1 (the registry re-reads it by mtime)
        data = secret_data(NEW, user=NEW_USER)
    began = time.monotonic()
    kube_api.patch(SECRETS, "default", CREDS, {"data": data})  # 2
    for name in pods:
        wait_for(lambda name=name: (r := records(kube_api).get(name) or {}).get("configHash") != before[name]
                 and not r.get("error"), timeout=60, what=f"{name} to apply the new credentials")
    applied = round(time.monotonic() - began, 3)
    time.sleep(DRAIN + 1)
    revoked_at = time.monotonic()
    log_sizes = upstream_log_sizes(upstream)
    if upstream.front is not None:
        upstream.front.passwords[USER].discard(OLD)  # 3
    else:
        set_htpasswd(upstream, {NEW_USER: NEW})  # 3
    served = [loop.stats.successes for loop in loops]
    wait_for(lambda: all(loop.stats.successes > count + 20 for loop, count in zip(loops, served)),
             what="pulls after the revoke")
    return {"applied_seconds": applied, "revoked_at": revoked_at, "log_sizes": log_sizes}


def load(tmp_path, upstream: Upstream, url: str, *, retry_seconds: float, kept_alive: bool = False):
    hit = seed(tmp_path, upstream, "lib/app:1")
    many = seed(tmp_path, upstream, "lib/many:1", layers=120, layer_size=8 * 1024)
    layer = hit.layer_digests[0]
    blobs = [(d, many.blobs[d]) for d in many.layer_digests]
    loops = [PullLoop(f"{url}/v2/lib/app/blobs/{layer}", hit.blobs[layer], retry_seconds=retry_seconds),
             MissLoop(url, blobs, retry_seconds=retry_seconds, pause=0.05)]
    if kept_alive:
        loops.append(KeptAliveMissLoop(url, blobs, retry_seconds=retry_seconds, pause=0.05))
    return loops


def upstream_log_sizes(upstream: Upstream) -> dict[Path, int]:
    return {path: path.stat().st_size for path in upstream.root.glob("run-*/registry.log")}


def basic_requests_after(upstream: Upstream, sizes: dict[Path, int]) -> list[tuple[str, str, int]]:
    """(user, uri, status) of each request a basic-auth upstream answered after `sizes` (its logs' lengths then),
    from its "response completed" lines (auth.user.name: the user that authenticated; "" for none)."""
    found = []
    for path in sorted(upstream.root.glob("run-*/registry.log")):
        with open(path, "rb") as log:
            log.seek(sizes.get(path, 0))
            text = log.read().decode(errors="replace")
        for line in text.splitlines():
            if 'msg="response completed' not in line:
                continue
            user = re.search(r"auth\.user\.name=(\S+)", line)
            uri = re.search(r'http\.request\.uri="([^"]*)"', line)
            status = re.search(r"http\.response\.status=(\d+)", line)
            if uri and status:
                found.append((user.group(1) if user else "", uri.group(1), int(status.group(1))))
    return found


def fetch_uncached(tmp_path, upstream: Upstream, url: str) -> None:
    """A basic-auth upstream after the revoke: pull a blob no cache holds yet through `url`, so the upstream must
    serve one as the new user (the load's blobs may all be cached by then; counted, not timed)."""
    late = seed(tmp_path, upstream, "lib/late:1", user=NEW_USER, password=NEW, layer_size=16 * 1024)
    layer = late.layer_digests[0]
    assert http_get(f"{url}/v2/lib/late/blobs/{layer}").body == late.blobs[layer]


def no_old_password_after(upstream: Upstream, moment: float, sizes: dict[Path, int]) -> None:
    if upstream.front is None:
        after = basic_requests_after(upstream, sizes)
        assert after, "the upstream saw no request after the revoke"
        assert not [r for r in after if r[0] == USER], "something was pulled as the revoked user"
        assert [r for r in after if r[0] == NEW_USER and "/blobs/" in r[1] and r[2] == 200], \
            "no blob fetched as the new user"
        return
    after = upstream.front.after(moment)
    assert after, "the upstream saw no request after the revoke"
    assert not [e for e in after if e.password == OLD], "something was pulled with the old password"
    assert not [e for e in upstream.front.token_log if e.at >= moment and e.password == OLD]
    assert [e for e in after if e.password == NEW and "/blobs/" in e.path], "no blob fetched with the new one"


@pytest.mark.parametrize("dist", FLOWS)
def test_credential_rotation_with_two_replicas_fails_and_refuses_nothing(tmp_path, kube_api, dist):
    loops: list[PullLoop] = []
    with upstream_for(tmp_path, dist[2], dist[1], {OLD}) as upstream, \
            start(tmp_path, kube_api, dist, upstream, count=2) as pods:
        balancer = Balancer(backends(pods), check_interval=0.05).start()
        try:
            # 0: a refusal or a reset is a failure here. On 3.x no pod leaves the Service, and the old registry gets
            # no new connection before its SIGTERM (a socket each, steered;
            # docs/decisions/0007-held-socket-handover.md).
            loops = load(tmp_path, upstream, balancer.url, retry_seconds=0)
            for loop in loops:
                loop.start()
            wait_for(lambda: all(loop.stats.successes >= 10 for loop in loops), what="the pull loops")
            seconds = rotate(kube_api, pods, upstream, loops)
            if upstream.front is None:
                fetch_uncached(tmp_path, upstream, balancer.url)
            stats = [loop.stop() for loop in loops]
        finally:
            for loop in loops:
                loop.stop()
            balancer_stats = balancer.stop()
        assert [s.failures for s in stats] == [[], []], [s.failures[:5] for s in stats]
        assert sum(s.refused_retries + s.reset_retries for s in stats) == 0, stats
        assert balancer_stats.refused == 0 and balancer_stats.no_backend == 0, balancer_stats
        # 2.8: one pod out at a time, never both. 3.x: held sockets, no pod leaves the Service to reload.
        if dist[0] == "3":  # no pod ever left (min_ready also covers the start, before the second one was seen)
            assert all(ready for _at, _pod, ready in balancer_stats.transitions), balancer_stats
        else:
            assert balancer_stats.min_ready == 1, balancer_stats
        no_old_password_after(upstream, seconds["revoked_at"], seconds["log_sizes"])
        for pod in pods.values():
            assert len(pod.actions("restarted")) == 1  # the credential change, from the API copy
        print(json.dumps({"major": dist[0], "upstream": dist[2],
                          "credentials_applied_seconds": seconds["applied_seconds"],
                          "pulls": sum(s.requests for s in stats), "misses": stats[1].requests,
                          "failed": 0, "refused": 0, "reset": 0}))


@pytest.mark.parametrize("dist", FLOWS)
def test_credential_rotation_with_one_replica_fails_nothing(tmp_path, kube_api, dist):
    """One replica: 2.8's overlapped restart, whose refused connections are retried by the client, counted,
    shown; on 3.x the socket berth-supervise holds refuses none. A third client misses on one kept-alive connection:
    the old password is revoked drainTimeout after the apply, and no miss fails."""
    loops: list[PullLoop] = []
    with upstream_for(tmp_path, dist[2], dist[1], {OLD}) as upstream, \
            start(tmp_path, kube_api, dist, upstream, count=1) as pods:
        (pod,) = pods.values()
        try:
            loops = load(tmp_path, upstream, pod.url, retry_seconds=5, kept_alive=True)
            for loop in loops:
                loop.start()
            wait_for(lambda: all(loop.stats.successes >= 10 for loop in loops), what="the pull loops")
            seconds = rotate(kube_api, pods, upstream, loops)
            if upstream.front is None:
                fetch_uncached(tmp_path, upstream, pod.url)
            stats = [loop.stop() for loop in loops]
        finally:
            for loop in loops:
                loop.stop()
        print(json.dumps({"major": dist[0], "upstream": dist[2],
                          "credentials_applied_seconds": seconds["applied_seconds"],
                          "pulls": sum(s.requests for s in stats), "failed": sum(len(s.failures) for s in stats),
                          "refused_retried": sum(s.refused_retries for s in stats),
                          "reset_retried": sum(s.reset_retries for s in stats),
                          "kept_alive_misses": stats[2].requests}))
        assert [s.failures for s in stats] == [[], [], []], [s.failures[:5] for s in stats]
        if dist[0] == "3":  # the held socket: nothing refused, nothing closed without a response (new connections)
            assert sum(s.refused_retries + s.reset_retries for s in stats[:2]) == 0, stats
        no_old_password_after(upstream, seconds["revoked_at"], seconds["log_sizes"])
        assert len(pod.actions("restarted")) == 1
