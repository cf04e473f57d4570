"""A real redis (Debian's redis-server) on 127.0.0.1 with a password, for the registry's blob descriptor cache.

    with running_redis(tmp_path) as redis:
        url = redis.url()                 # redis://:PASSWORD@127.0.0.1:PORT/0
        redis.command("DBSIZE")           # -> int
        redis.clients()                   # connections open now, our own excluded

    with running_redis(tmp_path, tls=True) as redis:   # TLS only (no clear-text port), a self-signed certificate
        url = redis.url()                 # rediss://...; trust redis.ca_file
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from berth_agent.apply.redis_wire import encode as _encode
from berth_agent.apply.redis_wire import read_reply as _read_reply
from support.common.ports import free_port
from support.common.processes import started, stop_process
from support.services.certs import self_signed_pair

REDIS_BINARY = "/usr/bin/redis-server"


@dataclass(repr=False)
class RedisServer:
    process: subprocess.Popen
    port: int
    password: str
    log_path: Path
    _log_file: object = field(default=None)
    ca_file: Path | None = None  # with TLS: the server's self-signed certificate, for clients to trust

    def __repr__(self) -> str:
        return f"RedisServer(port={self.port}, tls={self.tls}, password=<hidden>)"

    @property
    def tls(self) -> bool:
        return self.ca_file is not None

    def url(self, db: int = 0) -> str:
        return f"{'rediss' if self.tls else 'redis'}://:{self.password}@127.0.0.1:{self.port}/{db}"

    def command(self, *args: str, db: int = 0) -> object:
        """Run one command (after AUTH and SELECT) and return its decoded reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw:
            sock = raw
            if self.tls:
                context = ssl.create_default_context(cafile=str(self.ca_file))
                sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
            stream = sock.makefile("rwb")
            stream.write(_encode("AUTH", self.password) + _encode("SELECT", str(db)) + _encode(*args))
            stream.flush()
            _read_reply(stream)
            _read_reply(stream)
            return _read_reply(stream)

    def clients(self) -> int:
        """Client connections open now, not counting the one asking."""
        listing = self.command("CLIENT", "LIST")
        return len([line for line in listing.splitlines() if line.strip()]) - 1  # type: ignore[union-attr]

    def stop(self) -> None:
        stop_process(self.process, self._log_file)  # type: ignore[arg-type]
        self._log_file = None


def start_redis(workdir: Path, *, tls: bool = False) -> RedisServer:
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port, password = free_port(), secrets.token_urlsafe(16)
    log_path = workdir / "redis.log"
    # No persistence, loopback only, a password so the registry's password rendering is exercised.
    args = [REDIS_BINARY, "--bind", "127.0.0.1", "--requirepass", password, "--save", "", "--appendonly", "no",
            "--dir", str(workdir), "--protected-mode", "yes"]
    ca_file = None
    if tls:
        # TLS only: the clear-text port is off, so a client that ignores its TLS setting cannot talk to it.
        cert, key = self_signed_pair()
        ca_file, key_file = workdir / "redis.crt", workdir / "redis.key"
        ca_file.write_bytes(cert)
        key_file.write_bytes(key)
        args += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(ca_file), "--tls-key-file",
                 str(key_file), "--tls-ca-cert-file", str(ca_file), "--tls-auth-clients", "no"]
    else:
        args += ["--port", str(port)]
    log_file = open(log_path, "ab")
    process = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, cwd=workdir)
    server = RedisServer(process, port, password, log_path, log_file, ca_file)
    return started(server, process, port, "redis-server", timeout=10,
                   log=lambda: log_path.read_text(errors="replace"))


@contextlib.contextmanager
def running_redis(workdir: Path, *, tls: bool = False) -> Iterator[RedisServer]:
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
