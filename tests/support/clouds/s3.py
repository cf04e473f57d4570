"""A real S3 for tests: `moto_server` on 127.0.0.1 with IAM enforced (docs/upstream.md#parts-moto).

    with running_moto(tmp_path) as moto:
        user = moto.create_s3_user("registry", bucket="registry-data")   # IAM user + key + bucket
        moto.enforce_iam()                                             # from now on keys are checked
        ... point the registry at moto.endpoint with user.access_key_id / user.secret_access_key ...
        new_key = moto.create_access_key(user.name)
        moto.delete_access_key(user.name, user.access_key_id)          # revoke (Inactive keys still work)

An admin user with an allow-all policy is created first so that IAM calls keep working once enforced.

moto is started through this module (`python -m support.clouds.s3 HOST PORT`) rather than the `moto_server` script,
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
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.common.ports import free_port, listener_inodes
from support.common.processes import started, stop_process

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
    session_token: str = ""  # temporary credentials (assume_role)

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
    ca_file: Path | None = None  # served over TLS with a certificate this CA signed (start_moto(tls=True))
    host: str = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.ca_file else 'http'}://{self.host}:{self.port}"

    def client(self, service: str, key: AccessKey | None = None):
        """A boto3 client for this server, with `key` (default: the admin key, or moto's test key)."""
        import boto3

        key = key or self.admin
        # boto3 reads AWS_CA_BUNDLE even for plain http endpoints on some versions; keep it out.
        os.environ.pop("AWS_CA_BUNDLE", None)
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            verify=str(self.ca_file) if self.ca_file else None,
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

    def create_s3_role(self, name: str, *, bucket: str) -> str:
        """A role allowed s3:* on `bucket` only (and the bucket), which the admin may assume; its ARN."""
        admin = self._ensure_admin()
        iam = self.client("iam")
        caller = iam.get_user(UserName=admin.user)["User"]["Arn"]  # moto checks the trust policy's principal
        trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                         "Principal": {"AWS": caller}}]}
        arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        iam.put_role_policy(RoleName=name, PolicyName=f"{name}-s3", PolicyDocument=_s3_policy(bucket))
        self.create_bucket(bucket)
        return arn

    def assume_role(self, arn: str, session: str = "registry") -> AccessKey:
        """Temporary credentials of the role (STS AssumeRole, signed by the admin): an ASIA key and its token."""
        created = self.client("sts").assume_role(RoleArn=arn, RoleSessionName=session)["Credentials"]
        return AccessKey(session, created["AccessKeyId"], created["SecretAccessKey"], created["SessionToken"])

    def create_access_key(self, user: str) -> AccessKey:
        created = self.client("iam").create_access_key(UserName=user)["AccessKey"]
        return AccessKey(user, created["AccessKeyId"], created["SecretAccessKey"])

    def delete_access_key(self, user: str, access_key_id: str) -> None:
        """Revoke a key. Deleting is the only revocation moto honours (an Inactive key is still accepted)."""
        self.client("iam").delete_access_key(UserName=user, AccessKeyId=access_key_id)

    def enforce_iam(self, unchecked: int = 0) -> None:
        """From now on every request must be signed by a live key whose policies allow it, but the next
        `unchecked` (moto cannot check an unsigned STS AssumeRoleWithWebIdentity under enforcement)."""
        self._ensure_admin()
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", data=str(unchecked).encode(),
                                         method="POST", headers={"Content-Type": "text/plain"})  # not a form type
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            response.read()
        self.enforced = True

    def create_kms_key(self) -> str:
        """A key in moto's KMS; its ARN (moto's S3 records the key id it is given, so use a real one)."""
        return self.client("kms").create_key(Description="berth-test")["KeyMetadata"]["Arn"]

    def list_objects(self, bucket: str, key: AccessKey | None = None) -> list[str]:
        client = self.client("s3", key)
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def stop(self) -> None:
        stop_process(self.process, self._log_file)  # type: ignore[arg-type]
        self._log_file = None


def start_moto(workdir: Path, *, port: int | None = None, timeout: float = 30.0, tls: bool = False,
               host: str = "127.0.0.1") -> MotoServer:
    """moto_server on `port` (default: a free one), once its own process listens there. A free port is only free
    until someone binds it: another server binding port 0 meanwhile can be handed the same one (the clean-clone CI
    at 4b2b656: the kmock emulator's), and then a connect succeeds against the stranger while moto fails to bind.
    So the listener must be held by moto's process; on a port picked here, a stranger there means another try
    on another port."""
    tries = 1 if port is not None else 3
    ca_file = _tls_files(Path(workdir)) if tls else None
    for _ in range(tries):
        server = _start_moto_once(workdir, port or free_port(), timeout, ca_file, host)
        if server is not None:
            return server
    raise RuntimeError(f"moto_server: another process held its port ({tries} tries)")


def _tls_files(workdir: Path) -> Path:
    """A private CA and a server pair it signed, in workdir (ca.crt, server.crt, server.key): moto's own TLS."""
    from support.services.certs import private_ca_and_leaf

    workdir.mkdir(parents=True, exist_ok=True)
    ca, cert, key = private_ca_and_leaf()
    for name, data in (("ca.crt", ca), ("server.crt", cert), ("server.key", key)):
        (workdir / name).write_bytes(data)
    return workdir / "ca.crt"


def _start_moto_once(workdir: Path, port: int, timeout: float, ca_file: Path | None = None,
                     host: str = "127.0.0.1") -> MotoServer | None:
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "moto.log"
    log_file = open(log_path, "ab")
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.setdefault("AWS_DEFAULT_REGION", REGION)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    tls = [str(ca_file.parent / "server.crt"), str(ca_file.parent / "server.key")] if ca_file else []
    process = subprocess.Popen([sys.executable, "-m", "support.clouds.s3", host, str(port), *tls],
                               stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    server = MotoServer(process, port, log_path, _log_file=log_file, ca_file=ca_file, host=host)
    try:
        return started(server, process, port, "moto_server", timeout=timeout, host=host,
                       log=lambda: log_path.read_text(errors="replace"))
    except RuntimeError:
        if listener_inodes(host, port):
            return None  # it could not bind: the port was someone else's by then
        raise


@contextlib.contextmanager
def running_moto(workdir: Path, *, tls: bool = False, host: str = "127.0.0.1") -> Iterator[MotoServer]:
    """`host`: another address of this machine (the node tier's bridge, which pods reach)."""
    server = start_moto(workdir, tls=tls, host=host)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def moto_server(tmp_path: Path) -> Iterator[MotoServer]:
    """Fixture: a fresh moto_server (IAM not yet enforced) on a free 127.0.0.1 port, stopped at teardown."""
    with running_moto(tmp_path / "moto") as server:
        yield server


def _serve(host: str, port: int, cert: str | None = None, key: str | None = None) -> None:
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
    main(["-H", host, "-p", str(port), *(["-c", cert, "-k", key] if cert and key else [])])


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), *sys.argv[3:5])
