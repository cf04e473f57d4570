"""The registry's output as whole lines, each redacted before it reaches the container log or registry-output.

Distribution logs each notification endpoint at start with its headers, values included ("configuring endpoint
NAME (URL), timeout=..., headers=map[Authorization:[Bearer ...]]", 2.8 and 3.1.1). The value is cut from
"headers=map[" to the end of the quoted string holding it, so both of the registry's formatters stay well formed:
text (msg="... headers=<redacted>") and JSON ("msg":"... headers=<redacted>"). Lines are split on newlines only,
however long (a pipe delivers 4 KiB or 64 KiB pieces, never a line at a time); a line over MAX_LINE is passed on
in pieces, and once one of its pieces held headers, the rest of that line is dropped.
"""

from __future__ import annotations

import re

MAX_LINE = 1024 * 1024  # beyond this a line is passed on in pieces (the registry prints nothing that long)
_HEADERS = re.compile(rb'headers=map\[(?:[^"\\\n]|\\.)*')
_MARK = b"headers=map["
REDACTED = b"headers=<redacted>"


def redact(line: bytes) -> bytes:
    """`line` with every notification header map replaced, up to the end of its quoted string."""
    if _MARK not in line:
        return line
    return _HEADERS.sub(REDACTED, line)


class LineSplitter:
    """Feeds bytes in, gives whole redacted lines (each ending in a newline) out."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._partial = b""
        self._dropping = False  # the piece of this overlong line already passed on held headers

    def feed(self, data: bytes) -> list[bytes]:
        out = []
        data = self._partial + data
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            out.extend(self._line(data[start:end + 1]))
            start = end + 1
        self._partial = data[start:]
        while len(self._partial) > self.max_line:  # an overlong line: pass on what we have, as its own piece
            # The last bytes stay behind, so a header mark never straddles two pieces.
            cut = self.max_line - len(_MARK)
            piece, self._partial = self._partial[:cut], self._partial[cut:]
            out.extend(self._piece(piece))
        return out

    def close(self) -> list[bytes]:
        """The last line, when the output ended without a newline."""
        rest, self._partial = self._partial, b""
        return self._line(rest + b"\n") if rest else []

    def _line(self, line: bytes) -> list[bytes]:
        if self._dropping:
            self._dropping = False
            return [b"\n"]  # the end of a line whose headers were cut
        return [redact(line)]

    def _piece(self, piece: bytes) -> list[bytes]:
        if self._dropping:
            return []
        cut = piece.find(_MARK)
        if cut >= 0:
            self._dropping = True
            return [piece[:cut] + REDACTED]
        return [piece]


__all__ = ["MAX_LINE", "REDACTED", "LineSplitter", "redact"]
