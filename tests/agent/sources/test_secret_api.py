"""SecretApiWatcher against the test API server (kmock plus our gap fillers, real HTTP on 127.0.0.1): one mounted
Secret, watched by name through the same list/watch machinery as the Registry."""

from __future__ import annotations

import base64
import contextlib
import copy

import pytest

from berth_agent.core import metrics
from berth_agent.sources.secret_api import SecretApiWatcher, SecretCopy, data_fingerprint, secret_copy
from support.common.polling import until
from support.registries.sources import running

SECRETS = "v1/secrets"
PLANTED = "planted-secret-value-4f1c"


def secret(name: str = "creds", **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"},
            "type": "Opaque", "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


@contextlib.asynccontextmanager
async def watching(kube_api, health, changes, name="creds", volume="cosi", **options):
    options = {"timeout_seconds": 60, "backoff_initial": 0.05, "backoff_cap": 0.2} | options
    watcher = SecretApiWatcher(kube_api.agent_client(), "default", name, volume, health, **options)
    async with running(watcher, changes):
        yield watcher


def _value(change, key="k"):
    return change.secret.data.get(key) if isinstance(change.secret, SecretCopy) else None


def _sample(metric, **labels) -> float:
    return metric.labels(**labels)._value.get()


@pytest.mark.asyncio
async def test_list_then_watch_payload_changes_only(kube_api, health, changes):
    kube_api.create(secret(k="one"))
    kube_api.create(secret("neighbour", k="not ours"))
    async with watching(kube_api, health, changes) as watcher:
        first = await changes.wait_for(lambda c: c.secret is not None)
        assert first.source == "secret:cosi" and first.error is None
        assert first.secret.volume == "cosi" and first.secret.name == "creds" and _value(first) == b"one"
        assert first.secret.fingerprint == data_fingerprint({"k": b"one"})
        await until(lambda: kube_api.open_watches == 1, "the Secret watch open", 20)

        kube_api.patch(SECRETS, "default", "creds", {"data": {"k": _b64("two")}})
        await changes.wait_for(lambda c: _value(c) == b"two")
        # A label (new resourceVersion, same payload) is not a change; the next payload change comes right after.
        kube_api.patch(SECRETS, "default", "creds", {"metadata": {"labels": {"x": "y"}}})
        kube_api.patch(SECRETS, "default", "neighbour", {"data": {"k": _b64("other")}})
        kube_api.patch(SECRETS, "default", "creds", {"data": {"k": _b64("three")}})
        await changes.wait_for(lambda c: _value(c) == b"three")
        assert [_value(c) for c in changes.snapshot()] == [b"one", b"two", b"three"]
        assert health.live_ok() and "secret-api-cosi" in health.registered()
        assert watcher.resource_version

    # Single-object requests by name, on the core secrets path: what resourceNames in the Role allows.
    requests = [path for method, path in kube_api.requests() if method == "GET" and "/secrets" in path]
    assert requests and all(p.startswith("/api/v1/namespaces/default/secrets?") for p in requests)
    assert all("fieldSelector=metadata.name%3Dcreds" in p for p in requests)
    watch = next(p for p in requests if "watch=" in p)
    assert "resourceVersion=" in watch and "timeoutSeconds=60" in watch and "allowWatchBookmarks=" in watch


@pytest.mark.asyncio
async def test_dropped_watch_and_410_relist_and_still_deliver(kube_api, health, changes):
    kube_api.create(secret(k="one"))
    errors_before = _sample(metrics.watch_errors_total, source="secret-api-cosi")
    async with watching(kube_api, health, changes, timeout_seconds=1):
        await changes.wait_for(lambda c: c.secret is not None)
        await until(lambda: kube_api.open_watches == 1, "the Secret watch open", 20)
        kube_api.fail_next(1, status=503, verb="list")
        kube_api.drop_watches()
        kube_api.patch(SECRETS, "default", "creds", {"data": {"k": _b64("two")}})  # while disconnected
        await changes.wait_for(lambda c: _value(c) == b"two")
        await until(lambda: kube_api.open_watches == 1, "the Secret watch open again", 20)
        kube_api.create(secret("other", k="x"))  # moves the server's resourceVersion past ours...
        kube_api.compact()  # ...and forgets the history: resuming is 410 Gone, then a relist
        kube_api.patch(SECRETS, "default", "creds", {"data": {"k": _b64("three")}})
        await changes.wait_for(lambda c: _value(c) == b"three")
    assert _sample(metrics.watch_errors_total, source="secret-api-cosi") >= errors_before + 1
    errors = [c.error for c in changes.snapshot() if c.error]
    assert errors == ["cannot read Secret default/creds: API answered 503 Service Unavailable"]


@pytest.mark.asyncio
async def test_forbidden_missing_and_deleted_are_errors_naming_the_secret_only(kube_api, health, changes):
    kube_api.fail_next(1, status=403, verb="list", plural="secrets")
    async with watching(kube_api, health, changes):
        await changes.wait_for(lambda c: c.error == "cannot read Secret default/creds: API answered 403 Forbidden")
        await changes.wait_for(lambda c: c.error == "Secret default/creds not found")
        kube_api.create(secret(k=PLANTED))
        await changes.wait_for(lambda c: c.secret is not None)
        kube_api.delete(SECRETS, "default", "creds")
        await changes.wait_for(lambda c: c.error == "Secret default/creds was deleted")
    for change in changes.snapshot():
        assert PLANTED not in repr(change) and PLANTED not in str(change.secret)


def test_secret_copy_decodes_and_hides_values():
    obj = secret(k=PLANTED)
    obj["metadata"]["resourceVersion"] = "42"
    copy_ = secret_copy("htpasswd", obj)
    assert copy_.data == {"k": PLANTED.encode()} and copy_.resource_version == "42"
    assert PLANTED not in repr(copy_) and "htpasswd" in repr(copy_)
    empty = copy.deepcopy(obj)
    empty.pop("data")
    assert secret_copy("htpasswd", empty).data == {}
    broken = copy.deepcopy(obj)
    broken["data"]["k"] = "%%%not base64"
    with pytest.raises(ValueError, match="data key 'k' is not base64"):
        secret_copy("htpasswd", broken)


def test_fingerprint_is_over_every_key_and_value():
    assert data_fingerprint({"a": b"1", "b": b"2"}) == data_fingerprint({"b": b"2", "a": b"1"})
    assert data_fingerprint({"a": b"1"}) != data_fingerprint({"a": b"2"})
    assert data_fingerprint({"a": b"1b"}) != data_fingerprint({"a1": b"b"})
    assert data_fingerprint({}) != data_fingerprint({"a": b""})


@pytest.mark.asyncio
async def test_a_config_map_is_watched_by_name_the_same_way(kube_api, health, changes):
    """Token auth's trust may be a ConfigMap (trust-manager writes them): text `data` and base64 `binaryData`."""
    bundle = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    kube_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trust", "namespace": "default"},
                     "data": {"ca.pem": bundle}, "binaryData": {"raw": _b64("bytes")}})
    kube_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "default"},
                     "data": {"ca.pem": "not ours"}})
    async with watching(kube_api, health, changes, name="trust", volume="token-bundle", kind="ConfigMap"):
        first = await changes.wait_for(lambda c: c.secret is not None)
        assert first.source == "secret:token-bundle" and first.secret.name == "trust"
        assert first.secret.data == {"ca.pem": bundle.encode(), "raw": b"bytes"}
        await until(lambda: kube_api.open_watches == 1, "the Secret watch open", 20)
        kube_api.patch("v1/configmaps", "default", "trust", {"data": {"ca.pem": bundle + bundle}})
        await changes.wait_for(lambda c: _value(c, "ca.pem") == (bundle + bundle).encode())
    requests = [path for method, path in kube_api.requests() if method == "GET" and "/configmaps" in path]
    assert requests and all(p.startswith("/api/v1/namespaces/default/configmaps?") for p in requests)
    assert all("fieldSelector=metadata.name%3Dtrust" in p for p in requests)
