"""A real S3 for tests: `moto_server` on 127.0.0.1 with IAM enforced (field-notes §6).

    with running_moto(tmp_path) as moto:
        user = moto.create_s3_user("registry", bucket="registry-data")   # IAM user + key + bucket
        moto.enforce_iam()                                             # from now on keys are checked
        ... point the registry at moto.endpoint with user.access_key_id / user.secret_access_key ...
        new_key = moto.create_access_key(user.name)
        moto.delete_access_key(user.name, user.access_key_id)          # revoke (Inactive keys still work)

An admin user with an allow-all policy is created first so that IAM calls keep working once enforced.

moto is started through this module (`python -m support.s3 HOST PORT`) rather than the `moto_server` script,
to fix one moto 5.2 server-mode bug: with IAM enforced, moto re-signs the request from werkzeug's
`request.url`, which percent-DECODES the query string, so any signed request whose query carries a reserved
character (`?prefix=a%2Fb`, which the registry's s3 driver sends to resume every upload) fails with
SignatureDoesNotMatch (boto3's list_multipart_uploads(Prefix="a/b") fails the same way). The fix keeps the
query string as sent when the URL is rebuilt; query parsing is unchanged. Nothing else in moto is touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .ports import free_port, listener_inodes, wait_listening
from .processes import stop_process

REGION = "us-east-1"
ALLOW_ALL = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


def _s3_policy(bucket: str) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Action": "s3:*",
            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
        }],
    })


@dataclass(frozen=True, repr=False)
class AccessKey:
    user: str
    access_key_id: str
    secret_access_key: str

    def __repr__(self) -> str:
        return f"AccessKey(user={self.user!r}, access_key_id=<hidden>)"


@dataclass
class MotoServer:
    process: subprocess.Popen
    port: int
    log_path: Path
    admin: AccessKey | None = None
    enforced: bool = False
    _log_file: object = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, service: str, key: AccessKey | None = None):
        """A boto3 client for this server, with `key` (default: the admin key, or moto's test key)."""
        import boto3

        key = key or self.admin
        # boto3 reads AWS_CA_BUNDLE even for plain http endpoints on some versions; keep it out.
        os.environ.pop("AWS_CA_BUNDLE", None)
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=key.access_key_id if key else "testing",
            aws_secret_access_key=key.secret_access_key if key else "testing",
        )

    def _ensure_admin(self) -> AccessKey:
        if self.admin is None:
            if self.enforced:
                raise RuntimeError("create the admin before enforcing IAM")
            iam = self.client("iam")
            iam.create_user(UserName="berth-test-admin")
            iam.put_user_policy(UserName="berth-test-admin", PolicyName="all", PolicyDocument=ALLOW_ALL)
            created = iam.create_access_key(UserName="berth-test-admin")["AccessKey"]
            self.admin = AccessKey("berth-test-admin", created["AccessKeyId"], created["SecretAccessKey"])
        return self.admin

    def create_bucket(self, bucket: str) -> None:
        self._ensure_admin()
        self.client("s3").create_bucket(Bucket=bucket)

    def create_s3_user(self, name: str, *, bucket: str, create_bucket: bool = True) -> AccessKey:
        """An IAM user allowed s3:* on `bucket` only, with one access key; creates the bucket too."""
        self._ensure_admin()
        iam = self.client("iam")
        iam.create_user(UserName=name)
        iam.put_user_policy(UserName=name, PolicyName=f"{name}-s3", PolicyDocument=_s3_policy(bucket))
        if create_bucket:
            self.create_bucket(bucket)
        return self.create_access_key(name)

    def create_access_key(self, user: str) -> AccessKey:
        created = self.client("iam").create_access_key(UserName=user)["AccessKey"]
        return AccessKey(user, created["AccessKeyId"], created["SecretAccessKey"])

    def delete_access_key(self, user: str, access_key_id: str) -> None:
        """Revoke a key. Deleting is the only revocation moto honours (an Inactive key is still accepted)."""
        self.client("iam").delete_access_key(UserName=user, AccessKeyId=access_key_id)

    def enforce_iam(self) -> None:
        """From now on every request must be signed by a live key whose policies allow it."""
        self._ensure_admin()
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                         headers={"Content-Type": "text/plain"})  # a form type would hide the body
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        self.enforced = True

    def list_objects(self, bucket: str, key: AccessKey | None = None) -> list[str]:
        client = self.client("s3", key)
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def stop(self) -> None:
        stop_process(self.process, self._log_file)  # type: ignore[arg-type]
        self._log_file = None


def start_moto(workdir: Path, *, port: int | None = None, timeout: float = 30.0) -> MotoServer:
    """moto_server on `port` (default: a free one), once its own process listens there. A free port is only free
    until someone binds it: another server binding port 0 meanwhile can be handed the same one (the clean-clone CI
    at 4b2b656: the kmock emulator's), and then a connect succeeds against the stranger while moto fails to bind.
    So the listener must be held by moto's process; on a port picked here, a stranger there means another try
    on another port."""
    tries = 1 if port is not None else 3
    for _ in range(tries):
        server = _start_moto_once(workdir, port or free_port(), timeout)
        if server is not None:
            return server
    raise RuntimeError(f"moto_server: another process held its port ({tries} tries)")


def _start_moto_once(workdir: Path, port: int, timeout: float) -> MotoServer | None:
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "moto.log"
    log_file = open(log_path, "ab")
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.setdefault("AWS_DEFAULT_REGION", REGION)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    process = subprocess.Popen([sys.executable, "-m", "support.s3", "127.0.0.1", str(port)], stdout=log_file,
                               stderr=subprocess.STDOUT, env=env, cwd=workdir)
    server = MotoServer(process, port, log_path, _log_file=log_file)
    try:
        wait_listening(process, port, "moto_server", timeout=timeout)
        return server
    except RuntimeError as error:
        server.stop()
        if listener_inodes("127.0.0.1", port):
            return None  # it could not bind: the port was someone else's by then
        raise RuntimeError(f"{error}: {log_path.read_text()}") from None
    except BaseException:
        server.stop()
        raise


@contextlib.contextmanager
def running_moto(workdir: Path) -> Iterator[MotoServer]:
    server = start_moto(workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def moto_server(tmp_path: Path) -> Iterator[MotoServer]:
    """Fixture: a fresh moto_server (IAM not yet enforced) on a free 127.0.0.1 port, stopped at teardown."""
    with running_moto(tmp_path / "moto") as server:
        yield server


def _serve(host: str, port: int) -> None:
    """Run moto_server with request.url keeping the query string as sent (see the module docstring)."""
    from urllib.parse import quote

    import werkzeug.sansio.request as werkzeug_request
    from moto.server import main
    from werkzeug.sansio.utils import get_current_url

    def url_with_raw_query(self) -> str:  # type: ignore[no-untyped-def]
        base = get_current_url(self.scheme, self.host, self.root_path, self.path)
        if not self.query_string:
            return base
        return base + "?" + quote(self.query_string, safe="!$&'()*+,/:;=?@%")

    werkzeug_request.Request.url = property(url_with_raw_query)  # type: ignore[assignment]
    main(["-H", host, "-p", str(port)])


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
