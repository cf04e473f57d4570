"""Hitless reloads in one pod: `berth-agent run` + berth-supervise + the real registry (2.8 and 3.1.1).

A slow chunked upload is in flight when the Registry is edited. The successor registry starts as soon as the
old one stopped listening (2.8), or beside it on the socket berth-supervise holds (3.1.1: no connect refused),
the old one finishes the upload's PATCH, the new one its PUT (same http.secret: in local mode the agent's own
kept secret), and the blob reads back.
"""

from __future__ import annotations

import os
import stat

import pytest

from support.common.polling import wait_for
from support.registries.pod import RegistryPod, filesystem_spec, registry_object
from support.registries.registry import registry_binaries
from support.traffic.upload import ConnectProbe, SlowUpload

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run


def _spec(pod: RegistryPod, major: str, level: str = "info") -> dict:
    spec = filesystem_spec(pod.port, http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "30s"})
    if major == "3":
        spec.update(image="docker.io/library/registry:3", distribution="3")
    spec["config"]["log"]["level"] = level
    return registry_object(spec)


@pytest.fixture(params=registry_binaries())
def local_pod(request, tmp_path):
    major, binary = request.param
    pod = RegistryPod(tmp_path / "pod", binary=binary)
    pod.major = major
    yield pod
    pod.stop()


def test_an_upload_started_before_a_reload_completes_after_it(local_pod):
    pod = local_pod
    assert not (pod.mounts / "http-secret").exists()  # local mode: nothing mounted
    pod.write_registry_file(_spec(pod, pod.major))
    pod.start_agent()
    pod.start_supervisor()
    pod.wait_serving()
    secret_file = pod.config_dir / "http-secret"
    secret = secret_file.read_text()
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert secret.strip() in (pod.config_dir / "config.yml").read_text()
    old_pid = pod.registry_pid()

    upload = SlowUpload(pod.url, "demo/slow", os.urandom(512 * 1024), seconds=5).start()
    assert upload.in_flight.wait(20)
    probe = ConnectProbe("127.0.0.1", pod.port).start()
    pod.write_registry_file(_spec(pod, pod.major, level="warn"))
    restarted = wait_for(lambda: pod.actions("restarted"), what=lambda: f"a restart\n{pod.agent_log_text()}")[0]

    # The new registry serves while the old one still drains the upload.
    assert restarted["old_pids"] == [old_pid] and restarted["handed_over"] is True
    # One pod, file mode: no Lease to wait for, no leaving a Service, no slowdown.
    assert restarted["lease_wait_seconds"] == 0 and restarted["drain_wait_seconds"] == 0
    assert os.path.exists(f"/proc/{old_pid}"), "the old registry should still be draining"
    assert pod.serving()
    upload.join(60)
    assert upload.error is None, (upload.error, upload.statuses)
    assert upload.read_back() == upload.data
    windows = probe.stop()
    assert all(end <= upload.finished_at for _start, end in windows), windows
    assert "level: warn" in (pod.config_dir / "config.yml").read_text()
    if pod.major == "3":  # berth-supervise holds the socket: not one connect refused, no window
        assert windows == [] and probe.attempts > 100, (windows, probe.attempts)
        assert restarted["no_listener_seconds"] == 0
        assert pod.metric("last_reload_no_listener_seconds") == 0
    else:  # 2.8 restarts overlapped: the port is closed for about one cold start
        assert pod.metric("last_reload_no_listener_seconds") > 0

    # The same secret after an agent restart: the config on disk is current, the registry is left alone.
    new_pid = pod.registry_pid()
    pod.stop_agent()
    pod.start_agent()
    wait_for(lambda: pod.actions("config on disk is current"),
             what=lambda: f"the agent to adopt\n{pod.agent_log_text()}")
    assert len(pod.actions("restarted")) == 1
    assert secret_file.read_text() == secret
    assert pod.registry_pid() == new_pid
