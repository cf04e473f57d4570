"""Garbage collection end to end: asking for a run as the operator does, waiting for its result,
and looking at what it left on the storage.

    a, b = images_a_b(tmp_path)                         # shared layer + a unique one each
    push_image(a, pod.host, "demo/app:a"); push_image(b, pod.host, "demo/app:b")
    delete_manifest(pod.url, "demo/app", b.manifest_digest)
    request = request_gc(kube_api, dry_run=True)        # spec + annotation, then the operator's decide()
    run = wait_last_run(kube_api, request["id"])        # status.garbageCollection.lastRun of that id

The request is written by `berth_operator.engine.gc_schedule.decide` itself (the operator's pure half), fed the
Registry as stored, the run-now annotation a user sets with kubectl, and the time: the same id, trigger,
requestedAt, flags, readOnlyTimeout and deadline the operator writes, without running kopf (whose other
reconcile work, pruning status.agents of pods it cannot see, would fight the test's local pods).

`GatedRegistry` is a registry binary for the pods (berth-supervise runs it as BERTH_REGISTRY_BIN): `serve` is the
real binary at once (exec), `garbage-collect` records its start and waits while a hold file exists, then is the
real command (exec). A GC that is slow exactly as long as the test needs, without a timing guess: the agent
and the supervisor see a real command running (its pid in gc.pid) that has not finished.
"""

from __future__ import annotations

import datetime
import os
import re
import shlex
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from berth_agent.gc import report as gc_report
from berth_api import GC_REQUEST_ANNOTATION, GarbageCollection
from berth_operator.engine import gc_schedule
from support.common.polling import wait_for
from support.registries.pod import RegistryPod
from support.registries.registry import OciImage, http_get, oci_image_example
from support.registries.replicas import running_replicas

REGISTRIES = "berth.dev/v1alpha1/registries"
BLOB_KEY = re.compile(r"(?:^|/)docker/registry/v2/blobs/sha256/[0-9a-f]{2}/([0-9a-f]{64})/data$")


# ---- the Registry's status ---------------------------------------------------------------------------------

def registry(kube_api: Any, name: str = "reg", namespace: str = "default") -> dict[str, Any]:
    return kube_api.get(REGISTRIES, namespace, name) or {}


def gc_status(kube_api: Any, name: str = "reg", namespace: str = "default") -> dict[str, Any]:
    return (registry(kube_api, name, namespace).get("status") or {}).get("garbageCollection") or {}


def agent_records(kube_api: Any, name: str = "reg", namespace: str = "default") -> dict[str, dict[str, Any]]:
    return (registry(kube_api, name, namespace).get("status") or {}).get("agents") or {}


def running_gc_pods(root: Path, kube_api: Any, spec: dict[str, Any], *, count: int = 1, binary: str,
                    mounts: Mapping[str, Mapping[str, str]] = {}, leave_seconds: float = 0.3):
    """support.registries.replicas.running_replicas with one pod by default and the pods' registry binary (e.g. a
    GatedRegistry) chosen; the Registry comes with its reload and gc Leases, from the operator's builders."""
    return running_replicas(root, kube_api, spec, count=count, leave_seconds=leave_seconds, binary=binary,
                            mounts=mounts)


def start_agent_again(pod: RegistryPod, name: str, kube_api: Any, *, leave_seconds: float = 0.3) -> None:
    """The kubelet restarting a pod's agent container (same arguments as running_gc_pods gave it)."""
    pod.stop_agent()  # closes the dead one's log file handle; a killed process is only reaped
    pod.start_agent(registry="default/reg", kube_host=kube_api.url, pod_name=name,
                    extra=["--listen-host", pod.listen_host, "--leave-seconds", str(leave_seconds)])


# ---- asking for a run, as a user and the operator do ---------------------------------------------------------

def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def operator_reconcile(kube_api: Any, name: str = "reg", namespace: str = "default", *,
                       now: datetime.datetime | None = None) -> gc_schedule.GcDecision:
    """One pass of the operator's GC half on the stored Registry: decide() and its status patch, applied."""
    obj = registry(kube_api, name, namespace)
    spec_gc = (obj.get("spec") or {}).get("garbageCollection")
    decision = gc_schedule.decide(
        GarbageCollection.model_validate(spec_gc) if spec_gc else None,
        annotations=(obj.get("metadata") or {}).get("annotations") or {},
        live=(obj.get("status") or {}).get("garbageCollection"),
        now=now or _utc_now(),
    )
    if decision.status_patch:
        kube_api.patch(REGISTRIES, namespace, name, {"status": {"garbageCollection": decision.status_patch}},
                       subresource="status")
    return decision


def request_gc(kube_api: Any, name: str = "reg", namespace: str = "default", *, dry_run: bool = False,
               delete_untagged: bool = False, read_only_timeout: str = "10m") -> dict[str, Any]:
    """Run one now: spec.garbageCollection set, `kubectl annotate ... berth.dev/gc-requested-at=<now>`, then the
    operator's reconcile writes status.garbageCollection.request. Returns that request (camelCase, as stored)."""
    now = _utc_now()
    kube_api.patch(REGISTRIES, namespace, name, {
        "metadata": {"annotations": {GC_REQUEST_ANNOTATION: now.isoformat(timespec="microseconds")
                                     .replace("+00:00", "Z")}},
        "spec": {"garbageCollection": {"dryRun": dry_run, "deleteUntagged": delete_untagged,
                                       "readOnlyTimeout": read_only_timeout}},
    })
    decision = operator_reconcile(kube_api, name, namespace, now=now)
    assert decision.pending is not None and decision.status_patch and "request" in decision.status_patch, (
        f"the operator wrote no request: {decision}")
    request = decision.status_patch["request"]
    assert gc_status(kube_api, name, namespace).get("request") == request
    return request


def wait_last_run(kube_api: Any, run_id: str, name: str = "reg", namespace: str = "default", *,
                  timeout: float = 120.0, context=lambda: "") -> dict[str, Any]:
    """status.garbageCollection.lastRun once its id is `run_id`."""
    def finished() -> dict[str, Any] | None:
        last = gc_status(kube_api, name, namespace).get("lastRun") or {}
        return last if last.get("id") == run_id else None

    return wait_for(finished, lambda: f"lastRun {run_id}; status {gc_status(kube_api, name, namespace)}\n{context()}",
                    timeout, interval=0.1)


# ---- a GC exactly as slow as the test needs ------------------------------------------------------------------

class GatedRegistry:
    """A registry binary whose `garbage-collect` waits while `hold` exists, then execs the real command."""

    def __init__(self, directory: Path, real_binary: str):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.real_binary = real_binary
        self.path = self.directory / "registry"
        self.hold_file = self.directory / "hold"
        self.invocations_file = self.directory / "invocations"
        hold, invocations = shlex.quote(str(self.hold_file)), shlex.quote(str(self.invocations_file))
        self.path.write_text(
            "#!/bin/sh\n"
            "# Test binary: `garbage-collect` waits while the hold file exists, then runs the real command.\n"
            'if [ "$1" = garbage-collect ]; then\n'
            f'    echo "$$ $(date +%s.%N) $*" >> {invocations}\n'
            f"    while [ -e {hold} ]; do sleep 0.05; done\n"
            "fi\n"
            f'exec {shlex.quote(real_binary)} "$@"\n'
        )
        self.path.chmod(0o755)

    def hold(self) -> None:
        self.hold_file.touch()

    def release(self) -> None:
        self.hold_file.unlink(missing_ok=True)

    def invocations(self) -> list[tuple[int, datetime.datetime, list[str]]]:
        """(pid, wall-clock start, arguments) of every garbage-collect started, in order."""
        if not self.invocations_file.exists():
            return []
        found = []
        for line in self.invocations_file.read_text().splitlines():
            pid, started, *args = line.split()
            found.append((int(pid), datetime.datetime.fromtimestamp(float(started), datetime.UTC), args))
        return found


def gc_processes(config_path: Path) -> list[int]:
    """Live processes running `garbage-collect ... <config_path>` (the real command or the gated wrapper)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2:].split()[0] in ("Z", "X"):
            continue
        words = [word.decode(errors="replace") for word in argv if word]
        if "garbage-collect" in words and words[-1] == str(config_path):
            found.append(int(entry.name))
    return found


# ---- images and storage -------------------------------------------------------------------------------------

def images_a_b(workdir: Path, *, unique_size: int = 64 * 1024) -> tuple[OciImage, OciImage]:
    """Images A and B: one shared layer, and a unique layer (and config, and manifest) each."""
    shared = {"shared.bin": os.urandom(96 * 1024)}
    made = []
    for name in ("a", "b"):
        digest, blobs = oci_image_example.write_layout(Path(workdir) / name,
                                                       [shared, {f"{name}.bin": os.urandom(unique_size)}])
        made.append(OciImage(Path(workdir) / name, digest, blobs))
    a, b = made
    assert a.layer_digests[0] == b.layer_digests[0] and len(set(b.blobs) - set(a.blobs)) == 3
    return a, b


def delete_manifest(base_url: str, repo: str, digest: str) -> None:
    request = urllib.request.Request(f"{base_url}/v2/{repo}/manifests/{digest}", method="DELETE")
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 202, answer.status


def blob_upload_status(base_url: str, repo: str = "demo/push") -> int:
    """The status of a push's first request (POST of a blob upload): 202 writable, 405 read-only."""
    return http_get(f"{base_url}/v2/{repo}/blobs/uploads/", method="POST", timeout=30).status


def writable(base_url: str) -> bool:
    """For waits: a push would start (202). A connection refused in the few milliseconds one pod's registry
    hands over to its successor (docs/design.md §4.3) is "not yet", not an answer."""
    try:
        return blob_upload_status(base_url) == 202
    except OSError:  # urllib's URLError included
        return False


def blob_path(root: Path, digest: str) -> Path:
    hex_digest = digest.split(":", 1)[1]
    return Path(root) / gc_report.BLOBS_DIR / "sha256" / hex_digest[:2] / hex_digest / "data"


def blobs_on_disk(root: Path) -> set[str]:
    """Digests of every blob stored under a filesystem rootdirectory."""
    base = Path(root) / gc_report.BLOBS_DIR / "sha256"
    return {f"sha256:{p.parent.name}" for p in base.glob("*/*/data")} if base.exists() else set()


def blobs_in_bucket(moto: Any, bucket: str) -> set[str]:
    """Digests of every blob stored in an S3 bucket (listed with moto's admin key: IAM stays enforced)."""
    return {f"sha256:{m.group(1)}" for key in moto.list_objects(bucket) if (m := BLOB_KEY.search(key))}


def agent_line_times(lines: list[dict[str, Any]], msg: str, request_id: str) -> list[datetime.datetime]:
    """The `time` of each agent log line `msg` about `request_id` (JSON logs, fields flattened)."""
    return [datetime.datetime.fromisoformat(line["time"]) for line in lines
            if line.get("msg") == msg and line.get("request_id") == request_id]


def read_only_served_at(lines: list[dict[str, Any]], request_id: str) -> datetime.datetime | None:
    """When this pod's registry began serving read-only for `request_id`: the `restarted` line just before its
    `gc read-only` line. That line is logged before the acknowledgement is even written (the pipeline logs the
    restart, then the ack task runs), so it is causally before any runner can see the ack; `gc read-only`
    itself is logged once the write returned, which a fast runner could beat by a few milliseconds."""
    served = None
    for line in lines:
        if line.get("msg") == "restarted":
            served = line
        elif line.get("msg") == "gc read-only" and line.get("request_id") == request_id:
            return datetime.datetime.fromisoformat(served["time"]) if served else None
    return None


def gc_outcome(**fields: Any) -> Any:
    """A berth_agent.gc.command.GcOutcome of a clean run, with `fields` changed: what a stand-in command returns."""
    from berth_agent.gc.command import GcOutcome

    return GcOutcome(**{"exit_status": 0, "timed_out": False, "stopped": False, "report": None, "error": None,
                        "seconds": 0.5, **fields})
