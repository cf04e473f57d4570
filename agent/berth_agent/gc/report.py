"""What `registry garbage-collect [--dry-run] [--delete-untagged] CONFIG` did, read from its output, and the
bytes it freed on filesystem storage.

The command prints the same report on Distribution 2.8 and 3.x (stdout; checked on Debian's 2.8.2 and 3.1.1):

    demo/app: marking manifest sha256:…          one per manifest kept (per repository)
    demo/app: marking blob sha256:…
    manifest eligible for deletion: sha256:…     (--delete-untagged; 3.x prints {demo/app sha256:… [tags]})
    7 blobs marked, 3 blobs and 0 manifests eligible for deletion
    blob eligible for deletion: sha256:…

and, when it deletes, logs `Deleting blob: PATH` and `deleting manifest: PATH` at level info (stderr). The
summary line is the count: the sweep stops at the first failed deletion and the command exits non-zero, so a
run that exits 0 deleted every eligible item (a dry run: would have). For a run that failed, the deletions are
counted from the log lines, which a log level above info hides: then they are unknown (None).

`GcReportParser` reads the output line by line (the agent follows the command's output file with it);
`parse` is the same on a whole text.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_SUMMARY = re.compile(r"(\d+) blobs marked, (\d+) blobs and (\d+) manifests eligible for deletion\s*$")
_MARKED_MANIFEST = re.compile(r"(\S+): marking manifest (sha256:[0-9a-f]{64})")
_ELIGIBLE_BLOB = re.compile(r"blob eligible for deletion: (sha256:[0-9a-f]{64})")
_ELIGIBLE_MANIFEST = re.compile(r"manifest eligible for deletion: .*?(sha256:[0-9a-f]{64})")
_DELETED_BLOB = re.compile(r"Deleting blob: \S+")
_DELETED_MANIFEST = re.compile(r"deleting manifest: \S+")
_LOGGED_AT_INFO = re.compile(r'level=info msg=')
# A store nothing was ever pushed to: the mark phase finds no repositories directory and the command exits 1
# (2.8 on every driver, 3.1.1 on filesystem; 3.1.1 on S3 reports zeros). Nothing to collect, not a failure.
_EMPTY_STORE = re.compile(r"failed to mark: [\w.-]+: Path not found: /docker/registry/v2/repositories\s*$")
NOTHING_TO_COLLECT = "nothing to collect: the storage holds no repository yet"

# Where Distribution's filesystem driver keeps blob data, under storage.filesystem.rootdirectory.
BLOBS_DIR = Path("docker/registry/v2/blobs")


class GcReportError(ValueError):
    """The command exited 0 but its output has no summary line: not output this parser knows."""


@dataclass(frozen=True)
class GcReport:
    dry_run: bool
    succeeded: bool
    blobs_marked: int | None
    manifests_marked: int | None
    blobs_deleted: int | None  # in a dry run: that would be deleted
    manifests_deleted: int | None
    blobs_eligible: tuple[str, ...] = ()
    manifests_eligible: tuple[str, ...] = ()
    empty_store: bool = False  # the command found no repository at all (see _EMPTY_STORE)

    def counts(self) -> dict[str, int | None]:
        """The counts, by berth_api.GarbageCollectionRun's field names."""
        return {"blobs_marked": self.blobs_marked, "manifests_marked": self.manifests_marked,
                "blobs_deleted": self.blobs_deleted, "manifests_deleted": self.manifests_deleted}

    def summary(self) -> str:
        if self.empty_store:
            return NOTHING_TO_COLLECT
        verb = "would delete" if self.dry_run else "deleted"
        return (f"{self.blobs_marked} blobs and {self.manifests_marked} manifests in use; {verb} "
                f"{self.blobs_deleted} blobs and {self.manifests_deleted} manifests")


class GcReportParser:
    """The report built line by line, so an output of millions of lines is never held in memory.

    `feed(line)` each line (stdout and stderr together, in order), then `finish(exit_code)`. The eligible digests
    are kept up to `keep_digests` (None: all); the counts are exact either way.
    """

    def __init__(self, *, dry_run: bool, keep_digests: int | None = None):
        self.dry_run = dry_run
        self.keep_digests = keep_digests
        self.lines = 0
        self._summary: re.Match[str] | None = None
        self._marked_manifests: set[tuple[str, str]] = set()
        self._eligible_blobs: dict[str, None] = {}
        self._eligible_manifests: dict[str, None] = {}
        self._deleted_blobs = 0
        self._deleted_manifests = 0
        self._logged_at_info = False
        self._empty_store = False

    def feed(self, line: str) -> None:
        self.lines += 1
        if self._summary is None:
            self._summary = _SUMMARY.match(line)
        marked = _MARKED_MANIFEST.match(line)
        if marked:
            self._marked_manifests.add((marked.group(1), marked.group(2)))
        for found, kept in ((_ELIGIBLE_BLOB.match(line), self._eligible_blobs),
                            (_ELIGIBLE_MANIFEST.match(line), self._eligible_manifests)):
            if found and (self.keep_digests is None or len(kept) < self.keep_digests):
                kept[found.group(1)] = None
        self._deleted_blobs += len(_DELETED_BLOB.findall(line))
        self._deleted_manifests += len(_DELETED_MANIFEST.findall(line))
        if not self._empty_store and _EMPTY_STORE.search(line):
            self._empty_store = True
        if not self._logged_at_info and _LOGGED_AT_INFO.search(line):
            self._logged_at_info = True

    def feed_text(self, text: str) -> None:
        for line in text.split("\n"):
            self.feed(line)

    def finish(self, exit_code: int) -> GcReport:
        """The report of the run, given its exit status; GcReportError for an exit 0 without the summary line."""
        summary = self._summary
        succeeded = exit_code == 0
        if not succeeded and summary is None and self._empty_store:
            return GcReport(dry_run=self.dry_run, succeeded=True, blobs_marked=0, manifests_marked=0,
                            blobs_deleted=0, manifests_deleted=0, empty_store=True)
        if summary is None and succeeded:
            raise GcReportError("garbage-collect exited 0 without its summary line "
                                "(N blobs marked, M blobs and K manifests eligible for deletion)")
        if succeeded:
            assert summary is not None
            blobs_deleted: int | None = int(summary.group(2))
            manifests_deleted: int | None = int(summary.group(3))
        elif self.dry_run:
            blobs_deleted = manifests_deleted = None
        elif self._logged_at_info or self._deleted_blobs:
            blobs_deleted, manifests_deleted = self._deleted_blobs, self._deleted_manifests
        else:
            blobs_deleted = manifests_deleted = None  # info lines hidden by the log level: unknown
        return GcReport(
            dry_run=self.dry_run,
            succeeded=succeeded,
            blobs_marked=int(summary.group(1)) if summary else None,
            manifests_marked=len(self._marked_manifests) if summary else None,
            blobs_deleted=blobs_deleted,
            manifests_deleted=manifests_deleted,
            blobs_eligible=tuple(self._eligible_blobs),
            manifests_eligible=tuple(self._eligible_manifests),
        )


def parse(output: str, *, dry_run: bool, exit_code: int) -> GcReport:
    """The report of one run from its output (stdout and stderr together) and exit status."""
    parser = GcReportParser(dry_run=dry_run)
    parser.feed_text(output)
    return parser.finish(exit_code)


def blob_bytes(rootdirectory: Path | str) -> int:
    """Bytes of blob data under a filesystem registry's rootdirectory (apparent sizes, like `du -b`); 0 when
    nothing was ever pushed. Measured before and after a run, the difference is what the run freed."""
    total = 0
    for directory, _, files in os.walk(Path(rootdirectory) / BLOBS_DIR):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except FileNotFoundError:  # removed while walking
                continue
    return total


def bytes_freed(before: int, after: int) -> int:
    return max(0, before - after)
