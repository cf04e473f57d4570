"""What Distribution really does as a pull-through cache, on the real 2.8.2 and 3.1.1 against a real
upstream registry on 127.0.0.1 (support.registries.upstream): the facts the design rests on
(docs/decisions/0020-pull-through-cache-restarts.md), and
the
garbage-collection decision (refused on a proxy: berth_api.proxy.GC_PROXY_MESSAGE).

- At start a proxy GETs its upstream's /v2/ and panics when that fails: it cannot start (so cannot restart)
  while the upstream is down, with or without credentials.
- 2.8 cannot answer a basic-auth upstream (pulls fail with `manifest unknown`); 3.1.1 can.
- Read-only mode (storage.maintenance.readonly, what Berth's collection runs under) does not stop a proxy from
  writing what it pulls through.
- garbage-collect on a proxy's storage keeps what was pulled by tag (nothing eligible, the cache reads back
  byte-identical and from the cache); --delete-untagged deletes what was pulled by digest (3.1.1) or fails on
  it (2.8.2).
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from support.common.ports import free_port
from support.registries.registry import (
    REGISTRY3_BINARY,
    REGISTRY_BINARY,
    make_oci_image,
    pull_image,
    push_image,
    registry_binaries,
    registry_env,
    requires_registry3,
    start_registry,
)
from support.registries.upstream import htpasswd_upstream, token_upstream

CREDS = ("mirror", "mirror-password")


def proxy_config(root, remote: str, creds=None, *, read_only: bool = False) -> bytes:
    proxy = {"remoteurl": remote, **({"username": creds[0], "password": creds[1]} if creds else {})}
    storage = {"filesystem": {"rootdirectory": str(root / "data")}}
    if read_only:
        storage["maintenance"] = {"readonly": {"enabled": True}, "uploadpurging": {"enabled": False}}
    return yaml.safe_dump({"version": "0.1", "log": {"level": "info"}, "storage": storage,
                           "http": {"addr": f"127.0.0.1:{free_port()}"}, "proxy": proxy}).encode()


def files_in(root) -> int:
    return sum(1 for p in (root / "data").rglob("*") if p.is_file())


@pytest.mark.parametrize("dist", registry_binaries())
def test_a_proxy_cannot_start_while_its_upstream_is_down(tmp_path, dist):
    major, binary = dist
    for creds in (None, CREDS):
        config = tmp_path / f"config-{bool(creds)}.yml"
        config.write_bytes(proxy_config(tmp_path, f"http://127.0.0.1:{free_port()}", creds))
        with pytest.raises(RuntimeError, match="exited with 2 at start") as caught:
            start_registry(config, tmp_path / f"run-{bool(creds)}", binary=binary)
        assert "panic: Get" in str(caught.value) and "connection refused" in str(caught.value)


def test_distribution_2_cannot_answer_a_basic_auth_upstream_and_3_can(tmp_path):
    with htpasswd_upstream(tmp_path / "up", dict([CREDS])) as up:
        image = make_oci_image(tmp_path / "image", layer_size=4096)
        push_image(image, up.registry, "lib/app:1", creds=CREDS)
        proxy = start_registry(proxy_config(tmp_path / "p2", up.url, CREDS), tmp_path / "p2", binary=REGISTRY_BINARY)
        try:
            with pytest.raises(RuntimeError, match="manifest unknown"):
                pull_image(proxy, "lib/app:1", tmp_path / "pull2")
        finally:
            proxy.stop()
        if REGISTRY3_BINARY:
            proxy = start_registry(proxy_config(tmp_path / "p3", up.url, CREDS), tmp_path / "p3",
                                   binary=REGISTRY3_BINARY)
            try:
                assert pull_image(proxy, "lib/app:1", tmp_path / "pull3").blobs == image.blobs
            finally:
                proxy.stop()


@pytest.mark.parametrize("dist", registry_binaries())
def test_read_only_mode_does_not_stop_a_proxy_writing_and_gc_keeps_what_was_pulled_by_tag(tmp_path, dist):
    """The GC decision: why garbageCollection is refused on a proxy, and what garbage-collect did when run."""
    major, binary = dist
    with token_upstream(tmp_path / "up", {CREDS[0]: {CREDS[1]}}, binary=binary) as up:
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, up.registry, "lib/app:1", creds=CREDS)
        by_digest = make_oci_image(tmp_path / "digest", layer_size=8 * 1024)
        push_image(by_digest, up.registry, "lib/pinned:1", creds=CREDS)
        root = tmp_path / "proxy"
        config = root / "read-only.yml"
        root.mkdir()
        config.write_bytes(proxy_config(root, up.url, CREDS, read_only=True))
        proxy = start_registry(config, root / "run-0", binary=binary)
        try:
            before = files_in(root)
            assert pull_image(proxy, "lib/app:1", tmp_path / "pull").blobs == image.blobs
            pull_image(proxy, f"lib/pinned@{by_digest.manifest_digest}", tmp_path / "pinned")
        finally:
            proxy.stop()
        assert files_in(root) > before  # read-only, yet the pulled-through content was written

        gc = subprocess.run([binary, "garbage-collect", str(config)], capture_output=True, text=True,
                            env=registry_env(), timeout=60)
        assert gc.returncode == 0, gc.stderr
        assert "0 blobs and 0 manifests eligible for deletion" in gc.stdout + gc.stderr
        fetched = len([e for e in up.front.log if "/blobs/" in e.path and e.method == "GET"])
        proxy = start_registry(config, root / "run-1", binary=binary)
        try:
            assert pull_image(proxy, "lib/app:1", tmp_path / "after-gc").blobs == image.blobs  # byte-identical
        finally:
            proxy.stop()
        assert len([e for e in up.front.log if "/blobs/" in e.path and e.method == "GET"]) == fetched  # cached

        untagged = subprocess.run([binary, "garbage-collect", "--delete-untagged", str(config)],
                                  capture_output=True, text=True, env=registry_env(), timeout=60)
        output = untagged.stdout + untagged.stderr
        # What was pulled by digest has no tag in the cache. 3.1.1's --delete-untagged deletes it (the next pull
        # goes to the upstream again); 2.8.2's FAILS on it: the repository has a manifest and no tags directory.
        if major == "2":
            assert untagged.returncode == 1, output
            assert "failed to retrieve tags unknown repository name=lib/pinned" in output, output
        else:
            assert untagged.returncode == 0, output
            assert "3 blobs and 0 manifests eligible for deletion" in output, output


@requires_registry3
def test_the_registry_3_ttl_and_cachewritetimeout_are_accepted(tmp_path):
    with token_upstream(tmp_path / "up", {CREDS[0]: {CREDS[1]}}) as up:
        document = yaml.safe_load(proxy_config(tmp_path, up.url, CREDS))
        document["proxy"].update(ttl="1h", cachewritetimeout="30s")
        proxy = start_registry(yaml.safe_dump(document).encode(), tmp_path / "run", binary=REGISTRY3_BINARY)
        proxy.stop()
        assert f"Registry configured as a proxy cache to {up.url}" in proxy.log()
        # Read, not ignored: a ttl that is no duration stops the start.
        document["proxy"]["ttl"] = "one hour"
        with pytest.raises(RuntimeError, match="cannot unmarshal !!str `one hour` into time.Duration"):
            start_registry(yaml.safe_dump(document).encode(), tmp_path / "bad-ttl", binary=REGISTRY3_BINARY)
