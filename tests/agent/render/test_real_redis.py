"""The redis settings, answered on the real Distribution 3.1.1 binary and a real redis-server
(docs/decisions/0034-one-renderer-for-two-majors.md).

Two questions were open: does v3 honour `redis.tls.enabled`, and does `pool.maxactive` map to `poolsize`?

- `redis.tls.enabled` is not a key of v3.1.1's parser (configuration.go has `tls.certificate`, `tls.key`,
  `tls.rootcas`); its configuration.md example shows it, the parser ignores it, and the registry connects in
  clear text: against a TLS-only redis-server every cache call fails with "connection reset by peer" and nothing
  is cached (the first test, on the config the renderer used to write). So the renderer writes
  `tls.rootcas: [<CA bundle>]`, which turns TLS on and checks the server's certificate (the second test).
- The pool keys land in go-redis: the registry's own /debug/vars shows the parsed options, PoolSize from
  `poolsize` (spec `pool.maxactive`), MaxIdleConns from `maxidleconns` (`pool.maxidle`), ConnMaxIdleTime from
  `connmaxidletime` (`pool.idletimeout`). A misspelt key would leave them 0.

Distribution 2.8 refuses TLS to redis at render time (test_render.py: it ignores `redis.tls`, seen against a
TLS-only redis-server); its redis shape runs in test_real_registry.py's full example.
"""

from __future__ import annotations

import json

import pytest
import yaml

from agent.render.test_real_registry import check, check_serving, prepare
from support.common.ports import free_port
from support.registries.registry import REGISTRY3_BINARY, http_get, requires_registry3, start_registry
from support.services.redisserver import running_redis

pytestmark = [pytest.mark.timeout(180), requires_registry3]


def redis_registry(redis: dict) -> dict:
    return {
        "apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "cached"},
        "spec": {"image": "docker.io/library/registry:3.1.1",
                 "config": {"storage": {"inmemory": {}, "cache": {"blobdescriptor": "redis"}}},
                 "redis": {"secret": {"name": "redis", "field": "url"}, "db": 2, "dialtimeout": "2s",
                           "readtimeout": "2s", "writetimeout": "2s", **redis}},
    }


def cached_keys(redis, db: int = 2) -> list[bytes]:
    return [key for key in redis.command("KEYS", "*", db=db) if key.startswith(b"blobs::sha256:")]


def test_v3_ignores_redis_tls_enabled_and_talks_clear_text_to_a_tls_only_redis(tmp_path):
    """The render this project wrote before (and configuration.md's example): `tls: {enabled: true}`."""
    with running_redis(tmp_path / "redis", tls=True) as redis:
        url = redis.url(2).replace("rediss://", "redis://")  # plain URL; TLS asked for by the spec field only
        _, mounts, config = prepare(redis_registry({}), tmp_path, "3", redis_url=url)
        document = yaml.safe_load(config.read_bytes())
        document["redis"]["tls"] = {"enabled": True}
        document["redis"]["maxretries"] = -1  # test only: go-redis would retry each failing call with backoff
        config.write_text(yaml.safe_dump(document))
        # The cache fails; the registry serves without it.
        registry = check_serving(config, mounts, tmp_path, REGISTRY3_BINARY)
        assert "connection reset by peer" in registry.log()  # its clear-text hello hit the TLS port
        assert cached_keys(redis) == []


@pytest.mark.parametrize("how", ["spec", "rediss-url"])
def test_rendered_tls_reaches_a_tls_only_redis_and_checks_its_certificate(tmp_path, how):
    with running_redis(tmp_path / "redis", tls=True) as redis:
        spec_tls = {"tls": {"enabled": True}} if how == "spec" else {}
        url = redis.url(2) if how == "rediss-url" else redis.url(2).replace("rediss://", "redis://")
        # In a pod the bundle is the image's (/etc/ssl/certs/ca-certificates.crt); here the test CA stands in.
        _, mounts, config = prepare(redis_registry(spec_tls), tmp_path, "3", redis_url=url,
                                    paths_args={"ca_bundle": redis.ca_file})
        mounts.secret_values.append(redis.password)
        assert yaml.safe_load(config.read_bytes())["redis"]["tls"] == {"rootcas": [str(redis.ca_file)]}
        registry = check_serving(config, mounts, tmp_path, REGISTRY3_BINARY)
        assert "using redis blob descriptor cache" in registry.log()
        assert "error from cache" not in registry.log()
        assert cached_keys(redis), "descriptors were cached over TLS in the rendered db"


def test_a_redis_certificate_from_another_ca_is_refused(tmp_path):
    """rootcas is the whole trust: a server whose certificate is not from those CAs gets no cache traffic."""
    with running_redis(tmp_path / "redis", tls=True) as redis, \
            running_redis(tmp_path / "other", tls=True) as other:
        _, mounts, config = prepare(redis_registry({"tls": {"enabled": True}}), tmp_path, "3",
                                    redis_url=redis.url(2), paths_args={"ca_bundle": other.ca_file})
        registry = check_serving(config, mounts, tmp_path, REGISTRY3_BINARY)
        assert "certificate signed by unknown authority" in registry.log()
        assert cached_keys(redis) == []


def test_pool_keys_reach_go_redis(tmp_path):
    """spec.redis.pool -> poolsize, maxidleconns, connmaxidletime -> go-redis PoolSize, MaxIdleConns,
    ConnMaxIdleTime, read back from the running registry's /debug/vars (the parsed config it runs)."""
    with running_redis(tmp_path / "redis") as redis:
        pool = {"pool": {"maxidle": 3, "maxactive": 5, "idletimeout": "42s"}}
        _, mounts, config = prepare(redis_registry(pool), tmp_path, "3", redis_url=redis.url(2))
        document = yaml.safe_load(config.read_bytes())
        assert {k: document["redis"][k] for k in ("poolsize", "maxidleconns", "connmaxidletime")} == \
            {"poolsize": 5, "maxidleconns": 3, "connmaxidletime": "42s"}
        debug = f"127.0.0.1:{free_port()}"
        document["http"]["debug"] = {"addr": debug}  # test only: the debug server shows the parsed config
        config.write_text(yaml.safe_dump(document))
        registry = start_registry(config, tmp_path / "run", binary=REGISTRY3_BINARY)
        try:
            check(registry, mounts, tmp_path, round_trip=True)
            variables = json.loads(http_get(f"http://{debug}/debug/vars").body)
        finally:
            registry.stop()
        options = variables["registry"]["redis"]["Config"]["Redis"]["Options"]
        assert (options["PoolSize"], options["MaxIdleConns"], options["ConnMaxIdleTime"]) == (5, 3, 42 * 10**9)
        assert options["DB"] == 2 and options["Addrs"] == [f"127.0.0.1:{redis.port}"]
        assert cached_keys(redis)
