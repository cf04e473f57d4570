"""A filesystem registry store on which the real `registry garbage-collect` blocks until it is killed.

One repository's manifest link is a named pipe: the command (2.8 and 3.x) blocks opening it, as a run blocks on
a stuck volume. The registry serving the same store is unaffected as long as nobody pulls that repository.
"""

from __future__ import annotations

import os
from pathlib import Path

STUCK_REPOSITORY = "stuck"


def make_stuck_store(root: Path) -> None:
    repository = Path(root) / "docker/registry/v2/repositories" / STUCK_REPOSITORY
    revision = repository / "_manifests/revisions/sha256" / ("a" * 64)
    revision.mkdir(parents=True)
    (repository / "_layers").mkdir()  # 2.8 lists a repository only when it has one
    (Path(root) / "docker/registry/v2/blobs").mkdir(parents=True, exist_ok=True)
    os.mkfifo(revision / "link")
