"""A real redis (Debian's redis-server) on 127.0.0.1 with a password, for the registry's blob descriptor cache.

    with running_redis(tmp_path) as redis:
        url = redis.url()                 # redis://:PASSWORD@127.0.0.1:PORT/0
        redis.command("DBSIZE")           # -> int
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .ports import free_port, wait_for_port
from .processes import stop_process

REDIS_BINARY = "/usr/bin/redis-server"


def _encode(*args: str) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _read_reply(stream) -> object:
    line = stream.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(f"redis error: {rest.decode()}")
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = stream.read(size + 2)[:-2]
        return data
    if kind == b"*":
        return [_read_reply(stream) for _ in range(int(rest))]
    raise RuntimeError(f"unexpected redis reply {line[:20]!r}")


@dataclass(repr=False)
class RedisServer:
    process: subprocess.Popen
    port: int
    password: str
    log_path: Path
    _log_file: object = field(default=None)

    def __repr__(self) -> str:
        return f"RedisServer(port={self.port}, password=<hidden>)"

    def url(self, db: int = 0) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/{db}"

    def command(self, *args: str, db: int = 0) -> object:
        """Run one command (after AUTH and SELECT) and return its decoded reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            stream = sock.makefile("rwb")
            stream.write(_encode("AUTH", self.password) + _encode("SELECT", str(db)) + _encode(*args))
            stream.flush()
            _read_reply(stream)
            _read_reply(stream)
            return _read_reply(stream)

    def stop(self) -> None:
        stop_process(self.process, self._log_file)  # type: ignore[arg-type]
        self._log_file = None


def start_redis(workdir: Path, *, tls: tuple[bytes, bytes] | None = None) -> RedisServer:
    """`tls`: (certificate PEM, key PEM) to serve TLS only on the port (no plain-text port)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port, password = free_port(), secrets.token_urlsafe(16)
    log_path = workdir / "redis.log"
    log_file = open(log_path, "ab")
    listen = ["--port", str(port)]
    if tls is not None:
        (workdir / "tls.crt").write_bytes(tls[0])
        (workdir / "tls.key").write_bytes(tls[1])
        listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(workdir / "tls.crt"),
                  "--tls-key-file", str(workdir / "tls.key"), "--tls-ca-cert-file", str(workdir / "tls.crt"),
                  "--tls-auth-clients", "no"]
    # No persistence, loopback only, a password so the registry's password rendering is exercised.
    process = subprocess.Popen(
        [REDIS_BINARY, "--bind", "127.0.0.1", *listen, "--requirepass", password, "--save", "",
         "--appendonly", "no", "--dir", str(workdir), "--protected-mode", "yes"],
        stdout=log_file, stderr=subprocess.STDOUT, cwd=workdir,
    )
    server = RedisServer(process, port, password, log_path, log_file)
    try:
        wait_for_port(port, timeout=10)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def running_redis(workdir: Path, *, tls: tuple[bytes, bytes] | None = None) -> Iterator[RedisServer]:
    server = start_redis(workdir, tls=tls)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """Fixture: a fresh password-protected redis-server on a free 127.0.0.1 port, stopped at teardown."""
    with running_redis(tmp_path / "redis") as server:
        yield server
