"""Pre-flight of what the registry reaches over the network at start: its listen address and its redis.

A new `http.addr` whose port another process in the pod holds made the registry exit at start (`bind: address
already in use`), and a wrong redis password or a dead redis host was applied with no word.
Both are checked here before any restart, each within a short bound, and every message names the field and
the address, never a password.
"""

from __future__ import annotations

import errno
import socket
import ssl

from ..core.errors import PreflightError
from ..render.targets import RedisTarget, split_addr
from .redis_wire import encode as _encode
from .redis_wire import read_line as _read_line
from .redis_wire import tls_context

REDIS_TIMEOUT_SECONDS = 3.0


# ---- http.addr ------------------------------------------------------------------------------------------------


def check_bindable(addr: str) -> None:
    """Bind the address as the registry will, and close at once; PreflightError when the kernel refuses.

    SO_REUSEADDR is set as Go's net.Listen sets it: a port another process listens on is still refused (Linux
    never lets two sockets listen on one port without SO_REUSEPORT), while a port with connections left in
    TIME_WAIT, which the registry binds without trouble, is not.
    """
    where = "spec.http.addr"
    host, port = split_addr(addr)
    try:
        candidates = _bind_candidates(host, port)
    except socket.gaierror:
        raise PreflightError(f"{where}: the host in {addr} does not resolve") from None
    last: OSError | None = None
    for family, address in candidates:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:  # no IPv6 in this pod: the wildcard falls back to 0.0.0.0
            last = exc
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and not host:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # Go's ":port" is dual-stack
            sock.bind(address)
            return
        except OSError as exc:
            last = exc
            if host or exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                break  # the wildcard falls back to 0.0.0.0 only when IPv6 is missing; anything else is the answer
        finally:
            sock.close()
    reason = {
        errno.EADDRINUSE: "the port is already in use by another process in the pod",
        errno.EADDRNOTAVAIL: "the host is not an address of this pod",
        errno.EACCES: "binding it needs privileges the registry does not have",
    }.get(last.errno if last else -1, f"it cannot be bound ({errno.errorcode.get(last.errno, '?') if last else '?'})")
    raise PreflightError(f"{where}: cannot listen on {addr}: {reason}")


def _bind_candidates(host: str, port: int) -> list[tuple[int, tuple]]:
    if not host:
        return [(socket.AF_INET6, ("::", port)), (socket.AF_INET, ("0.0.0.0", port))]
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    # Go listens on the first address a name resolves to, IPv4 first.
    info.sort(key=lambda entry: entry[0] != socket.AF_INET)
    return [(info[0][0], info[0][4])]


# ---- redis ----------------------------------------------------------------------------------------------------


def check_redis(target: RedisTarget, *, timeout: float = REDIS_TIMEOUT_SECONDS,
                context: ssl.SSLContext | None = None) -> None:
    """AUTH (when the URL has a password), SELECT db and PING, as the registry's client does on connecting."""
    where = f"spec.redis (redis at {target.addr})"
    commands: list[tuple[str, ...]] = []
    if target.password is not None:
        commands.append(("AUTH", *((target.username,) if target.username else ()), target.password))
    if target.db:
        commands.append(("SELECT", str(target.db)))
    commands.append(("PING",))
    try:
        with socket.create_connection((target.host, target.port), timeout=timeout) as raw:
            sock = raw
            if target.tls:
                sock = (context or _tls_context(target)).wrap_socket(raw, server_hostname=target.host)
            sock.settimeout(timeout)
            stream = sock.makefile("rwb")
            stream.write(b"".join(_encode(*command) for command in commands))
            stream.flush()
            replies = [_read_line(stream) for _ in commands]
    except ssl.SSLError as exc:
        raise PreflightError(f"{where}: TLS to redis failed ({exc.reason or type(exc).__name__})") from None
    except TimeoutError:
        raise PreflightError(f"{where}: redis did not answer within {timeout:g}s") from None
    except OSError as exc:
        name = errno.errorcode.get(exc.errno, type(exc).__name__) if exc.errno else type(exc).__name__
        raise PreflightError(f"{where}: cannot reach redis ({name})") from None
    for command, reply in zip(commands, replies):
        if reply.startswith(b"-"):
            raise PreflightError(f"{where}: {_refusal(command[0], reply)}")
    if replies[-1] != b"+PONG":
        raise PreflightError(f"{where}: PING was not answered with PONG (is it redis?)")


def _tls_context(target: RedisTarget) -> ssl.SSLContext:
    return tls_context(target.rootcas)


def _refusal(command: str, reply: bytes) -> str:
    # Only the error code (the reply's first word) is used: a reply could in principle quote what was sent.
    code = reply[1:].split(b" ", 1)[0].decode("ascii", "replace")[:32]
    if code == "WRONGPASS" or (command == "AUTH" and code == "ERR"):
        return f"the user or password in the redis URL is refused (redis answered {code} to AUTH)"
    if code == "NOAUTH":
        return "redis needs a password and the redis URL has none (NOAUTH)"
    if command == "SELECT":
        return f"the database number is not one this redis has (redis answered {code} to SELECT)"
    return f"redis answered {code} to {command}"
