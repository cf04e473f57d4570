"""The real registry (Debian's /usr/bin/docker-registry, Distribution 2.8) on 127.0.0.1, and a real client.

    with running_registry(config_bytes, tmp_path) as reg:      # or registry_factory fixture
        assert http_get(reg.url + "/v2/").status == 200
        image = make_oci_image(tmp_path / "image")
        push_image(image, reg, "demo/app:1")
        assert pull_image(reg, "demo/app:1", tmp_path / "back").blobs == image.blobs

The config must listen on 127.0.0.1 (tests rewrite http.addr with `with_addr`). AWS_CA_BUNDLE is removed from
the registry's environment: the 2.8 s3 driver panics at start when it is set
(docs/upstream.md#parts-aws-ca-bundle).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from support.common.ports import free_port
from support.common.processes import stop_process

REGISTRY_BINARY = os.environ.get("BERTH_REGISTRY_BINARY", "/usr/bin/docker-registry")
# A real Distribution 3.x binary (docs/upstream.md#parts-registry3; .ci/run sets the variable where it exists).
# A user's fresh clone has none: tests that need it skip with this reason.
REGISTRY3_BINARY = os.environ.get("BERTH_REGISTRY3_BIN", "")
NO_REGISTRY3 = "BERTH_REGISTRY3_BIN is unset: no Distribution 3 binary (.ci/run sets it from ../shared/dist)"
requires_registry3 = pytest.mark.skipif(not REGISTRY3_BINARY, reason=NO_REGISTRY3)


def registry_binaries() -> list:
    """pytest params for a test that runs on both majors: ("2", 2.8 binary) and ("3", 3.x binary or a skip)."""
    return [
        pytest.param(("2", REGISTRY_BINARY), id="dist2"),
        pytest.param(("3", REGISTRY3_BINARY), id="dist3", marks=requires_registry3),
    ]
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


def with_addr(config: bytes, addr: str) -> bytes:
    """The same config listening on `addr` (e.g. 127.0.0.1:PORT) instead of its own http.addr."""
    document = yaml.safe_load(config)
    document.setdefault("http", {})["addr"] = addr
    return yaml.safe_dump(document, sort_keys=False).encode()


def config_addr(config: bytes) -> str:
    return str(yaml.safe_load(config).get("http", {}).get("addr", ""))


@dataclass
class HttpAnswer:
    status: int
    headers: dict[str, str]
    body: bytes


def http_get(url: str, *, auth: tuple[str, str] | None = None, timeout: float = 5.0,
             method: str = "GET", headers: dict[str, str] | None = None) -> HttpAnswer:
    """One request; any HTTP status is an answer (no exception for 4xx/5xx). TLS is not verified."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    if auth is not None:
        request.add_header("Authorization", "Basic " + b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    context = ssl._create_unverified_context() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return HttpAnswer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as exc:
        return HttpAnswer(exc.code, dict(exc.headers), exc.read())


@dataclass
class RegistryProcess:
    """A running docker-registry; stop() ends it (SIGTERM, then SIGKILL)."""

    process: subprocess.Popen
    config_path: Path
    log_path: Path
    addr: str
    tls: bool = False
    _log_file: object = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return int(self.addr.rsplit(":", 1)[1])

    @property
    def host(self) -> str:
        """host:port as image references name it."""
        return self.addr

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.addr}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        """Stop the process and return its exit status."""
        status = stop_process(self.process, self._log_file, timeout=STOP_TIMEOUT)  # type: ignore[arg-type]
        self._log_file = None
        return status


def registry_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE" and not k.startswith("REGISTRY_")}
    env["OTEL_TRACES_EXPORTER"] = "none"  # v3 would otherwise export traces (docs/upstream.md#dist-otel)
    return env


def start_registry(config: bytes | Path, workdir: Path, *, addr: str | None = None,
                   timeout: float = START_TIMEOUT, binary: str | None = None,
                   env: dict[str, str] | None = None) -> RegistryProcess:
    """Start `docker-registry serve` from config bytes or a config file and wait until GET /v2/ answers.

    With `addr`, http.addr is rewritten to it; otherwise the config's own addr must be 127.0.0.1:PORT.
    The registry's output goes to workdir/registry.log; `env` is added to its environment.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data = Path(config).read_bytes() if isinstance(config, Path) else config
    if addr is not None:
        data = with_addr(data, addr)
    listen = config_addr(data)
    if not listen.startswith("127.0.0.1:"):
        raise ValueError(f"the registry must listen on 127.0.0.1 in tests, not {listen!r}")
    config_path = workdir / "registry-config.yml"
    if isinstance(config, Path) and addr is None:
        config_path = Path(config)
    else:
        config_path.write_bytes(data)
    tls = bool((yaml.safe_load(data).get("http") or {}).get("tls"))
    log_path = workdir / "registry.log"
    log_file = open(log_path, "ab")
    process = subprocess.Popen([binary or REGISTRY_BINARY, "serve", str(config_path)], stdout=log_file,
                               stderr=subprocess.STDOUT, env={**registry_env(), **(env or {})}, cwd=workdir)
    registry = RegistryProcess(process, config_path, log_path, listen, tls, log_file)
    deadline = time.monotonic() + timeout
    while True:
        if not registry.alive():
            registry.stop()
            raise RuntimeError(f"registry exited with {process.returncode} at start; log:\n{registry.log()}")
        try:
            http_get(registry.url + "/v2/", timeout=1.0)
            return registry
        except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError, OSError):
            if time.monotonic() > deadline:
                registry.stop()
                raise TimeoutError(f"registry gave no answer on /v2/ in {timeout}s; log:\n{registry.log()}") from None
            time.sleep(0.02)


@contextlib.contextmanager
def running_registry(config: bytes | Path, workdir: Path, *, addr: str | None = None,
                     binary: str | None = None, env: dict[str, str] | None = None) -> Iterator[RegistryProcess]:
    """start_registry as a context manager; with no `addr` and a config not on 127.0.0.1, a free port is used."""
    data = Path(config).read_bytes() if isinstance(config, Path) else config
    if addr is None and not config_addr(data).startswith("127.0.0.1:"):
        addr = f"127.0.0.1:{free_port()}"
    registry = start_registry(config, workdir, addr=addr, binary=binary, env=env)
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture
def registry_factory(tmp_path: Path) -> Iterator:
    """Fixture: call it with config bytes (and optional addr) to get a started registry; all stop at teardown."""
    started: list[RegistryProcess] = []

    def start(config: bytes | Path, *, addr: str | None = None, name: str | None = None,
              binary: str | None = None) -> RegistryProcess:
        data = Path(config).read_bytes() if isinstance(config, Path) else config
        if addr is None and not config_addr(data).startswith("127.0.0.1:"):
            addr = f"127.0.0.1:{free_port()}"
        registry = start_registry(config, tmp_path / (name or f"registry-{len(started)}"), addr=addr,
                                  binary=binary)
        started.append(registry)
        return registry

    yield start
    for registry in started:
        registry.stop()


# --- a small real image, pushed and pulled with skopeo ---------------------------------------------------

def _load_example_oci_image():
    """examples/local/oci_image.py, the layout writer the README's offline push uses: one copy of that logic."""
    path = Path(__file__).resolve().parents[3] / "examples" / "local" / "oci_image.py"
    spec = importlib.util.spec_from_file_location("berth_example_oci_image", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


oci_image_example = _load_example_oci_image()
OCI_MANIFEST = oci_image_example.OCI_MANIFEST


@dataclass
class OciImage:
    """An OCI image layout directory and the blobs it holds (digest -> bytes)."""

    path: Path
    manifest_digest: str
    blobs: dict[str, bytes]

    @property
    def layer_digests(self) -> list[str]:
        manifest = json.loads(self.blobs[self.manifest_digest])
        return [layer["digest"] for layer in manifest["layers"]]


def make_oci_image(layout: Path, *, layer_size: int = 256 * 1024, layers: int = 1) -> OciImage:
    """Build an OCI layout with `layers` uncompressed layers of random bytes, a config and a manifest."""
    contents = [{f"random-{index}.bin": os.urandom(layer_size)} for index in range(layers)]
    digest, blobs = oci_image_example.write_layout(Path(layout), contents)
    return OciImage(Path(layout), digest, blobs)


def read_oci_image(layout: Path) -> OciImage:
    """The image an OCI layout holds (its first manifest) and every blob it references."""
    layout = Path(layout)
    index = json.loads((layout / "index.json").read_text())
    manifest_digest = index["manifests"][0]["digest"]

    def blob(digest: str) -> bytes:
        return (layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_bytes()

    manifest = json.loads(blob(manifest_digest))
    blobs = {manifest_digest: blob(manifest_digest)}
    for descriptor in [manifest["config"], *manifest["layers"]]:
        blobs[descriptor["digest"]] = blob(descriptor["digest"])
    return OciImage(layout, manifest_digest, blobs)


def _skopeo(args: list[str], *, timeout: float = 120.0) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    result = subprocess.run(["skopeo", "--insecure-policy", *args], capture_output=True, text=True,
                            timeout=timeout, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"skopeo {' '.join(args[:1])} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def push_image(image: OciImage | Path, registry: RegistryProcess | str, reference: str, *,
               creds: tuple[str, str] | None = None, docker_format: bool = False) -> None:
    """skopeo copy oci:LAYOUT docker://HOST/REFERENCE (TLS not verified, basic auth with `creds`). docker_format:
    as a Docker v2 schema 2 manifest (its digests then differ from the layout's): a Distribution 3.1.1 pull-through
    cache asks its upstream for a tag without accepting OCI manifests."""
    host = registry.host if isinstance(registry, RegistryProcess) else registry
    layout = image.path if isinstance(image, OciImage) else Path(image)
    args = ["copy", "--dest-tls-verify=false", *(["--format=v2s2"] if docker_format else ["--preserve-digests"])]
    if creds is not None:
        args.append(f"--dest-creds={creds[0]}:{creds[1]}")
    _skopeo([*args, f"oci:{layout}", f"docker://{host}/{reference}"])


def push_archive(archive: Path, host: str, reference: str, *, creds: tuple[str, str] | None = None) -> None:
    """skopeo copy docker-archive:ARCHIVE docker://HOST/REFERENCE (a node image of support.clusters.images, say)."""
    args = ["copy", "--dest-tls-verify=false"]
    if creds is not None:
        args.append(f"--dest-creds={creds[0]}:{creds[1]}")
    _skopeo([*args, f"docker-archive:{archive}", f"docker://{host}/{reference}"], timeout=300)


def pull_image(registry: RegistryProcess | str, reference: str, layout: Path, *,
               creds: tuple[str, str] | None = None) -> OciImage:
    """skopeo copy docker://HOST/REFERENCE oci:LAYOUT, then read back what arrived."""
    host = registry.host if isinstance(registry, RegistryProcess) else registry
    args = ["copy", "--src-tls-verify=false", "--preserve-digests"]
    if creds is not None:
        args.append(f"--src-creds={creds[0]}:{creds[1]}")
    _skopeo([*args, f"docker://{host}/{reference}", f"oci:{layout}"])
    return read_oci_image(layout)


def push_and_pull_back(registry: RegistryProcess, workdir: Path, *, reference: str = "berth/test:1",
                       creds: tuple[str, str] | None = None, layer_size: int = 256 * 1024) -> tuple[OciImage, OciImage]:
    """Push a fresh random image and pull it back; returns (pushed, pulled). Callers compare the blobs."""
    workdir = Path(workdir)
    pushed = make_oci_image(workdir / "push", layer_size=layer_size)
    push_image(pushed, registry, reference, creds=creds)
    pulled = pull_image(registry, reference, workdir / "pull", creds=creds)
    return pushed, pulled


def manifest_status(base_url: str, repo: str, digest: str) -> int:
    """HEAD of a manifest by digest, accepting OCI manifests: without that Accept header Distribution answers
    404 for an OCI manifest that exists, so a 404 would prove nothing."""
    return http_get(f"{base_url}/v2/{repo}/manifests/{digest}", method="HEAD",
                    headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).status
