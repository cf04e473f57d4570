"""The API's bounds are inside what both real registry versions accept at start.

Every duration at the model's longest (999999h59m59.999s) and every count at its bound, rendered as the
agent renders them and started with Debian's 2.8 and, when present, Distribution 3.1.1: the registry answers.
The control: a drain timeout past Go's time.Duration, which the model refuses, makes both refuse at start.
"""

from __future__ import annotations

import pytest
import yaml

from berth_agent.mounted.mounts import read_inputs
from berth_agent.render.config import RenderPaths, render
from berth_api import Registry
from berth_api.server import MAX_REDIS_CONNECTIONS
from berth_api.types import INT32_MAX
from support.common.ports import free_port
from support.registries.mountkit import write_mounts_for
from support.registries.registry import http_get, registry_binaries, start_registry

pytestmark = pytest.mark.timeout(120)

LONGEST = "999999h59m59.999s"


def _longest_spec(port: int, redis_port: int | None) -> dict:
    spec = {
        "config": {"storage": {"inmemory": {}, "maintenance": {"uploadpurging": {"age": LONGEST, "interval": LONGEST}},
                               "cache": {"blobdescriptor": "redis" if redis_port else "inmemory"}}},
        "http": {"addr": f"127.0.0.1:{port}", "drainTimeout": LONGEST},
        "health": {"storagedriver": {"enabled": True, "interval": LONGEST, "threshold": INT32_MAX},
                   "tcp": [{"addr": f"127.0.0.1:{redis_port or port}", "timeout": LONGEST, "interval": LONGEST,
                            "threshold": INT32_MAX}]},
    }
    if redis_port:
        spec["redis"] = {"secret": {"name": "redis", "field": "url"}, "db": 15, "dialtimeout": LONGEST,
                         "readtimeout": LONGEST, "writetimeout": LONGEST,
                         "pool": {"maxidle": MAX_REDIS_CONNECTIONS, "maxactive": MAX_REDIS_CONNECTIONS,
                                  "idletimeout": LONGEST}}
    else:
        spec["config"]["storage"]["cache"]["blobdescriptorsize"] = INT32_MAX
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "r"}, "spec": spec}


def _render(document: dict, major: str, tmp_path, redis_url: str | None = None) -> bytes:
    registry = Registry.model_validate(document)
    mounts = write_mounts_for(registry.spec, tmp_path / "mounts", redis_url=redis_url)
    paths = RenderPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    return render(registry.spec, read_inputs(registry.spec, mounts.root), distribution=major, paths=paths).config


@pytest.mark.parametrize("binary", registry_binaries())
@pytest.mark.parametrize("with_redis", [True, False], ids=["redis", "inmemory-cache"])
def test_every_bound_starts_the_registry(binary, with_redis, tmp_path, redis_server):
    major, path = binary
    port = free_port()
    url = redis_server.url(db=15) if with_redis else None
    config = _render(_longest_spec(port, redis_server.port if with_redis else None), major, tmp_path, url)
    assert f"draintimeout: {LONGEST}" in config.decode()
    registry = start_registry(config, tmp_path / "run", binary=path)
    try:
        assert http_get(registry.url + "/v2/").status == 200
    finally:
        registry.stop()


@pytest.mark.parametrize("binary", registry_binaries())
@pytest.mark.parametrize("drain", ["100000000h", "2562048h"])
def test_a_drain_timeout_past_gos_duration_is_refused_by_the_registry_and_the_model(binary, drain, tmp_path):
    major, path = binary
    config = _render(_longest_spec(free_port(), None), major, tmp_path)
    data = yaml.safe_load(config)
    data["http"]["draintimeout"] = drain
    with pytest.raises(RuntimeError, match="exited .* at start"):
        start_registry(yaml.safe_dump(data).encode(), tmp_path / "run", binary=path)
    document = _longest_spec(free_port(), None)
    document["spec"]["http"]["drainTimeout"] = drain
    with pytest.raises(ValueError, match="at most 999999h"):
        Registry.model_validate(document)
