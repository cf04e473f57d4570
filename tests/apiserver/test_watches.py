"""The agent's Registry and Secret watchers on the real API server, with the agent's own token (list and watch
allowed by resourceNames, through fieldSelector metadata.name): what kmock only imitates
(docs/upstream.md#parts-kmock).

- 410 Gone: a watch resumed from a resourceVersion etcd has compacted away is refused with 410 by an API
  server reading etcd directly (support.clusters.apiserver.uncached_apiserver); the watcher lists again, says so at
  INFO, reports no error, and the next change still arrives;
- bookmarks: the watch cache sends a BOOKMARK before each watch's timeout; the watcher moves its
  resourceVersion to it (past another Registry's write it never sees) and resumes from there;
- deleted and recreated: the deletion is reported, the new object (new uid, new content) arrives.

The faults the real server does not make on demand (a dropped connection, a refused list, a 410 answer
instead of an event) stay in tests/agent on kmock.
"""

from __future__ import annotations

import base64
import contextlib
import logging

import pytest

from agent.conftest import ChangeCollector
from berth_agent.core.health import Health
from berth_agent.kube.client import ApiClient
from berth_agent.kube.config import from_kubeconfig
from berth_agent.sources.registry_api import RegistryApiWatcher
from berth_agent.sources.secret_api import SecretApiWatcher
from support.clusters.apiserver import KubeApiServer, etcd_compact
from support.clusters.apiserver_identities import agent_token
from support.common.polling import until
from support.registries.sources import running

REGISTRIES = "berth.dev/v1alpha1/registries"
SECRETS = "v1/secrets"
GONE = "watch expired (410 Gone), listing again"


def registry(namespace: str, name: str = "reg", level: str = "info") -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": name, "namespace": namespace},
            "spec": {"config": {"log": {"level": level}, "storage": {"inmemory": {},
                                "auth": {"htpasswd": {"secret": {"name": "creds", "field": "htpasswd"}}}}}}}


def secret(namespace: str, value: str, name: str = "creds") -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {"htpasswd": base64.b64encode(value.encode()).decode()}}


@pytest.fixture
def agent(kube_apiserver: KubeApiServer, apiserver_namespace: str) -> str:
    """The Registry, its Secret, and the agent's token (the operator's builders' Role)."""
    created = kube_apiserver.create(registry(apiserver_namespace))
    kube_apiserver.create(secret(apiserver_namespace, "one"))
    return agent_token(kube_apiserver, created)


def level(change) -> str | None:
    return change.registry["spec"]["config"]["log"]["level"] if change.registry else None


def value(change) -> bytes | None:
    return change.secret.data.get("htpasswd") if change.secret is not None else None


def set_level(api: KubeApiServer, namespace: str, value: str) -> None:
    api.patch(REGISTRIES, namespace, "reg", {"spec": {"config": {"log": {"level": value}}}})


@contextlib.asynccontextmanager
async def watching(server: KubeApiServer, namespace: str, token: str, **options):
    """Both watchers running with `token`, yielded as (changes, registry watcher, secret watcher) once each has
    delivered its object."""
    options = {"backoff_initial": 0.05, "backoff_cap": 0.2, **options}
    # The agent's own client, as a kubeconfig holding the token makes it.
    client, health, changes = ApiClient(from_kubeconfig([server.kubeconfig_for(token)])), Health(), ChangeCollector()
    registry_watcher = RegistryApiWatcher(client, namespace, "reg", health, **options)
    secret_watcher = SecretApiWatcher(client, namespace, "creds", "htpasswd", health, **options)
    async with running(registry_watcher, changes), running(secret_watcher, changes):
        await changes.wait_for(lambda c: c.registry is not None)
        await changes.wait_for(lambda c: c.secret is not None)
        yield changes, registry_watcher, secret_watcher


@pytest.mark.asyncio
async def test_a_compacted_resource_version_is_410_gone_and_relisted(
    kube_apiserver, uncached_apiserver, apiserver_namespace, agent, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="berth_agent")
    api, ns = kube_apiserver, apiserver_namespace
    # A short server timeout: each watch ends cleanly and is resumed from the last resourceVersion seen.
    async with watching(uncached_apiserver, ns, agent, timeout_seconds=1) as (changes, _, _):
        # Writes the watchers do not see move etcd past their resourceVersions; compaction forgets the rest.
        api.create(registry(ns, "other"))
        api.create(secret(ns, "other", name="other"))
        etcd_compact(api.etcd_url)
        await until(lambda: sum(r.getMessage() == GONE for r in caplog.records) >= 2, "410 Gone for both watchers")
        set_level(api, ns, "debug")
        api.patch(SECRETS, ns, "creds", {"data": {"htpasswd": base64.b64encode(b"two").decode()}})
        await changes.wait_for(lambda c: level(c) == "debug")
        await changes.wait_for(lambda c: value(c) == b"two")
    gone = [r for r in caplog.records if r.getMessage() == GONE]
    assert {r.levelno for r in gone} == {logging.INFO}
    assert not [c for c in changes.snapshot() if c.error], "a 410 is routine, not an error to report"
    # Each watcher emitted each state once: the relist after the 410 found nothing new.
    assert [level(c) for c in changes.snapshot() if c.registry] == ["info", "debug"]
    assert [value(c) for c in changes.snapshot() if c.secret] == [b"one", b"two"]


@pytest.mark.asyncio
async def test_bookmarks_move_the_resource_version(kube_apiserver, apiserver_namespace, agent) -> None:
    api, ns = kube_apiserver, apiserver_namespace
    # The watch cache sends each watcher a bookmark shortly before its timeout (a second or so here).
    async with watching(api, ns, agent, timeout_seconds=3) as (changes, registry_watcher, secret_watcher):
        start = api.audit_mark()
        other_registry = int(api.create(registry(ns, "other"))["metadata"]["resourceVersion"])
        other_secret = int(api.create(secret(ns, "x", name="other"))["metadata"]["resourceVersion"])
        await until(lambda: int(registry_watcher.resource_version) >= other_registry
                    and int(secret_watcher.resource_version) >= other_secret, "bookmarks past the other objects")
        moved = {"registries": registry_watcher.resource_version, "secrets": secret_watcher.resource_version}
        # Resumed from the bookmark's resourceVersion (the next watch asks for it).
        await until(lambda: all(any(e["verb"] == "watch" and e["objectRef"].get("resource") == resource
                                    and f"resourceVersion={version}" in e["requestURI"]
                                    for e in api.audit(since=start)) for resource, version in moved.items()),
                    "watches resumed from the bookmarks")
        set_level(api, ns, "debug")
        await changes.wait_for(lambda c: level(c) == "debug")
    assert len([c for c in changes.snapshot() if c.registry]) == 2 and len([c for c in changes.snapshot()
                                                                            if c.secret]) == 1
    assert not [c for c in changes.snapshot() if c.error]


@pytest.mark.asyncio
async def test_deleted_and_recreated(kube_apiserver, apiserver_namespace, agent) -> None:
    api, ns = kube_apiserver, apiserver_namespace
    async with watching(api, ns, agent, timeout_seconds=60) as (changes, _, _):
        first = next(c for c in changes.snapshot() if c.registry is not None)
        api.delete(REGISTRIES, ns, "reg")
        api.delete(SECRETS, ns, "creds")
        await changes.wait_for(lambda c: c.error == f"Registry {ns}/reg was deleted")
        await changes.wait_for(lambda c: c.error == f"Secret {ns}/creds was deleted")
        api.create(registry(ns, level="warn"))
        api.create(secret(ns, "three"))
        again = await changes.wait_for(lambda c: level(c) == "warn")
        await changes.wait_for(lambda c: value(c) == b"three")
    assert again.registry["metadata"]["uid"] != first.registry["metadata"]["uid"]
    # The same watch saw all of it: no relist was needed (nothing failed, no 410). Each error exactly once; the
    # two come from two watch threads, so their order is not the test's to fix.
    assert sorted(c.error for c in changes.snapshot() if c.error) == [f"Registry {ns}/reg was deleted",
                                                                      f"Secret {ns}/creds was deleted"]
