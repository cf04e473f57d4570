"""A real HTTP egress proxy (Debian's tinyproxy) for the pre-flights and the registry's pull-through cache.

    with running_tinyproxy(tmp_path) as proxy:
        proxy.url                      # http://127.0.0.1:PORT
        proxy.requests()               # the request lines it forwarded: ["GET http://host:port/v2/ HTTP/1.1",
                                       #  "CONNECT host:443 HTTP/1.1", ...]

Listens on `listen` (127.0.0.1 by default; the node tier gives the node's bridge address, so pods reach it) and
allows clients from `allow`. LogLevel Connect logs every request line, which is what the tests read.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from support.common.ports import free_port, wait_listening
from support.common.processes import stop_process

TINYPROXY = "/usr/bin/tinyproxy"
_REQUEST = re.compile(r"Request \(file descriptor \d+\): (.*)$")


@dataclass
class Tinyproxy:
    host: str
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def requests(self) -> list[str]:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [match.group(1) for line in text.splitlines() if (match := _REQUEST.search(line))]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@contextlib.contextmanager
def running_tinyproxy(directory: Path, *, listen: str = "127.0.0.1",
                      allow: tuple[str, ...] = ("127.0.0.1",)) -> Iterator[Tinyproxy]:
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = directory / "tinyproxy.log"
    config = directory / "tinyproxy.conf"
    # No ConnectPort line: CONNECT to any port (the tests' upstreams are on free ports). Running as the test's own
    # user (no User line): tinyproxy warns and carries on.
    config.write_text("\n".join([
        f"Port {port}", f"Listen {listen}", "Timeout 60", f'LogFile "{log_path}"', "LogLevel Connect",
        "MaxClients 64", *(f"Allow {client}" for client in allow), ""]))
    output = open(directory / "tinyproxy.out", "wb")  # noqa: SIM115 (closed by stop_process)
    process = subprocess.Popen([TINYPROXY, "-d", "-c", str(config)], stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_listening(process, port, "tinyproxy", timeout=20, host=listen)
        yield Tinyproxy(listen, port, log_path)
    finally:
        stop_process(process, output)
