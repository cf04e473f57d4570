"""support.registries.gc_store (the store the GC benchmark walks, and a slow GC for a test that needs one) on the real
registry, 2.8 and 3.1.1: what it pushes is on disk, and what it says is unreferenced is exactly what the real
`registry garbage-collect --dry-run` finds eligible."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from berth_agent.gc import report as gc_report
from support.common.ports import free_port
from support.registries import gc_store
from support.registries.registry import registry_binaries, registry_env, running_registry


@pytest.mark.parametrize("dist", registry_binaries())
def test_the_store_holds_what_it_says_and_half_is_unreferenced(dist, tmp_path):
    _, binary = dist
    root = tmp_path / "storage"
    config = yaml.safe_dump({
        "version": 0.1, "log": {"level": "info"}, "http": {"addr": f"127.0.0.1:{free_port()}"},
        "storage": {"filesystem": {"rootdirectory": str(root)}, "delete": {"enabled": True}},
    }).encode()
    with running_registry(config, tmp_path / "run", binary=binary) as registry:
        store = gc_store.fill(registry.url, images=6, layers=2, layer_size=1024, repos=2)
        assert store.blobs_total == 6 * (2 + 2) == gc_store.blob_files(root)
        store.delete_every_second(registry.url)
        config_path = registry.config_path

    assert len(store.deleted) == 3 and len(store.eligible_blobs) == 12
    result = subprocess.run([binary, "garbage-collect", "--dry-run", str(config_path)], capture_output=True,
                            text=True, env=registry_env(), timeout=120)
    report = gc_report.parse(result.stdout + result.stderr, dry_run=True, exit_code=result.returncode)
    assert set(report.blobs_eligible) == store.eligible_blobs
    assert report.blobs_marked == store.blobs_total - len(store.eligible_blobs)
    assert gc_store.blob_files(root) == store.blobs_total  # a dry run deletes nothing
