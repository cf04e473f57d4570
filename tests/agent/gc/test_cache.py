"""gc_cache against a real redis and the real registry (2.8 and 3.1.1): garbage collection leaves deleted blobs
in the redis blob descriptor cache, the registry keeps answering for them, and the purge ends that."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth_agent.gc.cache import CachePurgeError, purge_blob_descriptors, uses_redis_cache
from support.common.ports import free_port
from support.registries.registry import (
    OciImage,
    http_get,
    oci_image_example,
    push_image,
    registry_binaries,
    registry_env,
    running_registry,
)
from support.services.redisserver import RedisServer


def image(layout: Path, shared: dict[str, bytes], unique: str) -> OciImage:
    digest, blobs = oci_image_example.write_layout(layout, [shared, {f"{unique}.bin": os.urandom(32 * 1024)}])
    return OciImage(layout, digest, blobs)


def redis_section(redis: RedisServer, major: str, *, password: str | None = None) -> dict[str, Any]:
    addr = f"127.0.0.1:{redis.port}"
    section: dict[str, Any] = {"addr": addr} if major == "2" else {"addrs": [addr]}
    section.update(password=redis.password if password is None else password, db=3)
    return section


def config(root: Path, redis: RedisServer, major: str, *, readonly: bool) -> dict[str, Any]:
    return {
        "version": 0.1,
        "log": {"level": "info"},
        "storage": {"filesystem": {"rootdirectory": str(root)}, "delete": {"enabled": True},
                    "cache": {"blobdescriptor": "redis"},
                    "maintenance": {"readonly": {"enabled": readonly}, "uploadpurging": {"enabled": False}}},
        "http": {"addr": f"127.0.0.1:{free_port()}"},
        "redis": redis_section(redis, major),
    }


def head_blob(registry, digest: str) -> int:
    return http_get(f"{registry.url}/v2/demo/app/blobs/{digest}", method="HEAD").status


@pytest.mark.parametrize("dist", registry_binaries())
def test_the_purge_makes_the_registry_forget_blobs_garbage_collection_deleted(dist, tmp_path, redis_server):
    major, binary = dist
    root = tmp_path / "storage"
    shared = {"shared.bin": os.urandom(64 * 1024)}
    a, b = image(tmp_path / "a", shared, "a"), image(tmp_path / "b", shared, "b")
    b_unique = sorted(set(b.blobs) - set(a.blobs) - {b.manifest_digest})  # its config and own layer
    writable = yaml.safe_dump(config(root, redis_server, major, readonly=False)).encode()
    readonly_config = config(root, redis_server, major, readonly=True)
    assert uses_redis_cache(readonly_config)

    with running_registry(writable, tmp_path / "w1", binary=binary) as registry:
        push_image(a, registry, "demo/app:a")
        push_image(b, registry, "demo/app:b")
        request = urllib.request.Request(f"{registry.url}/v2/demo/app/manifests/{b.manifest_digest}", method="DELETE")
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 202
        assert all(head_blob(registry, digest) == 200 for digest in b_unique)  # and now cached in redis
    assert redis_server.command("DBSIZE", db=3) > 0

    config_path = tmp_path / "readonly.yml"
    config_path.write_text(yaml.safe_dump(readonly_config))
    result = subprocess.run([binary, "garbage-collect", str(config_path)], capture_output=True, text=True,
                            env=registry_env(), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    layer = b.layer_digests[-1]
    data = root / "docker/registry/v2/blobs/sha256" / layer[7:9] / layer[7:] / "data"
    assert not data.exists()

    # A fresh registry process (no in-memory state at all) still answers 200 for the deleted layer: redis says so.
    with running_registry(writable, tmp_path / "w2", binary=binary) as registry:
        assert head_blob(registry, layer) == 200

        other = redis_server.command("SET", "not-ours", "kept", db=3)
        assert other == "OK"
        deleted = purge_blob_descriptors(readonly_config)
        assert deleted >= len(set(a.blobs) | set(b.blobs)) - 1  # every descriptor the pushes cached (manifests too)
        assert redis_server.command("GET", "not-ours", db=3) == b"kept"  # only the registry's descriptors go

        assert head_blob(registry, layer) == 404
        # A's, from storage, cached again
        assert all(head_blob(registry, d) == 200 for d in set(a.blobs) - {a.manifest_digest})
        push_image(b, registry, "demo/app:b")  # B's layer is uploaded again, not skipped
        assert data.exists()


def test_no_redis_cache_means_nothing_to_purge(tmp_path):
    document = {"storage": {"cache": {"blobdescriptor": "inmemory"}}, "redis": {"addr": "127.0.0.1:1"}}
    assert not uses_redis_cache(document)
    assert not uses_redis_cache({"storage": {"cache": {"blobdescriptor": "redis"}}})  # no redis section
    assert purge_blob_descriptors({"storage": {}}) == 0


def test_a_refused_password_names_the_field_not_the_password(tmp_path, redis_server):
    document = {"storage": {"cache": {"blobdescriptor": "redis"}},
                "redis": {**redis_section(redis_server, "2"), "password": "wrong-secret-xyz"}}
    with pytest.raises(CachePurgeError) as error:
        purge_blob_descriptors(document)
    assert "spec.redis" in str(error.value) and "WRONGPASS" in str(error.value)
    assert "wrong-secret-xyz" not in str(error.value)


def test_an_unreachable_redis_is_a_clear_error(tmp_path):
    document = {"storage": {"cache": {"blobdescriptor": "redis"}}, "redis": {"addr": f"127.0.0.1:{free_port()}"}}
    with pytest.raises(CachePurgeError, match=r"spec.redis \(redis at 127.0.0.1:\d+\): cannot clear .*ECONNREFUSED"):
        purge_blob_descriptors(document, timeout=2)


def test_many_keys_are_deleted_page_by_page(tmp_path, redis_server):
    for start in range(0, 2500, 500):
        redis_server.command("MSET", *[x for i in range(start, start + 500) for x in (f"blobs::sha256:{i:064x}", "1")],
                             db=3)
    document = {"storage": {"cache": {"blobdescriptor": "redis"}}, "redis": redis_section(redis_server, "2")}
    assert purge_blob_descriptors(document) == 2500
    assert redis_server.command("DBSIZE", db=3) == 0
