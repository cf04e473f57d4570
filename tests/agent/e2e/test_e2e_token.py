"""Token auth with its trust rotated hot.

Real agents (`berth-agent run --registry default/reg --api-configmap token-bundle=issuer-trust`), berth-supervise and
registries, 2.8 and 3.1.1, behind the test balancer (support.registries.replicas, support.traffic.balancer) with the
test API server;
the issuer is support.services.token_issuer on 127.0.0.1, its trust a ConfigMap in the API and (as the kubelet would
write it, and never updates it within the test: the API copy is the fast path) a mounted volume. Clients fetch a
token from the issuer for every pull, as a client whose token just expired would.

The rotation is docs/guide/rotation.md's order: 1. the bundle gets {old, new}; 2. every pod's status.agents shows it
applied; 3. the issuer switches to the new key; 4. the bundle drops the old one. No request fails and none is refused;
the old key's tokens, minted at the end, are refused. Each trust change names a new state in
status.agents.<pod>.configHash and in berth_agent_config_info, though config.yml stays as it was.
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import filesystem_spec
from support.registries.registry import make_oci_image, push_image, registry_binaries
from support.registries.replicas import backends, running_replicas
from support.services.token_issuer import TestCA, TokenIssuer, bearer_status, bundle, fetch_token, jwks
from support.traffic.balancer import Balancer
from support.traffic.pull_loop import KeptAlivePullLoop, PullLoop

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

REGISTRIES = "berth.dev/v1alpha1/registries"
CONFIG_MAPS = "v1/configmaps"
TRUST = "issuer-trust"
SERVICE = "berth-test-registry"
ALICE = ("alice", "alice-password")
SCOPE = "repository:demo/app:pull"
LEAVE_SECONDS = 0.3  # > the balancer's readiness period (0.05 s)

# (id, registry binary param, trust kind): the bundle on both versions, the JWKS on 3.1.1.
FLOWS = [pytest.param((*param.values[0], "bundle"), id=f"{param.id}-bundle", marks=param.marks)
         for param in registry_binaries()]
FLOWS.append(pytest.param((*registry_binaries()[1].values[0], "jwks"), id="dist3-jwks",
                          marks=registry_binaries()[1].marks))


class Trust:
    """The trust material for one kind: a bundle of CA certificates (x5c tokens), or a JWKS (kid tokens)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.old_ca, self.new_ca = TestCA("old-ca"), TestCA("new-ca", kind="ec")
        self.old_key, self.new_key = self.old_ca.issue("RS256"), self.new_ca.issue("ES256")
        self.key_name = "ca.pem" if kind == "bundle" else "jwks.json"
        self.volume = "token-bundle" if kind == "bundle" else "token-jwks"

    def data(self, *which: str) -> str:
        if self.kind == "bundle":
            return bundle(*(self.old_ca if w == "old" else self.new_ca for w in which)).decode()
        return jwks(*(self.old_key if w == "old" else self.new_key for w in which)).decode()

    def token_spec(self, realm: str) -> dict:
        ref = {"configMap": {"name": TRUST, "field": self.key_name}}
        token = {"realm": realm, "service": SERVICE, "issuer": "berth-test-issuer"}
        return {**token, "rootCertBundle": ref} if self.kind == "bundle" else {
            **token, "jwks": ref, "signingAlgorithms": ["RS256", "ES256"]}


def token_registry_spec(port: int, major: str, trust: Trust, realm: str) -> dict:
    spec = filesystem_spec(port, major=major, http={"addr": f"127.0.0.1:{port}", "drainTimeout": "30s"})
    spec["config"]["auth"] = {"token": trust.token_spec(realm)}
    return spec


def set_trust(kube_api, trust: Trust, *which: str) -> None:
    kube_api.patch(CONFIG_MAPS, "default", TRUST, {"data": {trust.key_name: trust.data(*which)}})


def records(kube_api) -> dict:
    obj = kube_api.get(REGISTRIES, "default", "reg") or {}
    return (obj.get("status") or {}).get("agents") or {}


def wait_applied(kube_api, pods: dict, trust: Trust, *which: str) -> None:
    """Step 2 of docs/guide/rotation.md: every pod's status.agents.<pod>.trust shows the new file's sha256, with no
    error."""
    field = "rootCertBundle" if trust.kind == "bundle" else "jwks"
    wanted = hashlib.sha256(trust.data(*which).encode()).hexdigest()
    for name in pods:
        wait_for(lambda name=name: (record := records(kube_api).get(name) or {}).get("trust", {}).get(field) == wanted
                 and not record.get("error"), timeout=60, what=f"{name} to apply the trust change")


def identities(kube_api, pods: dict) -> dict[str, str]:
    """Each pod's status.agents.<pod>.configHash, checked against what its config dir holds and its config_info."""
    found = {}
    for name, pod in pods.items():
        found[name] = records(kube_api)[name]["configHash"]
        assert found[name] == pod.disk_identity(), name
        assert pod.config_info() == [found[name]], name
    return found


def rotate(kube_api, pods: dict, issuer: TokenIssuer, trust: Trust, loops: list[PullLoop]) -> dict[str, float]:
    """The rotation, step by step; returns the seconds each trust change took to be applied by every pod."""
    seconds = {}
    wait_applied(kube_api, pods, trust, "old")  # each pod's first record is on status
    configs = {name: (pod.config_dir / "config.yml").read_bytes() for name, pod in pods.items()}
    seen = [identities(kube_api, pods)]
    for step, which in (("add", ("old", "new")), ("drop", ("new",))):
        if step == "drop":
            issuer.use(trust.new_key)  # step 3: the issuer signs with the new key, trusted everywhere now
            served = [loop.stats.successes for loop in loops]
            wait_for(lambda served=served: all(loop.stats.successes > count + 20
                                               for loop, count in zip(loops, served)),
                     what="pulls with new-key tokens")
        began = time.monotonic()
        set_trust(kube_api, trust, *which)
        wait_applied(kube_api, pods, trust, *which)
        seconds[step] = round(time.monotonic() - began, 3)
        # config.yml is the same bytes; the state it names is not, on status and in the metric alike.
        assert {name: (pod.config_dir / "config.yml").read_bytes() for name, pod in pods.items()} == configs
        now = identities(kube_api, pods)
        assert all(now[name] not in (earlier[name] for earlier in seen) for name in pods), (step, now, seen)
        seen.append(now)
        served = [loop.stats.successes for loop in loops]
        wait_for(lambda served=served: all(loop.stats.successes > count + 10 for loop, count in zip(loops, served)),
                 what="pulls after the trust change")
    return seconds


def start(tmp_path, kube_api, dist, count: int):
    major, binary, kind = dist
    trust = Trust(kind)
    issuer = TokenIssuer(trust.old_key, users=dict([ALICE]), header="x5c" if kind == "bundle" else "kid")
    kube_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": TRUST, "namespace": "default"},
                     "data": {trust.key_name: trust.data("old")}})
    port = free_port()
    spec = token_registry_spec(port, major, trust, issuer.realm)
    replicas = running_replicas(tmp_path / "pods", kube_api, spec, count=count, leave_seconds=LEAVE_SECONDS,
                                binary=binary, mounts={trust.volume: {trust.key_name: trust.data("old")}},
                                extra=["--api-configmap", f"{trust.volume}={TRUST}"])
    return trust, issuer, replicas


def pull_loops(url: str, blob: bytes, issuer: TokenIssuer, count: int, *, retry_seconds: float) -> list[PullLoop]:
    challenge = {"realm": issuer.realm, "service": SERVICE, "scope": SCOPE}
    return [PullLoop(url, blob, retry_seconds=retry_seconds,
                     authorization=lambda: f"Bearer {fetch_token(challenge, ALICE)}") for _ in range(count)]


def no_secrets_in(text: str, trust: Trust, tokens: list[str]) -> None:
    from cryptography.hazmat.primitives import serialization

    for key in (trust.old_key, trust.new_key):
        pem = key.private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()).decode()
        assert pem.splitlines()[1] not in text
    for token in tokens:
        assert token.split(".")[2] not in text and token not in text


@pytest.mark.parametrize("dist", FLOWS)
def test_key_rotation_with_two_replicas_fails_and_refuses_nothing(tmp_path, kube_api, dist):
    trust, issuer, replicas = start(tmp_path, kube_api, dist, count=2)
    loops: list[PullLoop] = []
    with issuer, replicas as pods:
        balancer = Balancer(backends(pods), check_interval=0.05).start()
        try:
            image = make_oci_image(tmp_path / "image", layer_size=256 * 1024)
            push_image(image, balancer.host, "demo/app:1", creds=ALICE)  # skopeo does the token challenge
            layer = image.layer_digests[0]
            url = f"{balancer.url}/v2/demo/app/blobs/{layer}"
            old_token = issuer.mint(SERVICE, SCOPE, key=trust.old_key)
            pod_urls = [f"{pod.url}/v2/demo/app/blobs/{layer}" for pod in pods.values()]
            assert [bearer_status(u, old_token) for u in pod_urls] == [200, 200]
            # retry_seconds=0: a refused or reset connection is a failure here, not something to retry. On 3.x
            # no pod leaves the Service, and the old registry gets no new connection before its SIGTERM (a socket
            # each, steered; docs/decisions/0007-held-socket-handover.md), so none is closed without a response either.
            loops = pull_loops(url, image.blobs[layer], issuer, 2, retry_seconds=0)
            for loop in loops:
                loop.start()
            wait_for(lambda: all(loop.stats.successes >= 10 for loop in loops), what="the pull loops to get going")
            seconds = rotate(kube_api, pods, issuer, trust, loops)
            stats = [loop.stop() for loop in loops]
            new_token = issuer.mint(SERVICE, SCOPE)
            # The end: the old key's tokens are refused on every pod, the new key's served. Minted now, so a
            # refusal is the dropped trust, not an expiry (a run longer than the token's lifetime).
            old_again = issuer.mint(SERVICE, SCOPE, key=trust.old_key)
            assert [bearer_status(u, old_again) for u in pod_urls] == [401, 401]
            assert [bearer_status(u, new_token) for u in pod_urls] == [200, 200]
        finally:
            for loop in loops:
                loop.stop()
            balancer_stats = balancer.stop()
        assert all(s.successes > 0 for s in stats)
        assert [s.failures for s in stats] == [[], []], [s.failures[:5] for s in stats]
        assert sum(s.refused_retries + s.reset_retries for s in stats) == 0, stats
        assert balancer_stats.refused == 0 and balancer_stats.no_backend == 0, balancer_stats
        # 2.8: one pod out at a time, never both. 3.x: held sockets, no pod leaves the Service to reload.
        if dist[0] == "3":  # no pod ever left (min_ready also covers the start, before the second one was seen)
            assert all(ready for _at, _pod, ready in balancer_stats.transitions), balancer_stats
        else:
            assert balancer_stats.min_ready == 1, balancer_stats
        for pod in pods.values():
            assert len(pod.actions("restarted")) == 2  # one per trust change, from the API copy
            assert pod.metric("secret_changes_applied_total", 'path="api"') == 2
        text = "".join(pod.agent_log_text() + pod.metrics_text() for pod in pods.values())
        no_secrets_in(text + json.dumps(kube_api.list("v1/events", "default")) + json.dumps(records(kube_api)),
                      trust, [old_token, old_again, new_token])
        print(json.dumps({"flow": dist[2], "major": dist[0], "trust_change_applied_seconds": seconds,
                          "pulls": sum(s.requests for s in stats), "failed": 0, "refused": 0, "reset": 0}))


@pytest.mark.parametrize("dist", FLOWS)
def test_key_rotation_with_one_replica_fails_nothing(tmp_path, kube_api, dist):
    """One replica. 2.8, the overlapped restart: refused connections (the few ms between the old listener closing and
    the new one) are retried by the client, counted and shown, as the hitless benchmarks do. 3.x, the socket
    berth-supervise holds: none is refused. A second client keeps one connection alive throughout (before
    docs/decisions/0001-retirement-bounded-by-drain-timeout.md, an old registry, still trusting the old key only, served
    it for up to 90 s, and its new-key tokens got 401); a trust change retires a credential, so the old registry goes
    within drainTimeout and that client reconnects."""
    trust, issuer, replicas = start(tmp_path, kube_api, dist, count=1)
    loops: list[PullLoop] = []
    with issuer, replicas as pods:
        (pod,) = pods.values()
        try:
            image = make_oci_image(tmp_path / "image", layer_size=256 * 1024)
            push_image(image, pod.host, "demo/app:1", creds=ALICE)
            layer = image.layer_digests[0]
            url = f"{pod.url}/v2/demo/app/blobs/{layer}"
            assert bearer_status(url, issuer.mint(SERVICE, SCOPE, key=trust.old_key)) == 200
            loops = pull_loops(url, image.blobs[layer], issuer, 1, retry_seconds=5)
            challenge = {"realm": issuer.realm, "service": SERVICE, "scope": SCOPE}
            loops.append(KeptAlivePullLoop(url, image.blobs[layer], retry_seconds=5,
                                           authorization=lambda: f"Bearer {fetch_token(challenge, ALICE)}"))
            for loop in loops:
                loop.start()
            wait_for(lambda: all(loop.stats.successes >= 10 for loop in loops), what="the pull loops to get going")
            seconds = rotate(kube_api, pods, issuer, trust, loops)
            stats, kept = [loop.stop() for loop in loops]
            assert bearer_status(url, issuer.mint(SERVICE, SCOPE, key=trust.old_key)) == 401  # minted fresh
            assert bearer_status(url, issuer.mint(SERVICE, SCOPE)) == 200
        finally:
            for loop in loops:
                loop.stop()
        print(json.dumps({"flow": dist[2], "major": dist[0], "trust_change_applied_seconds": seconds,
                          "pulls": stats.requests, "failed": len(stats.failures),
                          "refused_retried": stats.refused_retries, "reset_retried": stats.reset_retries,
                          "kept_alive_pulls": kept.requests, "kept_alive_failed": len(kept.failures),
                          "kept_alive_closed_retried": kept.reset_retries}))
        assert stats.failures == [], stats.failures[:5]
        assert kept.failures == [] and kept.successes > 0, kept.failures[:5]
        assert stats.successes > 0 and len(pod.actions("restarted")) == 2
        if dist[0] == "3":  # the held socket: nothing refused, nothing closed without a response
            assert stats.refused_retries == 0 and stats.reset_retries == 0, stats


@pytest.mark.parametrize("dist", [FLOWS[0], FLOWS[2]])
def test_malformed_trust_is_refused_before_any_restart(tmp_path, kube_api, dist):
    """Not PEM, an expired certificate, a JWKS with no usable key: Degraded input named by object and key in
    status.agents (the operator's AgentFailed), the registry untouched and still serving the last good trust."""
    from datetime import UTC, datetime, timedelta

    trust, issuer, replicas = start(tmp_path, kube_api, dist, count=1)
    with issuer, replicas as pods:
        (pod,) = pods.values()
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, pod.host, "demo/app:1", creds=ALICE)
        url = f"{pod.url}/v2/demo/app/blobs/{image.layer_digests[0]}"
        pid, starts = pod.registry_pid(), pod.registry_starts()
        wait_applied(kube_api, pods, trust, "old")
        (running,) = identities(kube_api, pods).values()
        if trust.kind == "bundle":
            expired = TestCA("expired-ca", not_before=datetime.now(UTC) - timedelta(days=40)).cert_pem.decode()
            bad = [("this is not PEM", "holds no PEM certificate"),
                   (trust.data("old") + expired, "certificate 2 expired at")]
            field = "rootCertBundle"
        else:
            bad = [("{not json", "is not JSON"),
                   (json.dumps({"keys": [{**trust.old_key.jwk(), "use": "enc"}]}), "no signing key"),
                   (json.dumps({"keys": []}), "no \"keys\" list")]
            field = "jwks"
        for data, problem in bad:
            kube_api.patch(CONFIG_MAPS, "default", TRUST, {"data": {trust.key_name: data}})
            error = wait_for(lambda problem=problem: (e := (records(kube_api).get("pod-a") or {}).get("error"))
                             and problem in e and e, timeout=30,
                             what=lambda problem=problem: f"the refusal ({problem})\n{pod.agent_log_text()[-2000:]}")
            assert f"spec.config.auth.token.{field} (ConfigMap {TRUST} key {trust.key_name})" in error
            # The refused state is named, not the one still serving, which status and metric keep.
            assert error.startswith("config ") and " not applied: " in error and running[:12] not in error, error
            assert identities(kube_api, pods) == {"pod-a": running}
            assert pod.registry_pid() == pid and pod.registry_starts() == starts, "the registry was restarted"
            assert bearer_status(url, issuer.mint(SERVICE, SCOPE)) == 200  # the last good trust serves
        set_trust(kube_api, trust, "old")
        wait_for(lambda: not (records(kube_api).get("pod-a") or {}).get("error"), what="recovery")
        assert pod.metric("reload_failures_total", 'reason="preflight"') >= len(bad)
        # Back on the state it never left; the log says so at info, once, naming what it cleared.
        assert identities(kube_api, pods) == {"pod-a": running}
        # The agent writes the status first and logs `recovered` after it (coordinator): wait for the line.
        wait_for(lambda: pod.actions("recovered"), what=lambda: f"the recovered line\n{pod.agent_log_text()[-2000:]}")
        recovered = pod.actions("recovered")[-1]
        assert recovered["level"] == "info" and recovered["config_hash"] == running
        assert bad[-1][1] in recovered["cleared"]
