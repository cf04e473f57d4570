"""The few bytes of the redis protocol (RESP) the agent speaks: encoding a command, reading a reply, and the
TLS context the registry would use. Shared by the pre-flight (AUTH, SELECT, PING) and the blob descriptor
cache purge after garbage collection (SCAN, DEL). No client library: these are four commands, and a
dependency would have to be audited for what it logs.
"""

from __future__ import annotations

import errno
import ssl
from typing import Any

MAX_LINE = 4096  # a reply line longer than this is not one of the replies these commands give
MAX_BULK = 1 << 20  # a SCAN key or a bulk reply: the keys read here are short
MAX_ITEMS = 100_000  # one SCAN page is COUNT-sized: far below this


class RedisReplyError(Exception):
    """An error reply; carries only its code (the first word), never the rest, which could quote input."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def encode(*args: str) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def read_line(stream) -> bytes:
    line = stream.readline(MAX_LINE)
    if not line:
        raise ConnectionResetError(errno.ECONNRESET, "closed")
    return line.rstrip(b"\r\n")


def read_reply(stream) -> Any:
    """One reply, decoded: str (simple), int, bytes or None (bulk), list (array). Error replies raise."""
    line = read_line(stream)
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode("ascii", "replace")
    if kind == b"-":
        raise RedisReplyError(rest.split(b" ", 1)[0].decode("ascii", "replace")[:32])
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        if size > MAX_BULK:
            raise ValueError(f"redis bulk reply of {size} bytes is larger than expected")
        data = stream.read(size + 2)
        if len(data) != size + 2:
            raise ConnectionResetError(errno.ECONNRESET, "closed")
        return data[:-2]
    if kind == b"*":
        count = int(rest)
        if count > MAX_ITEMS:
            raise ValueError(f"redis array reply of {count} items is larger than expected")
        return None if count < 0 else [read_reply(stream) for _ in range(count)]
    raise ValueError("unexpected redis reply")


def tls_context(rootcas: tuple[str, ...]) -> ssl.SSLContext:
    """Trust what the registry trusts: exactly the rootcas files when given (as 3.1 does), else system roots."""
    if not rootcas:
        return ssl.create_default_context()
    context = ssl.create_default_context(cafile=rootcas[0])
    for path in rootcas[1:]:
        context.load_verify_locations(cafile=path)
    return context


__all__ = ["RedisReplyError", "encode", "read_line", "read_reply", "tls_context"]
