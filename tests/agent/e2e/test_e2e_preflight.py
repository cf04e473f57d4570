"""Configs the registry would refuse at start, or could not use, are refused before any restart.

Each case runs what users run outside Kubernetes: `berth-agent run --registry-file`, the real berth-supervise and
Debian's registry, with a real redis-server where redis is involved. While the bad input is in place a client
keeps asking `GET /v2/` and counts every request that fails (a refused connection included). After it: the
registry pid and the supervisor's start count are unchanged, config.yml on disk is still the last good one,
not one request failed, the error names the field in the agent's `failed` line (what status and the Event
say), the pre-flight is counted, and no secret value is in the log. On the agent before the pre-flight each
case restarted the registry (a new pid), and all but the redis ones ended in a rollback with seconds of failed
requests.

The TLS pair case is in test_e2e_tls.py, with the rotation it interrupts.
"""

from __future__ import annotations

import socket

import pytest

from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import filesystem_spec
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.traffic.request_loop import RequestLoop

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run


def _status_errors(pod) -> list[str]:
    """The agent's `failed` lines: in file mode what status.agents.<pod>.error and the ConfigRejected Event say
    (the reporter's own lines are at DEBUG; through the API, test_e2e_bad_input checks status and Events)."""
    return [line.get("error", "") for line in pod.actions("failed")]


def _warnings(pod, reason: str) -> list[dict]:
    return [line for line in pod.actions("pre-flight warning") if line.get("reason") == reason]


class Serving:
    """The registry as it is before the bad input, and a client asking it all along."""

    def __init__(self, pod):
        self.pod = pod
        self.pid = pod.registry_pid()
        self.starts = pod.registry_starts()
        self.config = (pod.config_dir / "config.yml").read_bytes()
        self.loop = RequestLoop("127.0.0.1", pod.port, tls=pod.tls)

    def __enter__(self) -> Serving:
        self.loop.start()
        wait_for(lambda: self.loop.stats.requests > 5, what="the client to be asking")
        return self

    def __exit__(self, *exc) -> None:
        self.loop.stop()

    def refused(self, field: str, text: str) -> str:
        """Wait for the refusal, then check nothing was restarted and every request was answered."""
        pod = self.pod
        error = wait_for(lambda: next((e for e in _status_errors(pod) if field in e and text in e), None),
                         timeout=30, what=lambda: f"the refusal ({field}: {text}) in status\n{pod.agent_log_text()}")
        requests = self.loop.stats.requests
        wait_for(lambda: self.loop.stats.requests > requests + 5, what="more requests after the refusal")
        assert pod.registry_pid() == self.pid, "the registry was restarted"
        assert pod.registry_starts() == self.starts
        assert (pod.config_dir / "config.yml").read_bytes() == self.config
        assert pod.serving()
        assert self.loop.stats.failures == [], self.loop.stats.failures
        assert not pod.actions("restarted") and not pod.actions("rolled back")
        return error


def _start(pod, spec) -> None:
    pod.write_registry_file(spec)
    pod.start_agent()
    pod.start_supervisor()
    pod.wait_serving()
    wait_for(lambda: pod.actions("written"), what="the first config written")


def test_a_port_in_use_is_refused_before_any_restart(pod):
    _start(pod, filesystem_spec(pod.port))
    with Serving(pod) as serving, socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        pod.write_registry_file(filesystem_spec(pod.port, http={"addr": f"127.0.0.1:{taken}", "drainTimeout": "5s"}))
        error = serving.refused("spec.http.addr", "already in use")
        assert f"127.0.0.1:{taken}" in error
        assert pod.metric("reload_failures_total", 'reason="preflight"') >= 1
        assert pod.metric("rollbacks_total") == 0

    # The port freed: the same spec is tried again (retry after a pre-flight refusal) and applied.
    new_starts = pod.registry_starts()
    wait_for(lambda: pod.actions("restarted"), timeout=30, what=f"the retry once the port is free\n"
             f"{pod.agent_log_text()}")
    pod.port = taken
    pod.wait_serving()
    assert pod.registry_starts() == new_starts + 1


def test_a_drain_timeout_past_gos_duration_is_refused_before_any_restart(pod):
    _start(pod, filesystem_spec(pod.port))
    with Serving(pod) as serving:
        pod.write_registry_file(filesystem_spec(pod.port, http={"addr": f"127.0.0.1:{pod.port}",
                                                                  "drainTimeout": "100000000h"}))
        error = serving.refused("spec.http.drainTimeout", "at most 999999h")
        assert "100000000h" not in error  # errors name the field, never the value
        assert pod.metric("render_errors_total", 'source="registry"') >= 1


def _redis_spec(port: int) -> dict:
    spec = filesystem_spec(port, redis={"secret": {"name": "redis", "field": "url"}})
    spec["config"]["storage"]["cache"] = {"blobdescriptor": "redis"}
    return spec


def test_a_wrong_redis_password_and_a_dead_redis_are_refused_before_any_restart(pod, redis_server):
    write_secret_dir(pod.mounts / "redis", {"url": redis_server.url()})
    _start(pod, _redis_spec(pod.port))
    assert "password: " in (pod.config_dir / "config.yml").read_text()
    wrong = "PLANTED-wrong-redis-password"
    with Serving(pod) as serving:
        swap_secret_dir(pod.mounts / "redis", {"url": f"redis://:{wrong}@127.0.0.1:{redis_server.port}/0"})
        serving.refused("spec.redis", "password in the redis URL is refused")

        dead = free_port()
        swap_secret_dir(pod.mounts / "redis", {"url": f"redis://:{redis_server.password}@127.0.0.1:{dead}/0"})
        error = serving.refused("spec.redis", "cannot reach redis")
        assert f"127.0.0.1:{dead}" in error
        assert pod.metric("reload_failures_total", 'reason="preflight"') >= 2

    # A URL that works (another database) is applied.
    swap_secret_dir(pod.mounts / "redis", {"url": redis_server.url(db=1)})
    wait_for(lambda: pod.actions("restarted"), timeout=30, what=lambda: f"recovery\n{pod.agent_log_text()}")
    pod.wait_serving()
    assert "db: 1" in (pod.config_dir / "config.yml").read_text()
    log = pod.agent_log_text()
    assert wrong not in log and redis_server.password not in log


def test_a_first_config_with_a_dead_redis_starts_with_a_warning(pod):
    """Nothing serves yet, and both registry versions serve without their cache (lookups fall back to storage):
    the first config is applied, with a RedisUnavailable warning instead of a refusal."""
    password = "PLANTED-redis-password"
    write_secret_dir(pod.mounts / "redis", {"url": f"redis://:{password}@127.0.0.1:{free_port()}/0"})
    _start(pod, _redis_spec(pod.port))
    [warning] = wait_for(lambda: _warnings(pod, "RedisUnavailable"),
                         what=lambda: f"the warning\n{pod.agent_log_text()}")
    assert warning["level"] == "warning" and "spec.redis" in warning["warning"]
    assert password not in pod.agent_log_text()
