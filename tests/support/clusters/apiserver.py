"""A real Kubernetes API server for tests: kube-apiserver v1.36 on Debian's etcd, as envtest runs it.

No kubelet, scheduler or controller manager (docs/upstream.md#parts-kube-apiserver): no pods run, nothing is garbage
collected, a deleted namespace stays Terminating. What it does have is what kmock (support.clusters.kube) lacks:
RBAC with real ServiceAccount tokens, the CRD's structural schema and CEL rules at admission, strict field
validation, server-side apply, resourceVersion semantics, bookmarks, 410 Gone, the status subresource.

    def test_something(kube_apiserver, apiserver_namespace):  # fixtures registered in tests/conftest.py
        kube_apiserver.create({... "metadata": {"namespace": apiserver_namespace, ...}})

Bare, as users' clusters are: it serves Berth's CRD and the built-in kinds only. A test that needs COSI or
prometheus-operator installs their CRDs (install_cosi_crds, install_monitoring_crds; once per server, which then
keeps them), or starts a server of its own with `KubeApiServer(crds=...)`.

One server (and one etcd) per pytest-xdist worker (`kube_apiserver` is session-scoped), a fresh namespace per
test. The binary is `$BERTH_KUBE_APISERVER_XZ` (.ci/run exports it), else `DEFAULT_XZ` beside
the checkout; without it, or without /usr/bin/etcd, the tests skip saying why. The object helpers
(create/get/list/patch/delete by "group/version/plural" paths) are those of support.clusters.kube.KubeApi, so
support.clusters.operator_harness and support.registries.replicas work on either server.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import lzma
import os
import pathlib
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import kubernetes.client
import pytest
import urllib3
import yaml

from support.clusters.kube import COSI_CRDS, REGISTRY_CRD, install_cosi_crds  # noqa: F401 (the tests import it here)
from support.common.polling import wait_for
from support.common.ports import free_port
from support.common.processes import stop_process

REPO = pathlib.Path(__file__).resolve().parents[3]
APISERVER_XZ_ENV = "BERTH_KUBE_APISERVER_XZ"
DEFAULT_XZ = REPO.parent / "shared" / "k8s" / "kube-apiserver-v1.36.1.xz"
MONITORING_CRDS = REPO / "tests" / "fixtures" / "prometheus-operator-v0.93.0"
GATEWAY_API_CRDS = REPO / "tests" / "fixtures" / "gateway-api-v1.6.1"
CERT_MANAGER_CRDS = REPO / "tests" / "fixtures" / "cert-manager-v1.21.1"
# The decompressed binary's (docs/upstream.md#parts-kube-apiserver).
BINARY_SHA256 = "b8d5488f2d2ed84342dcb891ae9b83863c349e5d342accd33976123631872d5c"
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# Every request, at Metadata level: who asked what and what was answered (the RBAC tests read it).
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata"}]}
# The control plane's own users (support.clusters.control_plane): the API server's built-in bindings give each its role.
COMPONENT_USERS = ("system:kube-controller-manager", "system:kube-scheduler")


def apiserver_xz() -> pathlib.Path | None:
    path = pathlib.Path(os.environ.get(APISERVER_XZ_ENV) or DEFAULT_XZ)
    return path if path.is_file() else None


def skip_reason() -> str | None:
    """Why the real-API-server tier cannot run here, or None."""
    if apiserver_xz() is None:
        given = os.environ.get(APISERVER_XZ_ENV)
        where = f"{APISERVER_XZ_ENV}={given} is not a file" if given else (
            f"{APISERVER_XZ_ENV} is unset and {DEFAULT_XZ} is absent")
        return f"no kube-apiserver: {where} (.ci/run exports it from ../shared/k8s)"
    if not os.access(ETCD, os.X_OK):
        return f"no etcd at {ETCD} (tests/run installs Debian's etcd-server)"
    return None


def cached_binary() -> pathlib.Path:
    """The decompressed kube-apiserver (unpack_cached)."""
    xz = apiserver_xz()
    assert xz is not None, skip_reason()
    return unpack_cached(xz, "kube-apiserver", BINARY_SHA256)


def unpack_cached(xz: pathlib.Path, name: str, expected: str) -> pathlib.Path:
    """The binary `xz` decompresses to, checked against its SHA-256 `expected`, once per user and binary: written
    to a temp file beside it and renamed into place, so xdist workers starting together each see a whole file or
    none (support.clusters.control_plane unpacks the controller manager and the scheduler with it too)."""
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "berth-tests"
    target = cache / f"{name}-{expected[:16]}"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=cache, prefix=f".{name}-", delete=False) as temp:
        try:
            with lzma.open(xz) as source:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    temp.write(chunk)
            temp.close()
            if digest.hexdigest() != expected:
                raise RuntimeError(f"{xz} does not decompress to the {name} of ../shared/k8s (SHA-256 "
                                   f"{expected[:16]}...)")
            os.chmod(temp.name, 0o755)
            os.replace(temp.name, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp.name)
    return target


def api_path(path: str, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    """'berth.dev/v1alpha1/registries' or 'v1/secrets' -> the URL path of the collection or object."""
    group_version, _, plural = path.rpartition("/")
    parts = ["/api" if "/" not in group_version else "/apis", group_version]
    if namespace:
        parts += ["namespaces", namespace]
    parts.append(plural)
    if name:
        parts.append(name)
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


def plural_of(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


def path_of(obj: Mapping[str, Any]) -> str:
    return f"{obj['apiVersion']}/{plural_of(obj['kind'])}"


class ApiError(Exception):
    """A non-2xx answer: its status and the server's Status object (never a request body)."""

    def __init__(self, status: int, body: dict[str, Any]):
        super().__init__(f"{status} {body.get('reason', '')}: {body.get('message', '')}")
        self.status, self.body = status, body

    @property
    def causes(self) -> list[dict[str, Any]]:
        return (self.body.get("details") or {}).get("causes") or []


class KubeApiServer:
    """etcd and kube-apiserver on 127.0.0.1 free ports, RBAC on, an admin token; stopped and removed on exit."""

    def __init__(self, *, extra_args: tuple[str, ...] = (), etcd_url: str | None = None,
                 service_account_key: bytes | None = None, crds: Sequence[Mapping[str, Any]] = ()):
        """crds: installed at start besides Berth's own (COSI_CRDS, monitoring_crds())."""
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="berth-apiserver-"))
        self.extra_args = extra_args
        self.crds = list(crds)
        self.etcd_url = etcd_url  # given: share another server's etcd (a second API server, as in HA)
        # Shared with that server too, so each accepts the ServiceAccount tokens the other issues.
        self.service_account_key = service_account_key or _rsa_key_pem()
        self.admin_token = secrets.token_urlsafe(24)
        self.component_tokens = {user: secrets.token_urlsafe(24) for user in COMPONENT_USERS}
        self.port = 0
        self.url = ""
        self.startup_seconds = 0.0
        self._processes: list[tuple[subprocess.Popen, Any]] = []
        self._http: urllib3.PoolManager | None = None

    # ------------------------------------------------------------------------------------ lifecycle

    def __enter__(self) -> KubeApiServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def start(self) -> None:
        began = time.monotonic()
        binary = cached_binary()
        if self.etcd_url is None:
            self.etcd_url = self._start_etcd()
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        certs = self.root / "certs"
        certs.mkdir(mode=0o700)
        key = self.service_account_key_file = self.root / "sa.key"  # the controller manager signs with it too
        key.touch(mode=0o600)
        key.write_bytes(self.service_account_key)
        tokens = self.root / "tokens.csv"
        tokens.touch(mode=0o600)
        tokens.write_text(f'{self.admin_token},admin,admin-uid,"system:masters"\n' + "".join(
            f"{token},{user},{user}-uid\n" for user, token in self.component_tokens.items()))
        (self.root / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        self._spawn("kube-apiserver", [
            str(binary), f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", f"--secure-port={self.port}", "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none", f"--cert-dir={certs}", "--service-cluster-ip-range=10.96.0.0/16",
            "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={key}",
            f"--service-account-signing-key-file={key}", "--authorization-mode=RBAC",
            f"--token-auth-file={self.root / 'tokens.csv'}",
            # etcd 3.4 lacks what WatchList needs (docs/upstream.md#parts-kube-apiserver).
            "--feature-gates=WatchList=false",
            # blockOwnerDeletion needs update on the owner's finalizers (deploy/clusterrole.yaml says why).
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            # As kubeadm runs it: privileged pods are valid, so PodSecurity is what refuses them.
            "--allow-privileged=true",
            f"--audit-policy-file={self.root / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log_path}",
            "--audit-log-mode=blocking",  # an entry is on disk before the answer: the tests read it right after
            *self.extra_args,
        ])
        ca = certs / "apiserver.crt"
        self._wait(lambda: ca.exists() and self._ready(ca), "kube-apiserver /readyz", 90)
        self.ca_file = ca
        self._install_crds()
        self.startup_seconds = time.monotonic() - began

    def _start_etcd(self) -> str:
        data = self.root / "etcd"
        data.mkdir(mode=0o700)
        client, peer = free_port(), free_port()
        url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self._spawn("etcd", [
            ETCD, "--name=berth", f"--data-dir={data}", f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}", f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}", f"--initial-cluster=berth={peer_url}",
            "--logger=zap", "--log-level=warn", "--log-outputs=stderr",
        ])
        self._wait(lambda: _http_ok(f"{url}/health"), "etcd /health", 30)
        return url

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.root / f"{name}.log").open("ab")
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self._processes.append((process, log))

    def _wait(self, predicate: Any, what: str, timeout: float) -> None:
        def ready() -> Any:
            for process, _ in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{what}: {process.args[0]} exited {process.returncode}\n{self.logs()}")
            return predicate()

        wait_for(ready, lambda: f"{what}\n{self.logs()}", timeout, 0.1)

    def _ready(self, ca: pathlib.Path) -> bool:
        try:
            context = ssl.create_default_context(cafile=str(ca))
        except ssl.SSLError:  # the certificate is being written
            return False
        return _http_ok(f"{self.url}/readyz", context=context, token=self.admin_token)

    def pids(self) -> dict[str, int]:
        """The pids of etcd (when it is this server's own) and kube-apiserver: a benchmark reads their CPU."""
        return {("etcd" if process.args[0] == ETCD else "kube-apiserver"): process.pid
                for process, _ in self._processes}

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.root.glob("*.log")
                         if p.name != "audit.log")

    def close(self) -> None:
        # The API server first: it would log etcd going away otherwise.
        for process, log in reversed(self._processes):
            stop_process(process, log, timeout=15)
        self._processes.clear()
        if self._http is not None:
            self._http.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def _install_crds(self) -> None:
        self.install_crds([yaml.safe_load(REGISTRY_CRD.read_text()), *self.crds])

    def install_crds(self, crds: Sequence[Mapping[str, Any]]) -> None:
        """Create these CRDs (those that exist already are left as they are) and wait until each is Established."""
        for crd in crds:
            try:
                self.create(crd)
            except ApiError as error:
                if error.status != 409:  # 409: installed already (a session-mate, or a second API server's etcd)
                    raise
        for crd in crds:
            name = crd["metadata"]["name"]
            self._wait(lambda name=name: self._established(name), f"CRD {name} established", 60)

    def _established(self, name: str) -> bool:
        crd = self.get("apiextensions.k8s.io/v1/customresourcedefinitions", None, name) or {}
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in (crd.get("status") or {}).get("conditions") or ())

    # ------------------------------------------------------------------------------- client access

    @property
    def audit_log_path(self) -> pathlib.Path:
        return self.root / "audit.log"

    def configuration(self, token: str | None = None) -> kubernetes.client.Configuration:
        """An official-client Configuration: the admin's, or `token`'s (a ServiceAccount's)."""
        configuration = kubernetes.client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.api_key = {"authorization": f"Bearer {token or self.admin_token}"}
        return configuration

    def client(self, token: str | None = None) -> kubernetes.client.ApiClient:
        return kubernetes.client.ApiClient(self.configuration(token))

    def kubeconfig_dict(self, token: str | None = None, namespace: str = "default") -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "test", "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
            "current-context": "test",
        }

    def kubeconfig_for(self, token: str | None = None, name: str | None = None) -> pathlib.Path:
        """A kubeconfig file (mode 0600: it holds a token) for the admin or `token`."""
        path = self.root / f"kubeconfig-{name or hashlib.sha256((token or 'admin').encode()).hexdigest()[:12]}"
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(self.kubeconfig_dict(token)))
        return path

    @property
    def kubeconfig(self) -> pathlib.Path:
        return self.kubeconfig_for()

    # ---------------------------------------------------------------------------------- plain REST

    def request(self, method: str, target: str, body: Any = None, *, token: str | None = None,
                content_type: str = "application/json", query: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One request; the decoded answer, or ApiError. `token`: as that user (default the admin)."""
        if self._http is None:
            self._http = urllib3.PoolManager(ca_certs=str(self.ca_file), cert_reqs="CERT_REQUIRED", maxsize=4)
        url = self.url + target + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Authorization": f"Bearer {token or self.admin_token}", "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        response = self._http.request(method, url, body=data, headers=headers, timeout=30, retries=False)
        if response.status < 300 and query and str(query.get("watch", "")).lower() == "true":
            # A watch (give timeoutSeconds): its events, one JSON object a line, once the server ends it.
            return {"events": [json.loads(line) for line in response.data.splitlines() if line.strip()]}
        decoded = json.loads(response.data) if response.data else {}
        if response.status >= 300:
            raise ApiError(response.status, decoded)
        return decoded

    # ---------------------------------------------------------- object helpers (as support.clusters.kube.KubeApi)

    def create(self, obj: Mapping[str, Any], **query: Any) -> dict[str, Any]:
        namespace = (obj.get("metadata") or {}).get("namespace")
        return self.request("POST", api_path(path_of(obj), namespace), dict(obj), query=query or None)

    def get(self, path: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", api_path(path, namespace, name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list(self, path: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.request("GET", api_path(path, namespace))["items"]

    def patch(self, path: str, namespace: str | None, name: str, patch: Any, *,
              subresource: str | None = None, content_type: str = MERGE_PATCH) -> dict[str, Any]:
        return self.request("PATCH", api_path(path, namespace, name, subresource), patch, content_type=content_type)

    def delete(self, path: str, namespace: str | None, name: str, **options: Any) -> dict[str, Any]:
        return self.request("DELETE", api_path(path, namespace, name), options or None)

    # ------------------------------------------------------------------------------ identities

    def service_account_token(self, namespace: str, name: str, *, seconds: int = 3600) -> str:
        """A real token for ServiceAccount namespace/name from the TokenRequest API (the SA must exist)."""
        answer = self.request("POST", api_path("v1/serviceaccounts", namespace, name, "token"),
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                               "spec": {"expirationSeconds": seconds}})
        return answer["status"]["token"]

    def audit(self, username: str | None = None, since: int = 0) -> list[dict[str, Any]]:
        """The audit log's requests after position `since` (audit_mark()), of `username` if given: one entry a
        request, its last stage (a watch logs ResponseStarted when it opens, ResponseComplete when it ends)."""
        entries: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(FileNotFoundError), self.audit_log_path.open() as log:
            for line in log:
                if not line.endswith("\n"):
                    break  # being written by the server as we read: it belongs to a later call
                entry = json.loads(line)
                entries[entry["auditID"]] = entry  # keeps the first stage's place, the last stage's content
        return [e for e in list(entries.values())[since:] if username is None or e["user"]["username"] == username]

    def audit_mark(self) -> int:
        """The position of the audit log's end now, for audit(since=...)."""
        return len(self.audit())


def monitoring_crds() -> list[dict[str, Any]]:
    """prometheus-operator's CRDs, vendored from its v0.93.0 release (tests/fixtures, Apache-2.0)."""
    return [yaml.safe_load(path.read_text()) for path in sorted(MONITORING_CRDS.glob("monitoring.coreos.com_*.yaml"))]


def gateway_api_crds() -> list[dict[str, Any]]:
    """The Gateway API's standard channel (GatewayClass, Gateway, HTTPRoute, ReferenceGrant), vendored from its
    v1.6.1 release (tests/fixtures, Apache-2.0)."""
    return [yaml.safe_load(path.read_text()) for path in sorted(GATEWAY_API_CRDS.glob("*.yaml"))]


def cert_manager_crds() -> list[dict[str, Any]]:
    """cert-manager's Certificate, Issuer and ClusterIssuer, vendored from its v1.21.1 release (tests/fixtures,
    Apache-2.0). No controller runs: a test writes a Certificate's Secret as cert-manager would."""
    return [yaml.safe_load(path.read_text()) for path in sorted(CERT_MANAGER_CRDS.glob("*.yaml"))]


def install_gateway_api_crds(server: KubeApiServer) -> None:
    server.install_crds(gateway_api_crds())


def install_cert_manager_crds(server: KubeApiServer) -> None:
    server.install_crds(cert_manager_crds())


def install_monitoring_crds(server: KubeApiServer) -> None:
    """prometheus-operator's CRDs (monitoring_crds()) on this server, from now on."""
    server.install_crds(monitoring_crds())


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def token_id(token: str) -> str:
    """The audit log's credential-id of a ServiceAccount token (its JWT's jti): two holders of tokens of one
    ServiceAccount (two operator replicas) are told apart by it."""
    payload = token.split(".")[1]
    return "JTI=" + json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"]


def forbidden(entry: Mapping[str, Any]) -> bool:
    """An audit entry RBAC refused: the authorizer's "forbid", or RBAC's escalation prevention (a Role granting
    what its creator does not hold: authorized as a create, then refused). Not an admission refusal such as a
    namespace being terminated."""
    status = entry.get("responseStatus") or {}
    return ((entry.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
            or (status.get("code") == 403 and "not currently held" in (status.get("message") or "")))


def _rsa_key_pem() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _http_ok(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    import urllib.request

    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return response.status == 200
    except OSError:
        return False


def etcd_compact(etcd_url: str) -> int:
    """Compact etcd to its current revision (what the API server does every 5 min): a watch from an older
    resourceVersion then gets 410 Gone from an API server that reads etcd directly. Returns the revision."""
    http = urllib3.PoolManager()
    header = json.loads(http.request("POST", f"{etcd_url}/v3/kv/range",
                                     body=json.dumps({"key": base64.b64encode(b"/").decode()})).data)["header"]
    revision = int(header["revision"])
    answer = http.request("POST", f"{etcd_url}/v3/kv/compaction",
                          body=json.dumps({"revision": str(revision), "physical": True}))
    assert answer.status == 200, answer.data
    return revision


# ------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def kube_apiserver() -> Iterator[KubeApiServer]:
    """The real API server of this worker (one per xdist worker; about 3 s to start, see README "Test it")."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with KubeApiServer() as server:
        yield server


@pytest.fixture(scope="module")
def uncached_apiserver(kube_apiserver: KubeApiServer) -> Iterator[KubeApiServer]:
    """A second API server on the same etcd (as in an HA control plane) that serves watches from etcd itself
    (--watch-cache=false): after etcd_compact() a watch from an older resourceVersion gets 410 Gone at once,
    which the first server's watch cache would only give after 100 000s of events. It sends no bookmarks."""
    with KubeApiServer(etcd_url=kube_apiserver.etcd_url, service_account_key=kube_apiserver.service_account_key,
                       extra_args=("--watch-cache=false",)) as server:
        yield server


@pytest.fixture
def apiserver_namespace(kube_apiserver: KubeApiServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for this test. Deleted afterwards: with no namespace controller it stays Terminating,
    which keeps anything from being created in it again."""
    name = f"t-{secrets.token_hex(4)}"
    kube_apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube_apiserver.delete("v1/namespaces", None, name)
