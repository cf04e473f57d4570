"""Rendered configs run the REAL registry on 127.0.0.1 (docs/design.md §5.2): Debian's docker-registry 2.8, and
the real Distribution 3.1.1 binary where BERTH_REGISTRY3_BIN names it (each test runs on both: the `dist` fixture).

Every example and every storage backend: render from a mount root laid out as the kubelet does, for the major
that runs it, start the registry, GET /v2/ (401 with auth, 200 without); with filesystem and S3 (moto, IAM
enforced) push an image with skopeo and pull it back byte-identical; htpasswd and TLS the same way. No secret
value may show in the registry's log either.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from berth_agent.mounted.mounts import read_inputs
from berth_agent.render.config import RenderPaths, render
from berth_api import Registry
from support.common.ports import free_port
from support.registries.mountkit import COSI_FORMATS, Mounts, S3Target, example_names, write_mounts_for
from support.registries.registry import RegistryProcess, http_get, push_and_pull_back, start_registry

pytestmark = pytest.mark.timeout(180)


def write_rendered(registry: Registry, mounts: Mounts, workdir: Path, major: str, **paths_args) -> Path:
    """Render as the agent does and write config.yml plus its files into workdir/config; returns the config path."""
    paths = RenderPaths(config_dir=workdir / "config", data_dir=workdir / "data", **paths_args)
    rendered = render(registry.spec, read_inputs(registry.spec, mounts.root), distribution=major, paths=paths)
    paths.config_dir.mkdir(parents=True)
    for name, data in rendered.files.items():
        (paths.config_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (paths.config_dir / name).write_bytes(data)
    config = paths.config_dir / "config.yml"
    config.write_bytes(rendered.config)
    config.chmod(0o600)
    return config


def prepare(document: dict, tmp_path: Path, major: str, *, paths_args: dict | None = None,
            **mount_args) -> tuple[Registry, Mounts, Path]:
    """Listen on a free loopback port, write the mounts, render; returns the registry, mounts and config path."""
    document = yaml.safe_load(yaml.safe_dump(document))
    http = document["spec"].setdefault("http", {})
    http["addr"] = f"127.0.0.1:{free_port()}"
    if http.get("host"):  # Location headers name http.host: keep every request on this machine
        http["host"] = f"{'https' if http.get('tls') else 'http'}://{http['addr']}"
    if "s3" in mount_args:
        # moto cannot serve presigned redirect URLs while IAM is enforced (it wants an Authorization header,
        # docs/upstream.md#parts-moto), so blobs go through the registry.
        document["spec"]["config"]["storage"]["redirect"] = {"disabled": True}
    registry = Registry.model_validate(document)
    mounts = write_mounts_for(registry.spec, tmp_path / "mounts", **mount_args)
    return registry, mounts, write_rendered(registry, mounts, tmp_path, major, **(paths_args or {}))


def load(name: str) -> dict:
    return yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / name).read_text())


def moto_target(moto, bucket: str) -> S3Target:
    key = moto.create_s3_user(f"{bucket}-user", bucket=bucket)
    moto.enforce_iam()
    return S3Target(moto.endpoint, bucket, key.access_key_id, key.secret_access_key)


def assert_no_secret_in_log(registry: RegistryProcess, mounts: Mounts) -> None:
    log = registry.log()
    for value in mounts.secret_values:
        assert value not in log


def check(registry: RegistryProcess, mounts: Mounts, tmp_path: Path, *, round_trip: bool) -> None:
    creds = mounts.user
    expected = 401 if creds else 200
    assert http_get(registry.url + "/v2/").status == expected
    if creds:
        assert http_get(registry.url + "/v2/", auth=creds).status == 200
        assert http_get(registry.url + "/v2/", auth=(creds[0], "wrong")).status == 401
    if round_trip:
        pushed, pulled = push_and_pull_back(registry, tmp_path / "image", creds=creds)
        assert pulled.manifest_digest == pushed.manifest_digest
        assert pulled.blobs == pushed.blobs


def check_serving(config: Path, mounts: Mounts, tmp_path: Path, binary: str | Path) -> RegistryProcess:
    """Start the registry on the rendered config, check it (auth, a push and pull back) and that no secret value
    is in its log; stop it. The stopped process, for what its log says."""
    registry = start_registry(config, tmp_path / "run", binary=binary)
    try:
        check(registry, mounts, tmp_path, round_trip=True)
        assert_no_secret_in_log(registry, mounts)
    finally:
        registry.stop()
    return registry


def _cloud_storage(name: str) -> bool:
    """Azure Blob and GCS examples need their emulators: tests/agent/render/test_real_cloud_storage.py serves those;
    storage.s3 examples name real buckets: tests/agent/e2e/test_e2e_s3.py serves storage.s3 from moto."""
    storage = load(name)["spec"]["config"].get("storage", {})
    return "azure" in storage or "gcs" in storage or "s3" in storage


@pytest.mark.parametrize("name", [n for n in example_names()
                                  if "cosi" not in n and n != "full.yaml" and not _cloud_storage(n)])
def test_example_without_object_storage_serves(name, tmp_path, dist):
    registry_def, mounts, config = prepare(load(name), tmp_path, dist[0])
    # In-memory storage round-trips too: it is a backend like the others, only volatile.
    check_serving(config, mounts, tmp_path, dist[1])
    if registry_def.spec.config.storage.filesystem is not None:
        assert any((tmp_path / "data").rglob("data")), "blobs were written under the rendered rootdirectory"


@pytest.mark.parametrize("name", [n for n in example_names() if "cosi" in n])
def test_cosi_example_serves_from_moto_with_iam_enforced(name, tmp_path, moto_server, dist):
    target = moto_target(moto_server, "registry-data")
    _, mounts, config = prepare(load(name), tmp_path, dist[0], s3=target)
    check_serving(config, mounts, tmp_path, dist[1])
    objects = moto_server.list_objects("registry-data")
    assert any(key.endswith("/data") for key in objects), "blobs landed in the bucket"


@pytest.mark.parametrize("cosi_format", COSI_FORMATS[1:])
def test_v1alpha2_credentials_drive_the_s3_driver(cosi_format, tmp_path, moto_server, dist):
    target = moto_target(moto_server, "registry-v2")
    _, mounts, config = prepare(load("cosi-existing.yaml"), tmp_path, dist[0], s3=target, cosi_format=cosi_format)
    check_serving(config, mounts, tmp_path, dist[1])


def test_full_example_serves_with_auth_s3_and_a_real_redis_cache(tmp_path, moto_server, redis_server, dist):
    """The architecture document's example: S3, htpasswd, an http secret, the redis blob descriptor cache (a
    real password-protected redis-server), a storage driver and a tcp health check (pointed at that redis)."""
    major, binary = dist
    document = load("full.yaml")
    document["spec"]["health"]["tcp"][0]["addr"] = f"127.0.0.1:{redis_server.port}"
    document["spec"]["redis"]["db"] = 3
    document["spec"]["redis"]["dialtimeout"] = "1s"  # the example's 10ms is tight on a busy 2-core machine
    document["spec"]["redis"]["readtimeout"] = document["spec"]["redis"]["writetimeout"] = "1s"
    target = moto_target(moto_server, "registry-full")
    redis_url = f"redis://:{redis_server.password}@127.0.0.1:{redis_server.port}"  # db from spec.redis.db
    _, mounts, config = prepare(document, tmp_path, major, s3=target, redis_url=redis_url)
    mounts.secret_values.append(redis_server.password)
    rendered = yaml.safe_load(config.read_bytes())
    assert rendered["auth"]["htpasswd"]["path"] == str(tmp_path / "config" / "htpasswd")
    if major == "2":
        assert rendered["redis"]["addr"] == f"127.0.0.1:{redis_server.port}"
        assert rendered["storage"]["cache"] == {"blobdescriptor": "redis"}  # blobdescriptorsize is v3 only
    else:
        assert rendered["redis"]["addrs"] == [f"127.0.0.1:{redis_server.port}"]
        assert rendered["storage"]["cache"] == {"blobdescriptor": "redis", "blobdescriptorsize": 10000}
    registry = check_serving(config, mounts, tmp_path, binary)
    assert "using redis blob descriptor cache" in registry.log()
    assert "error connecting to redis" not in registry.log()
    # The registry authenticated with the rendered password and wrote descriptors into the rendered db.
    keys = redis_server.command("KEYS", "*", db=3)
    assert any(key.startswith(b"blobs::sha256:") for key in keys), keys
    assert redis_server.command("DBSIZE", db=0) == 0


def tls_document(storage: dict) -> dict:
    return {
        "apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "secure"},
        "spec": {
            "image": "docker.io/library/registry:2.8.3",
            "config": {"storage": {**storage, "auth": {"htpasswd": {"secret": {"name": "users", "field": "users"}}}}},
            "http": {"tls": {"secretName": "secure-tls"}, "drainTimeout": "5s"},
        },
    }


def test_tls_and_htpasswd_on_filesystem(tmp_path, dist):
    _, mounts, config = prepare(tls_document({"filesystem": {"persistentVolumeClaim": "data"}}), tmp_path, dist[0])
    assert (tmp_path / "config" / "tls" / "tls.crt").read_bytes() == mounts.tls_cert
    registry = start_registry(config, tmp_path / "run", binary=dist[1])
    try:
        assert registry.url.startswith("https://")
        check(registry, mounts, tmp_path, round_trip=True)
        assert_no_secret_in_log(registry, mounts)
        # The certificate served is the one from the mounted Secret.
        import ssl

        served = ssl.get_server_certificate(("127.0.0.1", registry.port)).encode()
        assert served.split(b"-----")[2].split() == mounts.tls_cert.split(b"-----")[2].split()
    finally:
        assert registry.stop() == 0  # draintimeout rendered: SIGTERM drains and exits 0 (docs/upstream.md#dist-drain)


def test_tls_with_s3(tmp_path, moto_server, dist):
    target = moto_target(moto_server, "registry-tls")
    storage = {"objectStorage": {"bucketClaim": "b", "bucketAccess": "a"}, "redirect": {"disabled": True}}
    _, mounts, config = prepare(tls_document(storage), tmp_path, dist[0], s3=target)
    check_serving(config, mounts, tmp_path, dist[1])
