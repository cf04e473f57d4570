"""CR edits applied hot through the Kubernetes API (kmock + our fixture), agent as `berth-agent run --registry`,
on Distribution 2.8 and on the real 3.1.1 (skipped without
BERTH_REGISTRY3_BIN)."""

from __future__ import annotations

import time
import urllib.request
from base64 import b64encode

import bcrypt
import pytest

from support.common.polling import wait_for
from support.registries.pod import filesystem_spec, registry_object
from support.registries.registry import http_get, registry_binaries
from support.registries.secretdir import swap_secret_dir, write_secret_dir

REGISTRIES = "berth.dev/v1alpha1/registries"
pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("dist", registry_binaries())]
SETTLE_SECONDS = 3.0  # longer than the debounce's maximum wait (2 s): time for any extra restart to show


def _htpasswd(user: str, password: str) -> bytes:
    return user.encode() + b":" + bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)) + b"\n"


def start_blob_upload(pod, auth) -> int | None:
    """Status of POST /v2/<repo>/blobs/uploads/ (202 when writable, 405 when read-only), None when refused."""
    request = urllib.request.Request(f"{pod.url}/v2/demo/app/blobs/uploads/", method="POST", data=b"")
    request.add_header("Authorization", "Basic " + b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def _status_of(kube_api, pod_name="pod-0") -> dict:
    obj = kube_api.get(REGISTRIES, "default", "reg") or {}
    return ((obj.get("status") or {}).get("agents") or {}).get(pod_name) or {}


def _disk_hash(pod) -> str:
    """The identity of config.yml and htpasswd on disk: what status configHash and config_info name."""
    return pod.disk_identity()


def _applied(kube_api, pod, needle: str | None = None) -> bool:
    """status.agents.pod-0 records the config on disk (which holds `needle`), with no error."""
    try:
        config = (pod.config_dir / "config.yml").read_text()
    except OSError:
        return False
    record = _status_of(kube_api)
    return (needle is None or needle in config) and record.get("configHash") == _disk_hash(pod) \
        and not record.get("error")


@pytest.fixture
def api_pod(pod, kube_api, dist):
    write_secret_dir(pod.mounts / "htpasswd", {"users": _htpasswd("alice", "alice-pw")})
    spec = filesystem_spec(pod.port, major=dist[0])
    spec["config"]["storage"]["auth"] = {"htpasswd": {"secret": {"name": "users", "field": "users"}}}
    kube_api.create(registry_object(spec))
    pod.start_agent(registry="default/reg", kube_host=kube_api.url)
    pod.start_supervisor()
    pod.wait_serving()
    wait_for(lambda: _applied(kube_api, pod), what="status.agents.pod-0 to record the config")
    return pod


def test_readonly_edit_makes_pushes_fail_with_405_and_back(api_pod, kube_api):
    pod = api_pod
    alice = ("alice", "alice-pw")
    supervisor_pid = pod.supervisor.pid
    assert start_blob_upload(pod, alice) == 202

    kube_api.patch(REGISTRIES, "default", "reg",
                   {"spec": {"config": {"storage": {"maintenance": {"readonly": {"enabled": True}}}}}})
    wait_for(lambda: start_blob_upload(pod, alice) == 405, what="pushes to be refused with 405")
    assert http_get(pod.url + "/v2/", auth=alice).status == 200  # reads still work
    wait_for(lambda: _applied(kube_api, pod, "readonly:\n      enabled: true"), what="status to follow")

    kube_api.patch(REGISTRIES, "default", "reg",
                   {"spec": {"config": {"storage": {"maintenance": {"readonly": {"enabled": False}}}}}})
    wait_for(lambda: start_blob_upload(pod, alice) == 202, what="pushes to work again")
    # Restarted in place: the same supervisor (no container restart), a registry process per config.
    assert pod.supervisor.pid == supervisor_pid and pod.supervisor.alive()
    assert pod.registry_starts() == 3


def test_log_level_edit_restarts_the_registry_exactly_once(api_pod, kube_api):
    pod = api_pod
    first_pid = pod.registry_pid()
    starts, reloads = pod.registry_starts(), pod.metric("reloads_total")

    kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"config": {"log": {"level": "debug"}}}})
    wait_for(lambda: _applied(kube_api, pod, "level: debug"), what="the debug config to be applied")
    time.sleep(SETTLE_SECONDS)

    assert pod.registry_starts() == starts + 1
    assert pod.metric("reloads_total") == reloads + 1
    assert pod.registry_pid() not in (None, first_pid)
    assert len(pod.actions("restarted")) == 1
    assert pod.metric("config_info", f'hash="{_disk_hash(pod)}"') == 1
    assert pod.serving()


def test_htpasswd_swap_changes_who_can_log_in_without_a_restart(api_pod, kube_api):
    pod = api_pod
    pid, starts = pod.registry_pid(), pod.registry_starts()
    config_before = (pod.config_dir / "config.yml").read_bytes()
    identity_before = _disk_hash(pod)
    assert http_get(pod.url + "/v2/", auth=("alice", "alice-pw")).status == 200
    assert http_get(pod.url + "/v2/", auth=("bob", "bob-pw")).status == 401

    swap_secret_dir(pod.mounts / "htpasswd", {"users": _htpasswd("bob", "bob-pw")})

    wait_for(lambda: http_get(pod.url + "/v2/", auth=("bob", "bob-pw")).status == 200, what="bob to log in")
    assert http_get(pod.url + "/v2/", auth=("alice", "alice-pw")).status == 401
    assert pod.registry_pid() == pid and pod.registry_starts() == starts
    assert (pod.config_dir / "config.yml").read_bytes() == config_before
    # The file is in place before the agent counts it: the login can win that race, so wait for the count.
    wait_for(lambda: pod.metric("htpasswd_updates_total") == 1, what="the htpasswd update to be counted")
    assert pod.metric("reloads_total") == 0
    # The same config.yml, a new state: status and config_info name the new file's.
    wait_for(lambda: _applied(kube_api, pod), what="status to name the state with bob's htpasswd")
    assert pod.config_info() == [_disk_hash(pod)] and _disk_hash(pod) != identity_before
    assert "bob-pw" not in pod.agent_log_text() and "alice-pw" not in pod.agent_log_text()


def test_data_path_capacity_and_free_space_on_status(api_pod, kube_api):
    """Filesystem storage: the agent reports the data path's size on its own status record (the PVC
    path's capacity and free space, as metrics and status); the probe was switched on by the spec itself."""
    pod = api_pod
    wait_for(lambda: "dataPath" in _status_of(kube_api), what="status.agents.pod-0.dataPath")
    data_path = _status_of(kube_api)["dataPath"]
    assert data_path["capacityBytes"] > 0 and 0 <= data_path["freeBytes"] <= data_path["capacityBytes"]
    assert data_path["mounted"] is False  # a plain directory here; a PVC mount in a pod
    assert data_path["checkedAt"].endswith("Z")
    assert pod.metric("pvc_capacity_bytes") == data_path["capacityBytes"]
    assert pod.metric("pvc_ok") == 1
