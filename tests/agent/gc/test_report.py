"""gc_report on the real `registry garbage-collect` of Distribution 2.8 and 3.1.1, on real filesystem storage.

Images A and B share a layer; C's tag is moved to A (C's manifest is untagged). B's manifest is deleted over
the registry API. The registry then serves read-only (storage.maintenance.readonly, as during a Berth GC run)
while the real garbage-collect runs against its config: dry runs first (same counts, nothing deleted), then the
runs that delete. B's unique blobs leave the disk, A pulls back byte-identical, and the freed bytes are
measured on the blobs directory.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth_agent.gc import report as gc_report
from berth_api import GarbageCollectionRun
from support.clouds.s3 import REGION, running_moto
from support.common.ports import free_port
from support.registries.registry import (
    OciImage,
    http_get,
    manifest_status,
    oci_image_example,
    pull_image,
    push_image,
    registry_binaries,
    registry_env,
    running_registry,
)


def image(layout: Path, shared: dict[str, bytes], unique: str) -> OciImage:
    digest, blobs = oci_image_example.write_layout(layout, [shared, {f"{unique}.bin": os.urandom(64 * 1024)}])
    return OciImage(layout, digest, blobs)


def config(root: Path, *, readonly: bool) -> bytes:
    document: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "info"},
        "storage": {"filesystem": {"rootdirectory": str(root)}, "delete": {"enabled": True},
                    "maintenance": {"readonly": {"enabled": readonly}, "uploadpurging": {"enabled": False}}},
        "http": {"addr": f"127.0.0.1:{free_port()}"},
    }
    return yaml.safe_dump(document).encode()


def blob_path(root: Path, digest: str) -> Path:
    hex_digest = digest.split(":", 1)[1]
    return root / gc_report.BLOBS_DIR / "sha256" / hex_digest[:2] / hex_digest / "data"


def garbage_collect(binary: str, config_path: Path, *flags: str) -> gc_report.GcReport:
    result = subprocess.run([binary, "garbage-collect", *flags, str(config_path)], capture_output=True, text=True,
                            env=registry_env(), timeout=120)
    return gc_report.parse(result.stdout + result.stderr, dry_run="--dry-run" in flags,
                           exit_code=result.returncode)


def stored_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("dist", registry_binaries())
def test_garbage_collect_on_a_read_only_registry(dist, tmp_path):
    _, binary = dist
    root = tmp_path / "storage"
    shared = {"shared.bin": os.urandom(96 * 1024)}
    a = image(tmp_path / "a", shared, "a")
    b = image(tmp_path / "b", shared, "b")
    c = image(tmp_path / "c", shared, "c")
    shared_layer = a.layer_digests[0]
    assert b.layer_digests[0] == shared_layer
    b_unique = set(b.blobs) - set(a.blobs)  # B's manifest, config and own layer
    c_unique = set(c.blobs) - set(a.blobs)
    assert len(b_unique) == 3 and len(c_unique) == 3

    with running_registry(config(root, readonly=False), tmp_path / "writable", binary=binary) as registry:
        push_image(a, registry, "demo/app:a")
        push_image(b, registry, "demo/app:b")
        push_image(c, registry, "demo/app:c")
        push_image(a, registry, "demo/app:c")  # C's manifest is now untagged
        request = urllib.request.Request(f"{registry.url}/v2/demo/app/manifests/{b.manifest_digest}",
                                         method="DELETE")
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 202

    with running_registry(config(root, readonly=True), tmp_path / "readonly", binary=binary) as registry:
        # Writes are refused while it serves: the state garbage collection needs.
        refused = http_get(f"{registry.url}/v2/demo/app/blobs/uploads/", method="POST")
        assert refused.status == 405, refused
        before_files, before_bytes = stored_files(root), gc_report.blob_bytes(root)
        assert all(blob_path(root, digest).exists() for digest in set(a.blobs) | b_unique | c_unique)

        dry = garbage_collect(binary, registry.config_path, "--dry-run")
        # Kept: A (4 blobs) and C (3 of its own; still referenced by its revision). Eligible: B's 3.
        assert (dry.blobs_marked, dry.manifests_marked, dry.blobs_deleted, dry.manifests_deleted) == (7, 2, 3, 0)
        assert set(dry.blobs_eligible) == b_unique
        assert stored_files(root) == before_files and gc_report.blob_bytes(root) == before_bytes

        run = garbage_collect(binary, registry.config_path)
        assert run.succeeded and not run.dry_run
        assert (run.blobs_marked, run.manifests_marked, run.blobs_deleted, run.manifests_deleted) == (7, 2, 3, 0)
        assert not any(blob_path(root, digest).exists() for digest in b_unique)
        assert all(blob_path(root, digest).exists() for digest in set(a.blobs) | c_unique)
        after_bytes = gc_report.blob_bytes(root)
        assert gc_report.bytes_freed(before_bytes, after_bytes) == sum(len(b.blobs[d]) for d in b_unique)

        dry_untagged = garbage_collect(binary, registry.config_path, "--dry-run", "--delete-untagged")
        assert (dry_untagged.blobs_marked, dry_untagged.manifests_marked, dry_untagged.blobs_deleted,
                dry_untagged.manifests_deleted) == (4, 1, 3, 1)
        assert dry_untagged.manifests_eligible == (c.manifest_digest,)
        assert gc_report.blob_bytes(root) == after_bytes

        untagged = garbage_collect(binary, registry.config_path, "--delete-untagged")
        assert (untagged.blobs_marked, untagged.manifests_marked, untagged.blobs_deleted,
                untagged.manifests_deleted) == (4, 1, 3, 1)
        assert not any(blob_path(root, digest).exists() for digest in c_unique)
        assert blob_path(root, shared_layer).exists()

        pulled = pull_image(registry, "demo/app:a", tmp_path / "pulled")
        assert pulled.blobs == a.blobs
        assert manifest_status(registry.url, "demo/app", b.manifest_digest) == 404

        again = garbage_collect(binary, registry.config_path, "--delete-untagged")
        assert (again.blobs_deleted, again.manifests_deleted) == (0, 0)

    # What the runner will record: the counts fit the API's lastRun as they are.
    last_run = GarbageCollectionRun(
        id="r", trigger="manual", dry_run=False, delete_untagged=False, result="Succeeded",
        finished_at="2026-11-30T10:00:00Z", message=run.summary(), **run.counts(),
        bytes_freed=gc_report.bytes_freed(before_bytes, after_bytes))
    assert GarbageCollectionRun.model_validate(last_run.status()) == last_run  # as written to status, read back
    assert (last_run.blobs_deleted, last_run.bytes_freed) == (3, before_bytes - after_bytes)
    assert run.summary() == "7 blobs and 2 manifests in use; deleted 3 blobs and 0 manifests"
    assert dry.summary() == "7 blobs and 2 manifests in use; would delete 3 blobs and 0 manifests"


@pytest.mark.parametrize("dist", registry_binaries())
def test_a_failed_run_reports_failure_and_no_counts_it_cannot_know(dist, tmp_path):
    _, binary = dist
    bad = tmp_path / "config.yml"
    bad.write_text("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: " + str(tmp_path / "none") +
                   "\n  nosuchdriver: {}\n")
    report = garbage_collect(binary, bad)
    assert not report.succeeded
    assert (report.blobs_marked, report.blobs_deleted) == (None, None)


@pytest.mark.parametrize("dist", registry_binaries())
@pytest.mark.parametrize("storage", ["filesystem", "s3"])
def test_a_store_never_pushed_to_is_nothing_to_collect_not_a_failure(dist, storage, tmp_path):
    """2.8 exits 1 on an empty store ("failed to mark: <driver>: Path not found: .../repositories") whatever the
    driver, 3.1.1 on filesystem; a new Registry with a schedule must not report Failed until its first push."""
    major, binary = dist
    document = yaml.safe_load(config(tmp_path / "never-pushed", readonly=True))
    with contextlib.ExitStack() as stack:
        if storage == "s3":
            moto = stack.enter_context(running_moto(tmp_path / "moto"))
            key = moto.create_s3_user("registry", bucket="empty-bucket")
            moto.enforce_iam()
            document["storage"] = {**{k: v for k, v in document["storage"].items() if k != "filesystem"},
                                   "s3": {"region": REGION, "bucket": "empty-bucket", "regionendpoint": moto.endpoint,
                                          "accesskey": key.access_key_id, "secretkey": key.secret_access_key,
                                          **({"forcepathstyle": True} if major == "3" else {})}}
        path = tmp_path / "config.yml"
        path.write_text(yaml.safe_dump(document))
        for flags in ((), ("--dry-run",)):
            report = garbage_collect(binary, path, *flags)
            assert report.succeeded, report
            assert (report.blobs_marked, report.manifests_marked, report.blobs_deleted,
                    report.manifests_deleted) == (0, 0, 0, 0)
            assert report.summary() in (gc_report.NOTHING_TO_COLLECT, f"0 blobs and 0 manifests in use; "
                                        f"{'would delete' if flags else 'deleted'} 0 blobs and 0 manifests")


def test_only_the_missing_repositories_root_is_nothing_to_collect():
    missing_repo = ("failed to garbage collect: failed to mark: s3aws: Path not found: "
                    "/docker/registry/v2/repositories/x/y")
    assert not gc_report.parse(missing_repo, dry_run=False, exit_code=1).succeeded
    denied = "failed to garbage collect: failed to mark: s3aws: AccessDenied: Access Denied"
    assert not gc_report.parse(denied, dry_run=False, exit_code=1).succeeded
    empty = "failed to garbage collect: failed to mark: s3aws: Path not found: /docker/registry/v2/repositories\n"
    report = gc_report.parse(empty, dry_run=False, exit_code=1)
    assert report.succeeded and report.empty_store and report.summary() == gc_report.NOTHING_TO_COLLECT


def test_parse_counts_deletions_from_logs_when_a_run_fails_half_way():
    output = (
        "demo/app: marking manifest sha256:" + "a" * 64 + " \n"
        "5 blobs marked, 2 blobs and 0 manifests eligible for deletion\n"
        'time="t" level=info msg="Deleting blob: /docker/registry/v2/blobs/sha256/bb/' + "b" * 64 + '"\n'
        "failed to garbage collect: failed to delete blob sha256:" + "c" * 64 + ": permission denied\n"
    )
    report = gc_report.parse(output, dry_run=False, exit_code=1)
    assert (report.blobs_marked, report.manifests_marked, report.blobs_deleted) == (5, 1, 1)
    hidden = gc_report.parse(output.replace("level=info", "level=warn").replace("Deleting blob", "x"),
                             dry_run=False, exit_code=1)
    assert hidden.blobs_deleted is None


def test_output_without_the_summary_is_refused():
    with pytest.raises(gc_report.GcReportError, match="summary line"):
        gc_report.parse("demo/app\n", dry_run=True, exit_code=0)


def test_blob_bytes_of_an_empty_or_missing_root_is_zero(tmp_path):
    assert gc_report.blob_bytes(tmp_path / "never-pushed") == 0
    assert gc_report.bytes_freed(10, 12) == 0


REAL_LOOKING_OUTPUT = (
    "demo/app: marking manifest sha256:" + "a" * 64 + " \n"
    "demo/app: marking blob sha256:" + "b" * 64 + "\n"
    "demo/app: marking manifest sha256:" + "a" * 64 + " \n"  # the same manifest again counts once
    "other/app: marking manifest sha256:" + "a" * 64 + " \n"
    "manifest eligible for deletion: {demo/app sha256:" + "d" * 64 + " [old]}\n"
    "9 blobs marked, 3 blobs and 1 manifests eligible for deletion\n"
    + "".join(f"blob eligible for deletion: sha256:{digit * 64}\n" for digit in "123")
    + 'time="t" level=info msg="Deleting blob: /docker/registry/v2/blobs/sha256/11/' + "1" * 64 + '"\n'
)


def test_the_incremental_parser_reads_line_by_line_what_parse_reads_whole():
    whole = gc_report.parse(REAL_LOOKING_OUTPUT, dry_run=False, exit_code=0)
    parser = gc_report.GcReportParser(dry_run=False)
    for line in REAL_LOOKING_OUTPUT.splitlines():
        parser.feed(line)
    assert parser.finish(0) == whole
    assert (whole.blobs_marked, whole.manifests_marked, whole.blobs_deleted, whole.manifests_deleted) == (9, 2, 3, 1)
    assert whole.manifests_eligible == ("sha256:" + "d" * 64,)
    failed = gc_report.GcReportParser(dry_run=False)
    failed.feed_text(REAL_LOOKING_OUTPUT)
    assert failed.finish(1).blobs_deleted == 1  # from the log lines


def test_the_incremental_parser_keeps_a_bounded_number_of_digests_but_exact_counts():
    parser = gc_report.GcReportParser(dry_run=True, keep_digests=2)
    parser.feed_text(REAL_LOOKING_OUTPUT)
    report = parser.finish(0)
    assert report.blobs_eligible == ("sha256:" + "1" * 64, "sha256:" + "2" * 64)
    assert report.blobs_deleted == 3
    with pytest.raises(gc_report.GcReportError, match="summary line"):
        gc_report.GcReportParser(dry_run=True).finish(0)
