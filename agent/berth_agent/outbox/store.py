"""The outbox's log (docs/design.md §4.7): every event the registry posted, kept
on disk before the relay answers, until every endpoint has it.

Files in the outbox dir (on the pod's tmp volume, which outlives a container's kill -9):

- `seg-<first seq>.log`: append-only segments of lines `SEQ EVENT-JSON`, fsynced before the relay answers. A line
  torn by a kill -9 was never answered: it is cut off when the log is opened again.
- `cursors.json`: the last sequence number each endpoint has, written (atomically) a moment after a delivery. After
  a kill -9 an endpoint may get an event a second time: at least once, never less; the event's `id` tells.

Bounded: past `max_bytes` the oldest segment goes, delivered or not; what an endpoint had not yet got of it is
counted as dropped, per endpoint. Used from the agent's event loop and its writer thread: one lock.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

SEGMENT_BYTES = 1 << 20  # a new segment past this: a delivered segment is deleted whole
CURSORS_NAME = "cursors.json"
_PREFIX, _SUFFIX = "seg-", ".log"


@dataclass
class Segment:
    first: int  # the sequence number of its first record
    path: Path
    records: list[bytes] = field(default_factory=list)  # each event's JSON, in order
    size: int = 0

    @property
    def last(self) -> int:
        return self.first + len(self.records) - 1


class EventLog:
    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory, self.max_bytes = Path(directory), max_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.segments: list[Segment] = [self._load(path) for path in self._segment_paths()]
        self.segments = [s for s in self.segments if s.records] or self.segments[-1:]
        self.next_seq = self.segments[-1].last + 1 if self.segments and self.segments[-1].records else (
            self.segments[-1].first if self.segments else 1)
        self.cursors: dict[str, int] = self._load_cursors()
        self.dropped: dict[str, int] = {}  # events dropped at the size bound since this agent started, per endpoint
        self._handle: int | None = None

    # ---- reading back ------------------------------------------------------------------------------------------

    def _segment_paths(self) -> list[Path]:
        found = []
        for path in self.directory.iterdir():
            name = path.name
            if name.startswith(_PREFIX) and name.endswith(_SUFFIX) and name[4:-4].isdigit():
                found.append((int(name[4:-4]), path))
        return [path for _, path in sorted(found)]

    @staticmethod
    def _load(path: Path) -> Segment:
        data = path.read_bytes()
        segment = Segment(int(path.name[4:-4]), path)
        good = 0
        for line in data.split(b"\n")[:-1]:  # the part after the last newline was never answered
            seq, _, event = line.partition(b" ")
            if not seq.isdigit() or int(seq) != segment.first + len(segment.records) or not event:
                break
            segment.records.append(event)
            good += len(line) + 1
        if good != len(data):
            with open(path, "r+b") as torn:  # a kill -9 mid-append: cut the unanswered tail
                torn.truncate(good)
                os.fsync(torn.fileno())
        segment.size = good
        return segment

    def _load_cursors(self) -> dict[str, int]:
        try:
            loaded = json.loads((self.directory / CURSORS_NAME).read_text())
            return {str(k): int(v) for k, v in loaded.items()}
        except (OSError, ValueError, AttributeError, TypeError):
            return {}

    # ---- writing -----------------------------------------------------------------------------------------------

    def append(self, events: list[bytes]) -> int:
        """Write `events` and fsync (the relay answers only then); the last sequence number. Raises OSError."""
        with self.lock:
            segment = self.segments[-1] if self.segments and self.segments[-1].size < SEGMENT_BYTES else None
            if segment is None:
                self._close()
                segment = Segment(self.next_seq, self.directory / f"{_PREFIX}{self.next_seq:016d}{_SUFFIX}")
                self.segments.append(segment)
            if self._handle is None:
                self._handle = os.open(segment.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                if segment.size == 0:
                    _fsync_dir(self.directory)  # the new segment's name survives a crash too
            lines = b"".join(b"%d %s\n" % (self.next_seq + i, event) for i, event in enumerate(events))
            os.write(self._handle, lines)
            os.fsync(self._handle)
            segment.records += events
            segment.size += len(lines)
            self.next_seq += len(events)
            return self.next_seq - 1

    def _close(self) -> None:
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None

    # ---- what endpoints have -----------------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1

    def after(self, seq: int, limit: int = 64) -> list[tuple[int, bytes]]:
        """Up to `limit` records after `seq`, in order."""
        with self.lock:
            for segment in self.segments:
                if segment.records and segment.last > seq:
                    start = max(0, seq + 1 - segment.first)
                    return [(segment.first + i, segment.records[i])
                            for i in range(start, min(len(segment.records), start + limit))]
        return []

    def follow(self, names: set[str]) -> None:
        """The endpoints delivered to now: a new one starts at the next event, a removed one's cursor goes."""
        with self.lock:
            self.cursors = {name: self.cursors.get(name, self.last_seq) for name in names}

    def save_cursors(self) -> None:
        with self.lock:
            data = json.dumps(self.cursors, sort_keys=True).encode()
        target = self.directory / CURSORS_NAME
        temp = target.with_name(f".{CURSORS_NAME}.tmp")
        with open(temp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)

    def compact(self) -> dict[str, int]:
        """Delete the segments every endpoint has; past max_bytes, the oldest whatever is left in it. Returns
        what that dropped, per endpoint."""
        dropped: dict[str, int] = {}
        with self.lock:
            while len(self.segments) > 1:
                oldest = self.segments[0]
                done = all(cursor >= oldest.last for cursor in self.cursors.values())
                if not done and sum(s.size for s in self.segments) <= self.max_bytes:
                    break
                for name, cursor in self.cursors.items():
                    if cursor < oldest.last:
                        dropped[name] = dropped.get(name, 0) + oldest.last - max(cursor, oldest.first - 1)
                        self.cursors[name] = oldest.last
                self.segments.pop(0)
                oldest.path.unlink(missing_ok=True)
            for name, count in dropped.items():
                self.dropped[name] = self.dropped.get(name, 0) + count
        return dropped

    def pending(self, name: str) -> int:
        return self.last_seq - self.cursors.get(name, self.last_seq)

    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def close(self) -> None:
        with self.lock:
            self._close()


def _fsync_dir(path: Path) -> None:
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


__all__ = ["CURSORS_NAME", "SEGMENT_BYTES", "EventLog", "Segment"]
