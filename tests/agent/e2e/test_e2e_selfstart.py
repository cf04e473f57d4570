"""Self-configuring start: from an empty config volume the agent writes the config before the registry may start,
and the registry never runs without it."""

from __future__ import annotations

import stat
import time

import bcrypt
import pytest

from support.common.polling import wait_for
from support.registries.pod import filesystem_spec
from support.registries.registry import http_get
from support.registries.secretdir import write_secret_dir

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run


def test_registry_starts_only_after_the_agent_wrote_its_config(pod):
    htpasswd = b"alice:" + bcrypt.hashpw(b"wonderland", bcrypt.gensalt(rounds=4)) + b"\n"
    write_secret_dir(pod.mounts / "htpasswd", {"htpasswd": htpasswd})
    assert list(pod.config_dir.iterdir()) == []

    # The registry container starts first (as it may, if nothing held it back) and waits.
    supervisor = pod.start_supervisor()
    wait_for(lambda: "waiting for" in supervisor.log(), what="the supervisor to wait for the config")

    # The agent starts with no Registry to render yet: startup stays 503, nothing is written.
    pod.start_agent()
    wait_for(lambda: pod.health("/startupz") == 503, what="/startupz to answer 503")
    time.sleep(0.5)  # room to misbehave
    assert pod.health("/startupz") == 503
    assert not (pod.config_dir / "config.yml").exists()
    assert supervisor.registries() == [] and "started registry" not in supervisor.log()

    spec = filesystem_spec(pod.port)
    spec["config"]["storage"]["auth"] = {"htpasswd": {"secret": {"name": "users", "field": "htpasswd"}}}
    pod.write_registry_file(spec)

    wait_for(lambda: pod.health("/startupz") == 200, what="/startupz to pass")
    pod.wait_serving()
    config = pod.config_dir / "config.yml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    # The htpasswd file is the Secret's, not one the registry made up (with user "docker") for a missing path.
    assert (pod.config_dir / "htpasswd").read_bytes() == htpasswd
    assert http_get(pod.url + "/v2/", auth=("alice", "wonderland")).status == 200
    log = supervisor.log()
    assert log.index("waiting for") < log.index("started registry")
    assert log.count("started registry") == 1
    # /readyz means the agent saw a registry answer on the config: once it logged `written`.
    wait_for(lambda: pod.actions("written"), what="the agent to see the registry answer")
    assert pod.health("/readyz") == 200 and pod.health("/livez") == 200
    assert len(pod.actions("written")) == 1
