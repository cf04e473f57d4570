"""Reading a Registry YAML file (`run --registry-file`, `render --registry`) within bounds.

The file must be a regular file no larger than what the API server would store: a FIFO or a device put in its
place must not block the reader, and a huge or deeply nested document, or a small one whose aliases expand to
millions of nodes, must not hold a thread for minutes. Problems are `RegistryFileProblem`s, which never quote
the file's content.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from berth_api import type_meta_problem

from .secret_volume import KiB, file_kind

# etcd refuses a request over 1.5 MiB by default, so the API server cannot store a larger Registry.
MAX_FILE_BYTES = 1536 * KiB
# Nodes after alias expansion: a Registry has a few hundred; the budget stops an alias bomb in a few ms.
MAX_NODES = 100_000


class RegistryFileProblem(Exception):
    """Why a Registry file cannot be used; the message names no content."""


def read_regular_file(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (links followed: a ConfigMap volume is links).
    Opened non-blocking and checked with fstat, so a FIFO cannot block the reader. OSError passes through."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise RegistryFileProblem(f"is {file_kind(info.st_mode)}, not a regular file")
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                return data
            data += chunk
        raise RegistryFileProblem(f"is larger than {limit // KiB} KiB, more than the API server stores")
    finally:
        os.close(fd)


def load_yaml(data: bytes | str) -> Any:
    """yaml.safe_load, refusing nesting deeper than Python's recursion limit and alias bombs. A
    RegistryFileProblem for those; yaml.YAMLError passes through."""
    try:
        document = yaml.safe_load(data)
    except RecursionError:
        raise RegistryFileProblem("nests too deeply to be a Registry") from None
    if _nodes_over(document, MAX_NODES):
        raise RegistryFileProblem(f"expands to more than {MAX_NODES} YAML nodes (aliases?); a Registry has a "
                                  "few hundred")
    return document


def read_registry_document(path: Path) -> dict:
    """The Registry document a file holds (a mapping with Berth's apiVersion and kind), read once within the
    bounds above, for both readers of Registry files (`run --registry-file`, `render --registry`). Anything else
    is a RegistryFileProblem whose message names the problem, never the content; the caller names the file."""
    try:
        data = read_regular_file(path)
    except FileNotFoundError:
        raise RegistryFileProblem("not found") from None
    except IsADirectoryError:
        raise RegistryFileProblem("is a directory") from None
    except OSError as exc:
        raise RegistryFileProblem(f"cannot be read ({os.strerror(exc.errno or 0)})") from None
    try:
        document = load_yaml(data)
    except yaml.MarkedYAMLError as exc:
        # str(exc) would quote the offending line: give the position and the problem only.
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise RegistryFileProblem(f"invalid YAML{where}: {exc.problem or exc.context or 'invalid YAML'}") from None
    except yaml.YAMLError:
        raise RegistryFileProblem("invalid YAML") from None
    if document is None:
        raise RegistryFileProblem("is empty")
    if not isinstance(document, dict):
        raise RegistryFileProblem(f"must hold one YAML mapping (a Registry), not a {type(document).__name__}")
    problem = type_meta_problem(document)
    if problem is not None:
        raise RegistryFileProblem(problem)
    return document


def _nodes_over(document: Any, budget: int) -> bool:
    """True when the document, with every alias expanded, has more than `budget` nodes. Iterative, and stops
    as soon as the budget is spent, so an alias bomb costs no more than the budget."""
    stack = [document]
    while stack:
        budget -= 1
        if budget < 0:
            return True
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


__all__ = ["MAX_FILE_BYTES", "MAX_NODES", "RegistryFileProblem", "load_yaml", "read_registry_document",
           "read_regular_file"]
