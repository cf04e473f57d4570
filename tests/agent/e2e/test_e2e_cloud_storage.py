"""Azure Blob and GCS, end to end on the real registry-v3.1.1: the agent, berth-supervise and the registry
against Azurite and fake-gcs-server (tests/support/clouds/azurite.py, gcs.py).

- A key rotated through the API only (`--api-secret`, the fast path; the mount stays old) under a pull load: the
  pre-flight signs with the new key, the registry restarts in place, the old key is revoked once the pod reports
  the new state (status.agents.<pod>.configHash of the new config, the old registry drained), and not one pull
  fails; a push after the revocation works (on GCS uploads need a token of a live key).
- Two replicas sharing the container or bucket: each pod's mounted Secret swapped, the old key revoked after both
  run the new one, no failed pull on either, what one pushed the other serves, and garbage-collect on the rendered
  config deletes an unreferenced layer from the emulator.
- A refused key while serving (regenerated on Azure, deleted on GCS): the last good config keeps serving (same pid,
  same config.yml, no failed request) and the agent's error quotes the service's status and error code, never the
  key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from support.clouds.azurite import new_account_key, requires_azurite, running_azurite
from support.clouds.gcs import running_gcs
from support.common.polling import wait_for
from support.registries.pod import RegistryPod, registry_object
from support.registries.registry import (
    REGISTRY3_BINARY,
    http_get,
    make_oci_image,
    pull_image,
    push_image,
    requires_registry3,
)
from support.registries.secretdir import current_data, swap_secret_dir, write_secret_dir
from support.registries.supervisor import registry_env
from support.traffic.pull_loop import PullLoop
from support.traffic.request_loop import RequestLoop

pytestmark = [pytest.mark.e2e, requires_registry3]

ACCOUNT = "berthacct"
CREDS = "storage-creds"
SECRETS = "v1/secrets"
REGISTRIES = "berth.dev/v1alpha1/registries"
OCI = "application/vnd.oci.image.manifest.v1+json"
# How long a step may take on a loaded machine: the tests count requests and restarts, they never time them.
SLOW = 120.0


def wait(predicate, *, what: str):
    return wait_for(predicate, what, SLOW)


class Azure:
    """Azurite with an account of two keys; a rotation moves to the other key, a revocation regenerates one."""

    volume, field = "azure", "accountKey"

    def __init__(self, stack: ExitStack, workdir: Path):
        self.keys = [new_account_key(), new_account_key()]
        self.service = stack.enter_context(running_azurite(workdir, {ACCOUNT: tuple(self.keys)}))
        self.service.create_container(ACCOUNT, "registry")
        self.current = self.keys[0]

    def storage(self) -> dict:
        return {"azure": {"accountName": ACCOUNT, "container": "registry",
                          "serviceURL": self.service.service_url(ACCOUNT),
                          "credentials": {"type": "shared_key", "secret": {"name": CREDS, "field": self.field}}}}

    def data(self, key: str) -> dict[str, str]:
        return {self.field: key}

    def next_key(self) -> str:
        return self.keys[1] if self.current == self.keys[0] else self.keys[0]

    def revoke(self, key: str) -> None:
        self.keys = [new_account_key() if k == key else k for k in self.keys]
        self.service.set_keys(ACCOUNT, *self.keys)

    def dead_key(self) -> str:
        return new_account_key()  # never one of the account's

    def objects(self) -> list[str]:
        return self.service.list_blobs(ACCOUNT, "registry")

    refusal = "HTTP 403"
    registry_env: dict[str, str] = {}
    agent_env: dict[str, str] = {}

    def secret_values(self) -> list[str]:
        return list(self.keys)


class Gcs:
    """fake-gcs-server with its token endpoint and upload proxy; a rotation is a new key, a revocation deletes one."""

    volume, field = "gcs", "key.json"

    def __init__(self, stack: ExitStack, workdir: Path):
        self.service = stack.enter_context(running_gcs(workdir))
        self.service.create_bucket("berth-registry")
        self.made = {}
        self.current = self._new()
        self.registry_env = self.service.registry_env()
        self.agent_env = {"STORAGE_EMULATOR_HOST": self.service.emulator_host}

    def _new(self) -> str:
        key = self.service.create_key("registry@berth-test.iam.gserviceaccount.com")
        self.made[key.private_key_id] = key
        return key.json()

    def storage(self) -> dict:
        return {"gcs": {"bucket": "berth-registry", "chunkSize": 262144,
                        "credentials": {"type": "key", "secret": {"name": CREDS, "field": self.field}}}}

    def data(self, key: str) -> dict[str, str]:
        return {self.field: key}

    def next_key(self) -> str:
        return self._new()

    def revoke(self, key: str) -> None:
        self.service.revoke_key(self.made[json.loads(key)["private_key_id"]])

    def dead_key(self) -> str:
        key = self._new()
        self.revoke(key)
        return key

    def objects(self) -> list[str]:
        return self.service.list_objects("berth-registry")

    refusal = "invalid_grant"

    def secret_values(self) -> list[str]:
        return [key.private_key_pem.splitlines()[1] for key in self.made.values()]


BACKENDS = [pytest.param(Azure, id="azure", marks=requires_azurite), pytest.param(Gcs, id="gcs")]


def spec(backend, port: int) -> dict:
    storage = {**backend.storage(), "delete": {"enabled": True}, "redirect": {"disabled": True}}
    return {"image": "docker.io/library/registry:3", "distribution": "3",
            "config": {"log": {"level": "info"}, "storage": storage},
            "http": {"addr": f"127.0.0.1:{port}", "drainTimeout": "5s"}}


@contextmanager
def environment(monkeypatch, env: dict[str, str]):
    """The agent gets the test process's environment (support.registries.pod): what its pre-flight must reach."""
    with monkeypatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        yield


def start_file_pod(pod: RegistryPod, backend, key: str, monkeypatch) -> None:
    write_secret_dir(pod.mounts / backend.volume, backend.data(key))
    pod.write_registry_file(registry_object(spec(backend, pod.port)))
    with environment(monkeypatch, backend.agent_env):
        pod.start_agent()
    pod.start_supervisor(env=backend.registry_env)
    pod.wait_serving()


def drained(pod: RegistryPod) -> bool:
    return len(pod.supervisor.registries()) == 1


def no_secret_in_logs(backend, *pods: RegistryPod) -> None:
    for pod in pods:
        text = pod.agent_log_text() + pod.supervisor.log()
        for value in backend.secret_values():
            assert value not in text


@pytest.mark.parametrize("backend_class", BACKENDS)
def test_a_key_rotated_through_the_api_under_pull_load(tmp_path, kube_api, monkeypatch, backend_class):
    with ExitStack() as stack:
        backend = backend_class(stack, tmp_path / "service")
        pod = RegistryPod(tmp_path / "pod", binary=REGISTRY3_BINARY)
        stack.callback(pod.stop)
        old = backend.current
        write_secret_dir(pod.mounts / backend.volume, backend.data(old))
        kube_api.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                         "metadata": {"name": CREDS, "namespace": "default"},
                         "data": {k: base64.b64encode(v.encode()).decode() for k, v in backend.data(old).items()}})
        kube_api.create(registry_object(spec(backend, pod.port)))
        with environment(monkeypatch, backend.agent_env):
            pod.start_agent(registry="default/reg", kube_host=kube_api.url,
                            extra=["--api-secret", f"{backend.volume}={CREDS}"])
        supervisor = pod.start_supervisor(env=backend.registry_env)
        pod.wait_serving()

        image = make_oci_image(tmp_path / "image", layer_size=300 * 1024)
        push_image(image, pod.host, "demo/app:1")
        layer = image.layer_digests[0]
        first_pid = pod.registry_pid()
        loop = PullLoop(f"{pod.url}/v2/demo/app/blobs/{layer}", image.blobs[layer])
        loop.start()
        try:
            wait(lambda: loop.stats.successes >= 5, what="the pull loop to get going")
            new = backend.next_key()
            kube_api.patch(SECRETS, "default", CREDS, {"data": {
                k: base64.b64encode(v.encode()).decode() for k, v in backend.data(new).items()}})
            wait(lambda: pod.actions("restarted"), what=lambda: f"a restart on the new key\n{pod.agent_log_text()}")
            config = (pod.config_dir / "config.yml").read_bytes()

            def reports_new_state() -> bool:
                record = (((kube_api.get(REGISTRIES, "default", "reg") or {}).get("status") or {}).get("agents")
                          or {}).get("pod-0") or {}
                return record.get("configHash") == pod.disk_identity() and not record.get("error")

            wait(reports_new_state, what=lambda: f"status to report the new state\n{pod.agent_log_text()}")
            wait(lambda: drained(pod), what="the old registry to finish draining")
            backend.revoke(old)  # docs/guide/rotation.md's procedure: only now is the old key revoked
            after = loop.stats.successes
            wait(lambda: loop.stats.successes >= after + 10, what="pulls after the old key was revoked")
        finally:
            stats = loop.stop()
        print(f"pull loop ({backend_class.__name__}): {stats.requests} requests, {stats.successes} ok, "
              f"failures {stats.failures}")
        assert stats.failures == [] and stats.successes == stats.requests
        assert current_data(pod.mounts / backend.volume)[backend.field].decode() == old  # the mount never moved
        assert (pod.config_dir / "config.yml").read_bytes() == config
        assert supervisor.alive() and pod.registry_pid() not in (None, first_pid) and pod.registry_starts() == 2

        second = make_oci_image(tmp_path / "image2", layer_size=300 * 1024)
        push_image(second, pod.host, "demo/app:2")  # with the old key revoked: the new one does the work
        assert pull_image(pod.host, "demo/app:2", tmp_path / "pulled2").blobs == second.blobs
        assert pull_image(pod.host, "demo/app:1", tmp_path / "pulled1").blobs == image.blobs

        # A dead key through the API: refused before any restart, and status says why (what the operator turns
        # into Degraded AgentFailed), quoting the service, never the key.
        pid, dead = pod.registry_pid(), backend.dead_key()
        kube_api.patch(SECRETS, "default", CREDS, {"data": {
            k: base64.b64encode(v.encode()).decode() for k, v in backend.data(dead).items()}})

        def status_error() -> str | None:
            record = (((kube_api.get(REGISTRIES, "default", "reg") or {}).get("status") or {}).get("agents")
                      or {}).get("pod-0") or {}
            return record.get("error") if backend.refusal in (record.get("error") or "") else None

        error = wait(status_error, what=lambda: f"the refusal in status\n{pod.agent_log_text()}")
        assert f"spec.config.storage.{backend.volume}" in error and dead not in error
        assert pod.registry_pid() == pid
        assert pull_image(pod.host, "demo/app:2", tmp_path / "pulled3").blobs == second.blobs
        no_secret_in_logs(backend, pod)


@pytest.mark.parametrize("backend_class", BACKENDS)
def test_two_replicas_share_the_storage_rotate_and_collect(tmp_path, monkeypatch, backend_class):
    with ExitStack() as stack:
        backend = backend_class(stack, tmp_path / "service")
        pods = [RegistryPod(tmp_path / f"pod-{name}", binary=REGISTRY3_BINARY) for name in "ab"]
        for pod in pods:
            stack.callback(pod.stop)
        old = backend.current
        for pod in pods:
            start_file_pod(pod, backend, old, monkeypatch)
        a, b = pods
        image = make_oci_image(tmp_path / "image", layer_size=300 * 1024)
        push_image(image, a.host, "demo/app:1")
        assert pull_image(b.host, "demo/app:1", tmp_path / "via-b").blobs == image.blobs  # one container/bucket
        layer = image.layer_digests[0]
        loops = [PullLoop(f"{pod.url}/v2/demo/app/blobs/{layer}", image.blobs[layer]) for pod in pods]
        for loop in loops:
            loop.start()
        try:
            wait(lambda: all(loop.stats.successes >= 5 for loop in loops), what="both pull loops")
            new = backend.next_key()
            for pod in pods:
                swap_secret_dir(pod.mounts / backend.volume, backend.data(new))
            for pod in pods:
                wait(lambda pod=pod: pod.actions("restarted"), what=f"{pod.root.name} to restart")
                wait(lambda pod=pod: drained(pod), what=f"{pod.root.name}'s old registry to drain")
            backend.revoke(old)  # every pod runs the new key
            after = [loop.stats.successes for loop in loops]
            wait(lambda: all(loop.stats.successes >= n + 10 for loop, n in zip(loops, after)),
                     what="pulls on both after the revocation")
        finally:
            stats = [loop.stop() for loop in loops]
        for one in stats:
            assert one.failures == [] and one.successes == one.requests

        second = make_oci_image(tmp_path / "image2", layer_size=300 * 1024)
        push_image(second, b.host, "demo/app:2")
        assert pull_image(a.host, "demo/app:2", tmp_path / "via-a").blobs == second.blobs

        # GC on the shared storage: untag demo/app:1 by deleting its manifest, then garbage-collect with the
        # config the agent rendered (what the pod's GC runs, section 4.5): its layer leaves the emulator.
        assert http_get(f"{a.url}/v2/demo/app/manifests/{image.manifest_digest}", method="DELETE",
                        headers={"Accept": OCI}).status == 202
        digest_hex = layer.split(":")[1]
        assert any(digest_hex in name for name in backend.objects())
        env = {**registry_env(), **backend.registry_env}
        result = subprocess.run([REGISTRY3_BINARY, "garbage-collect", str(a.config_dir / "config.yml")],
                                capture_output=True, text=True, timeout=120, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        assert not any(f"blobs/sha256/{digest_hex[:2]}/{digest_hex}" in name for name in backend.objects())
        assert pull_image(b.host, "demo/app:2", tmp_path / "after-gc").blobs == second.blobs
        no_secret_in_logs(backend, *pods)


@pytest.mark.parametrize("backend_class", BACKENDS)
def test_a_refused_key_keeps_the_last_good_config_serving(tmp_path, monkeypatch, backend_class):
    with ExitStack() as stack:
        backend = backend_class(stack, tmp_path / "service")
        pod = RegistryPod(tmp_path / "pod", binary=REGISTRY3_BINARY)
        stack.callback(pod.stop)
        start_file_pod(pod, backend, backend.current, monkeypatch)
        wait(lambda: pod.actions("written"), what="the first config written")
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, pod.host, "demo/app:1")
        pid, starts = pod.registry_pid(), pod.registry_starts()
        config = (pod.config_dir / "config.yml").read_bytes()
        config_hash = hashlib.sha256(config).hexdigest()
        loop = RequestLoop("127.0.0.1", pod.port)
        loop.start()
        try:
            wait(lambda: loop.stats.requests > 5, what="the client to be asking")
            dead = backend.dead_key()
            swap_secret_dir(pod.mounts / backend.volume, backend.data(dead))
            where = f"spec.config.storage.{backend.volume}"
            error = wait(lambda: next((line.get("error", "") for line in pod.actions("failed")
                                           if where in line.get("error", "")), None),
                             what=lambda: f"the refusal in the agent's failed line\n{pod.agent_log_text()}")
            requests = loop.stats.requests
            wait(lambda: loop.stats.requests > requests + 5, what="more requests after the refusal")
        finally:
            loop.stop()
        print(f"refused: {error}")
        assert backend.refusal in error and "keeping the running config" in error
        assert dead not in error
        assert pod.registry_pid() == pid and pod.registry_starts() == starts
        assert (pod.config_dir / "config.yml").read_bytes() == config
        assert hashlib.sha256((pod.config_dir / "config.yml").read_bytes()).hexdigest() == config_hash
        assert loop.stats.failures == []
        assert not pod.actions("restarted") and not pod.actions("rolled back")
        assert pull_image(pod.host, "demo/app:1", tmp_path / "pulled").blobs == image.blobs
        no_secret_in_logs(backend, pod)
