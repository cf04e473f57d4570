"""A real Azure Blob service for tests: Azurite 3.37.0 (npm) on 127.0.0.1, with shared-key authentication and
account keys the test sets and rotates.

    with running_azurite(tmp_path, {"berthacct": (key1, key2)}) as azurite:
        azurite.create_container("berthacct", "registry")
        ... point the azure driver at azurite.service_url("berthacct") with key1 or key2 ...
        azurite.set_keys("berthacct", new_key1, key2)      # key1 revoked: a request signed with it is refused

Azurite is installed by tests/run (`npm install` into $BERTH_AZURITE_DIR, default ~/.cache/berth/azurite); a
clone without it skips the tests that need it, saying so. The keys come from AZURITE_ACCOUNTS, which Azurite
re-reads every 60 s; `azurite_accounts.js` (preloaded) makes a change take effect at once (see that file).
Containers and blobs are checked with Microsoft's own client (azure-storage-blob), not with Berth's code.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.common.polling import wait_for
from support.common.ports import free_port
from support.common.processes import started, stop_process
from support.services.certs import self_signed_pair

AZURITE_DIR = Path(os.environ.get("BERTH_AZURITE_DIR", Path.home() / ".cache" / "berth" / "azurite"))
AZURITE_MAIN = AZURITE_DIR / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
NO_AZURITE = f"no Azurite at {AZURITE_MAIN} (tests/run installs it: npm install azurite@3.37.0)"
requires_azurite = pytest.mark.skipif(not AZURITE_MAIN.exists(), reason=NO_AZURITE)
PRELOAD = Path(__file__).with_name("azurite_accounts.js")


def new_account_key() -> str:
    """A fresh account key as Azure shows one: 64 random bytes, base64."""
    return base64.b64encode(secrets.token_bytes(64)).decode()


def _accounts_line(accounts: dict[str, tuple[str, ...]]) -> str:
    return ";".join(":".join((name, *keys)) for name, keys in accounts.items())


@dataclass
class Azurite:
    process: subprocess.Popen
    port: int
    workdir: Path
    accounts: dict[str, tuple[str, ...]]
    ca_path: Path | None = None  # with https: the self-signed certificate, its own CA
    _log_file: object = field(default=None, repr=False)

    @property
    def accounts_file(self) -> Path:
        return self.workdir / "accounts"

    def service_url(self, account: str) -> str:
        """The account's Blob endpoint, path-style as Azurite serves it (the driver's serviceurl)."""
        return f"{'https' if self.ca_path else 'http'}://127.0.0.1:{self.port}/{account}"

    def connection_string(self, account: str, key: str | None = None) -> str:
        key = key or self.accounts[account][0]
        protocol = "https" if self.ca_path else "http"
        return (f"DefaultEndpointsProtocol={protocol};AccountName={account};AccountKey={key};"
                f"BlobEndpoint={self.service_url(account)};")

    def client(self, account: str, key: str | None = None):
        from azure.storage.blob import BlobServiceClient

        extra = {"connection_verify": str(self.ca_path)} if self.ca_path else {}
        return BlobServiceClient.from_connection_string(self.connection_string(account, key), **extra)

    def create_container(self, account: str, name: str) -> None:
        self.client(account).create_container(name)

    def list_blobs(self, account: str, container: str) -> list[str]:
        return [blob.name for blob in self.client(account).get_container_client(container).list_blobs()]

    def set_keys(self, account: str, *keys: str, timeout: float = 10.0) -> None:
        """Replace the account's keys (one or two); a key left out is revoked once this returns."""
        self.accounts = {**self.accounts, account: tuple(keys)}
        line = _accounts_line(self.accounts)
        applied = self.accounts_file.with_name("accounts.applied")
        applied.unlink(missing_ok=True)
        self.accounts_file.write_text(line)
        self.process.send_signal(signal.SIGHUP)
        wait_for(lambda: applied.exists() and applied.read_text() == line,
                 lambda: f"Azurite to take the new keys; log:\n{self.log()}", timeout, 0.02)

    def log(self) -> str:
        path = self.workdir / "azurite.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        stop_process(self.process, self._log_file)  # type: ignore[arg-type]
        self._log_file = None


def start_azurite(workdir: Path, accounts: dict[str, tuple[str, ...]], *, https: bool = False,
                  timeout: float = 60.0) -> Azurite:
    """Azurite's blob service on a free port; with `https`, TLS with a certificate for 127.0.0.1 (SAS URLs, the
    registry's redirects, are https-only)."""
    if not AZURITE_MAIN.exists():
        pytest.skip(NO_AZURITE)
    workdir = Path(workdir)
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    (workdir / "accounts").write_text(_accounts_line(accounts))
    port = free_port()
    tls_args: list[str] = []
    ca_path = None
    if https:
        cert, key = self_signed_pair()
        ca_path = workdir / "azurite.pem"
        ca_path.write_bytes(cert)
        (workdir / "azurite.key").write_bytes(key)
        tls_args = ["--cert", str(ca_path), "--key", str(workdir / "azurite.key")]
    log_file = open(workdir / "azurite.log", "ab")
    env = {**os.environ, "NODE_PATH": str(AZURITE_DIR / "node_modules"),
           "BERTH_AZURITE_ACCOUNTS_FILE": str(workdir / "accounts")}
    env.pop("AZURITE_ACCOUNTS", None)
    # --skipApiVersionCheck: the registry's Go SDK may send a newer x-ms-version than this Azurite knows.
    process = subprocess.Popen(
        ["node", "-r", str(PRELOAD), str(AZURITE_MAIN), "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--location", str(workdir / "data"), "--skipApiVersionCheck", "--disableProductStyleUrl",
         "--disableTelemetry", *tls_args],
        stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    azurite = Azurite(process, port, workdir, dict(accounts), ca_path, log_file)
    return started(azurite, process, port, "Azurite", timeout=timeout, log=azurite.log)


@contextlib.contextmanager
def running_azurite(workdir: Path, accounts: dict[str, tuple[str, ...]], *, https: bool = False) -> Iterator[Azurite]:
    azurite = start_azurite(workdir, accounts, https=https)
    try:
        yield azurite
    finally:
        azurite.stop()
