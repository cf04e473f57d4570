"""A single-node Kubernetes cluster on this machine for the `node` tier: pods really run.

    @pytest.mark.node
    def test_something(kube_node):  # fixtures registered in tests/conftest.py
        namespace = kube_node.namespace()
        kube_node.kubectl("apply", "-f", ...)

Components, each a process with its own data directory and log (docs/upstream.md#parts-real-node):
etcd and kube-apiserver (support.clusters.apiserver), kube-controller-manager and kube-scheduler
(support.clusters.control_plane),
containerd (Debian's, with runc and the CNI bridge plugin), the kubelet and kube-proxy (iptables mode). The pods'
network is a bridge (BRIDGE, GATEWAY); the `kubernetes` Service reaches the API server on 127.0.0.1 through a
DNAT rule; Service IPs are routed to the bridge, so the host reaches ClusterIPs as a node does. The images
(support.clusters.images) are built offline, cached, and imported before the kubelet starts.

Once per pytest run, whatever the number of xdist workers: the first worker that needs the node starts it under
a file lock in a directory the controller gave every worker (pytest_configure_node), and writes its state there;
the others attach to it. The controller (or the single process without xdist) tears it down at the end of the
session, by the process ids in that state: a worker may be gone by then. A machine-wide lock, held by a small
process for the node's life, keeps two runs from making two nodes (one bridge name, one kube-proxy's chains).

Teardown leaves nothing behind: the pods' tasks are killed, the kubelet and containerd stop (and their shims),
mounts under the node's directories are unmounted, the bridge, the route and our iptables rules go,
`kube-proxy --cleanup` removes its chains, changed sysctls are restored. The logs are kept in `logs_dir` (printed
at the end of the session), with the pods' logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import ipaddress
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from support.clusters import images
from support.clusters.apiserver import KubeApiServer
from support.clusters.control_plane import ControlPlane, cached_component, component_xz
from support.clusters.control_plane import skip_reason as control_plane_skip_reason
from support.common.ports import free_port

BRIDGE = "berth0"
POD_CIDR = "10.88.0.0/16"
GATEWAY = "10.88.0.1"
SERVICE_CIDR = "10.96.0.0/16"  # support.clusters.apiserver's --service-cluster-ip-range
KUBERNETES_SERVICE_IP = "10.96.0.1"
RULE_COMMENT = "berth-test-node"
MACHINE_LOCK = pathlib.Path("/run/lock/berth-test-node.lock")
CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
CTR = shutil.which("ctr") or "/usr/bin/ctr"
CNI_BIN = pathlib.Path("/usr/lib/cni")
RUN_DIR_KEY = "berth_node_run_dir"
STATE_NAME = "state.json"
# The kubelet's own chains (pkg/kubelet/kubelet_network_linux.go): made at its start, in both families, never
# removed by it.
KUBELET_CHAINS = {"mangle": ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"), "nat": ("KUBE-KUBELET-CANARY",),
                  "filter": ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY")}
SYSCTLS = {"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"}
# What the kubelet sets at its start (pkg/kubelet/cm, setupKernelTunables, protectKernelDefaults false):
# restored at teardown, the machine is shared.
KUBELET_SYSCTLS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
                   "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")


def skip_reason() -> str | None:
    """Why this machine cannot run a node, or None. CI has all of it (tests/run installs the packages)."""
    if os.geteuid() != 0:
        return "the node tier needs root (containerd, the kubelet, mounts, iptables)"
    if (reason := control_plane_skip_reason()) is not None:
        return reason
    for name in ("kubelet", "kube-proxy"):
        if component_xz(name) is None:
            return f"no {name}-v1.36.1.xz beside the kube-apiserver's (../shared/k8s has them)"
    missing = [tool for tool in (CONTAINERD, CTR, "runc", "iptables", "ip", "kubectl") if shutil.which(tool) is None]
    missing += [str(CNI_BIN / plugin) for plugin in ("bridge", "host-local", "portmap")
                if not (CNI_BIN / plugin).exists()]
    missing += images.missing_tools()
    if missing:
        return f"missing for the node tier: {', '.join(missing)} (tests/run's apt-get line installs them)"
    cgroup = pathlib.Path("/sys/fs/cgroup")
    if not (cgroup / "memory").is_dir() and not (cgroup / "cgroup.controllers").is_file():
        return "no cgroup memory controller at /sys/fs/cgroup"
    if subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True).returncode != 0:
        return "iptables cannot list the nat table here"
    return None


def node_name() -> str:
    """The kubelet's name: must resolve to a loopback address (the API server reaches the kubelet by it)."""
    name = socket.gethostname()
    try:
        if ipaddress.ip_address(socket.gethostbyname(name)).is_loopback:
            return name
    except OSError:
        pass
    return "localhost"


# ------------------------------------------------------------------------------------------- certificates

def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate(subject: x509.Name, key, issuer: x509.Name, issuer_key, *, ca: bool = False,
                 usage: x509.ObjectIdentifier | None = None) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                        critical=True)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def write_client_pki(directory: pathlib.Path, node: str) -> dict[str, pathlib.Path]:
    """A client CA for the API server, the kubelet's client certificate (system:node:NAME in system:nodes) and
    the API server's client certificate towards kubelets (system:masters: logs and exec)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "berth-test-client-ca")])
    files = {"ca": directory / "client-ca.crt"}
    files["ca"].write_bytes(_certificate(ca_name, ca_key, ca_name, ca_key, ca=True))
    for role, common_name, group in (("kubelet", f"system:node:{node}", "system:nodes"),
                                     ("apiserver-kubelet", "kube-apiserver-kubelet-client", "system:masters")):
        key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, group),
                             x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        files[role] = directory / f"{role}.crt"
        files[role].write_bytes(_certificate(subject, key, ca_name, ca_key, usage=x509.ExtendedKeyUsageOID.CLIENT_AUTH))
        files[f"{role}-key"] = directory / f"{role}.key"
        files[f"{role}-key"].touch(mode=0o600)
        files[f"{role}-key"].write_bytes(_pem_key(key))
    return files


# ---------------------------------------------------------------------------------------------- the node

def _run(*args: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result


@dataclasses.dataclass
class NodeState:
    """What another process needs to use the node, and to tear it down."""

    name: str
    root: str  # the node's own directory (containerd, kubelet, kube-proxy, CNI)
    logs_dir: str
    api_url: str
    api_ca: str
    admin_token: str
    kubeconfig: str
    kubelet_root: str
    containerd_socket: str
    images: dict[str, str]  # role -> reference pods use
    processes: list[list[Any]] = dataclasses.field(default_factory=list)  # [name, pid, log path], start order
    dirs: list[str] = dataclasses.field(default_factory=list)  # removed at teardown (after the logs are copied)
    sysctls: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> value before we set it
    iptables: list[list[str]] = dataclasses.field(default_factory=list)  # our rules, as `iptables -A` args
    routes: list[str] = dataclasses.field(default_factory=list)
    bridge: bool = False
    kube_proxy: str = ""  # its binary, for --cleanup
    kubelet_port: int = 0
    kubelet_chains: bool = False  # made by our kubelet (absent before it started): removed at teardown
    image_seconds: float = 0.0
    start_seconds: float = 0.0


class NodeStarter:
    """Starts every component in order, recording each in `state` as it goes (so a failed start is torn down
    by the same code as a finished run)."""

    def __init__(self, state_path: pathlib.Path):
        self.state_path = state_path
        self.name = node_name()
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="berth-node-"))
        self.logs = pathlib.Path(tempfile.mkdtemp(prefix="berth-node-logs-"))
        self.state = NodeState(name=self.name, root=str(self.root), logs_dir=str(self.logs), api_url="", api_ca="",
                               admin_token="", kubeconfig="", kubelet_root=str(self.root / "kubelet"),
                               containerd_socket=str(self.root / "containerd" / "containerd.sock"), images={},
                               dirs=[str(self.root)])

    def save(self) -> None:
        temp = self.state_path.with_suffix(".partial")
        temp.write_text(json.dumps(dataclasses.asdict(self.state)))
        os.replace(temp, self.state_path)

    def start(self) -> NodeState:
        began = time.monotonic()
        self._machine_lock()
        built = images.build_all()
        self.state.images = {role: image.name for role, image in built.items()}
        self.state.image_seconds = time.monotonic() - began
        self.save()
        pki = write_client_pki(self.root / "pki", self.name)
        self._network()
        api = self._apiserver(pki)
        plane = ControlPlane(api)
        self.state.dirs.append(str(plane.root))
        self.save()
        try:
            plane.start()
        finally:
            self._adopt(plane.processes, plane.root)
        self._identities(api)
        self._containerd(built)
        self._kubelet(api, pki)
        self._kube_proxy(api)
        self.state.start_seconds = time.monotonic() - began
        self.save()
        return self.state

    # ---------------------------------------------------------------------------------- processes

    def _adopt(self, processes: dict[str, subprocess.Popen], root: pathlib.Path) -> None:
        for name, process in processes.items():
            self.state.processes.append([name, process.pid, str(root / f"{name}.log")])
        self.save()

    def _spawn(self, name: str, args: list[str], **kwargs: Any) -> subprocess.Popen:
        log_path = self.root / f"{name}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True, **kwargs)
        self.state.processes.append([name, process.pid, str(log_path)])
        self.save()
        return process

    def _wait(self, predicate: Callable[[], bool], what: str, timeout: float,
              watch: subprocess.Popen | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if watch is not None and watch.poll() is not None:
                raise RuntimeError(f"{what}: {watch.args[0]} exited {watch.returncode}\n{self._log_tails()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}\n{self._log_tails()}")
            time.sleep(0.2)

    def _log_tails(self) -> str:
        return "\n".join(f"--- {name}\n{pathlib.Path(log).read_text(errors='replace')[-2500:]}"
                         for name, _, log in self.state.processes if pathlib.Path(log).is_file())

    def _machine_lock(self) -> None:
        """Held by a `sleep` for the node's life: a second run on this machine waits for this one's teardown."""
        MACHINE_LOCK.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(MACHINE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + 1800
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"another test node holds {MACHINE_LOCK} for 30 min") from None
                    time.sleep(2)
            self._spawn("machine-lock", ["sleep", "infinity"], pass_fds=(fd,))
        finally:
            os.close(fd)

    # ------------------------------------------------------------------------------------- network

    def _network(self) -> None:
        for name, value in SYSCTLS.items():
            self.state.sysctls[name] = _run("sysctl", "-n", name).stdout.strip()
            _run("sysctl", "-q", "-w", f"{name}={value}")
        self.save()
        if _run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            raise RuntimeError(f"bridge {BRIDGE} exists: a node left behind by a run that was killed; "
                               f"`ip link delete {BRIDGE}` after checking nothing uses it")
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        self.state.bridge = True
        self.save()
        _run("ip", "addr", "add", f"{GATEWAY}/16", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        # Pods reach the API server on 127.0.0.1 through the DNAT below: allowed for traffic from the bridge.
        _run("sysctl", "-q", "-w", f"net.ipv4.conf.{BRIDGE}.route_localnet=1")
        _run("ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE)
        self.state.routes.append(SERVICE_CIDR)
        self.save()

    def _rule(self, *args: str) -> None:
        rule = [*args, "-m", "comment", "--comment", RULE_COMMENT]
        table, chain, *spec = rule
        _run("iptables", "-t", table, "-I", chain, "1", *spec)
        self.state.iptables.append(rule)
        self.save()

    # ------------------------------------------------------------------------------ control plane

    def _apiserver(self, pki: dict[str, pathlib.Path]) -> KubeApiServer:
        api = KubeApiServer(extra_args=(
            f"--client-ca-file={pki['ca']}",
            f"--kubelet-client-certificate={pki['apiserver-kubelet']}",
            f"--kubelet-client-key={pki['apiserver-kubelet-key']}",
            "--kubelet-preferred-address-types=Hostname,InternalIP",
        ))
        self.state.dirs.append(str(api.root))
        self.save()
        try:
            api.start()
        finally:
            self._adopt({name: process for name, process in
                         zip(("etcd", "kube-apiserver"), [p for p, _ in api._processes], strict=False)}, api.root)
        self.state.api_url, self.state.api_ca, self.state.admin_token = api.url, str(api.ca_file), api.admin_token
        self.state.kubeconfig = str(api.kubeconfig)
        self._rule("nat", "PREROUTING", "-i", BRIDGE, "-p", "tcp", "-d", KUBERNETES_SERVICE_IP, "--dport", "443",
                   "-j", "DNAT", "--to-destination", f"127.0.0.1:{api.port}")
        return api

    def _identities(self, api: KubeApiServer) -> None:
        # The kubelet as RBAC's system:node role allows it (the API server here authorizes with RBAC alone,
        # not the Node authorizer: support.clusters.apiserver fixes --authorization-mode).
        api.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": "berth-test:nodes"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]})
        # kube-proxy as kubeadm runs it: a ServiceAccount bound to system:node-proxier.
        api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "kube-proxy", "namespace": "kube-system"}})
        api.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": "berth-test:kube-proxy"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "system:node-proxier"},
                    "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy", "namespace": "kube-system"}]})

    # ---------------------------------------------------------------------------------- containerd

    def _containerd(self, built: dict[str, images.Image]) -> None:
        base = self.root / "containerd"
        cni_conf = self.root / "cni" / "net.d"
        cni_conf.mkdir(parents=True)
        (self.root / "cni" / "ipam").mkdir()
        (cni_conf / "10-berth.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "berth-test",
            "plugins": [
                {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR, "gateway": GATEWAY}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.root / "cni" / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}))
        (base / "certs.d").mkdir(parents=True)
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{base / 'root'}"
state = "{base / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.state.containerd_socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"
[{cri}]
  sandbox_image = "{built['pause'].name}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
  [{cri}.registry]
    config_path = "{base / 'certs.d'}"
"""
        (base / "config.toml").write_text(config)
        process = self._spawn("containerd", [CONTAINERD, "--config", str(base / "config.toml")])
        self._wait(lambda: _run(CTR, "--address", self.state.containerd_socket, "version",
                                check=False).returncode == 0, "containerd", 60, process)
        for image in built.values():
            _run(CTR, "--address", self.state.containerd_socket, "-n", "k8s.io", "images", "import",
                 str(image.archive), timeout=300)

    # ------------------------------------------------------------------------------------- kubelet

    def _kubelet(self, api: KubeApiServer, pki: dict[str, pathlib.Path]) -> None:
        for name in KUBELET_SYSCTLS:
            self.state.sysctls.setdefault(name, _run("sysctl", "-n", name).stdout.strip())
        self.save()
        self.state.kubelet_chains = _run("iptables", "-t", "filter", "-S", "KUBE-FIREWALL", check=False).returncode != 0
        kubelet_dir = self.root / "kubelet-config"
        kubelet_dir.mkdir()
        kubeconfig = kubelet_dir / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": api.url, "certificate-authority": str(api.ca_file)}}],
            "users": [{"name": "kubelet", "user": {"client-certificate": str(pki["kubelet"]),
                                                   "client-key": str(pki["kubelet-key"])}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "kubelet"}}],
            "current-context": "test"}))
        resolv = kubelet_dir / "resolv.conf"
        resolv.write_text("nameserver 127.0.0.1\n")  # no cluster DNS: tests use Service IPs
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "127.0.0.1", "port": free_port(), "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(), "readOnlyPort": 0,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki["ca"])}},
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.state.containerd_socket}",
            "cgroupDriver": "cgroupfs", "failSwapOn": False,
            # Some machines of this kind boot with cgroup v1 (hybrid): the kubelet refuses it unless told.
            "failCgroupV1": False,
            # A busy shared disk must not evict pods nor delete the imported images.
            "evictionHard": {"memory.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%",
                             "imagefs.available": "0%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "podPidsLimit": -1, "resolvConf": str(resolv), "podLogsDir": str(self.root / "pod-logs"),
            "serializeImagePulls": False,
        }
        (kubelet_dir / "config.yaml").write_text(yaml.safe_dump(config))
        self.state.kubelet_port = config["port"]
        process = self._spawn("kubelet", [
            str(cached_component("kubelet")), f"--config={kubelet_dir / 'config.yaml'}",
            f"--kubeconfig={kubeconfig}", f"--node-ip={GATEWAY}", f"--root-dir={self.state.kubelet_root}",
            f"--cert-dir={kubelet_dir / 'pki'}", f"--hostname-override={self.name}",
            "--v=1",  # logs each failed probe ("Probe failed", with its output): a dropped pod is then explained
        ])
        self._wait(lambda: self._node_ready(api), f"node {self.name} Ready", 120, process)

    def _node_ready(self, api: KubeApiServer) -> bool:
        node = api.get("v1/nodes", None, self.name) or {}
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in (node.get("status") or {}).get("conditions") or ())

    # ---------------------------------------------------------------------------------- kube-proxy

    def _kube_proxy(self, api: KubeApiServer) -> None:
        token = api.service_account_token("kube-system", "kube-proxy", seconds=86400)
        kubeconfig = api.kubeconfig_for(token, name="kube-proxy")
        directory = self.root / "kube-proxy"
        directory.mkdir()
        health, metrics = free_port(), free_port()
        (directory / "config.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "iptables", "clusterCIDR": POD_CIDR, "hostnameOverride": self.name,
            "nodePortAddresses": [f"{GATEWAY}/32"], "iptables": {"localhostNodePorts": False},
            # All 0: leave the machine's conntrack sysctls alone.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "oomScoreAdj": 0, "clientConnection": {"kubeconfig": str(kubeconfig)},
            "healthzBindAddress": f"127.0.0.1:{health}", "metricsBindAddress": f"127.0.0.1:{metrics}",
        }))
        binary = cached_component("kube-proxy")
        self.state.kube_proxy = str(binary)
        process = self._spawn("kube-proxy", [str(binary), f"--config={directory / 'config.yaml'}"])
        self._wait(lambda: _http_ok(f"http://127.0.0.1:{health}/healthz"), "kube-proxy /healthz", 60, process)


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


# ------------------------------------------------------------------------------------------- teardown

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


def _stop_pid(pid: int, timeout: float = 15) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _shim_pids(socket_path: str) -> list[int]:
    """containerd's shims for this node: daemons of their own, found by the socket their command line names."""
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and socket_path.encode() in argv:
                found.append(int(proc.name))
    return found


def _mounts_under(roots: list[str]) -> list[str]:
    points = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if any(point == root or point.startswith(root.rstrip("/") + "/") for root in roots):
            points.append(point)
    return points


def teardown(state: NodeState) -> list[str]:
    """Stop and remove everything `state` records; returns what could not be cleaned (empty: all of it)."""
    problems: list[str] = []
    processes = {name: pid for name, pid, _ in state.processes}
    socket_path = state.containerd_socket
    if "containerd" in processes and _alive(processes["containerd"]):
        tasks = _run(CTR, "--address", socket_path, "-n", "k8s.io", "tasks", "ls", "-q", check=False).stdout.split()
        for task in tasks:
            _run(CTR, "--address", socket_path, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", task, check=False)
    for name in ("kube-proxy", "kubelet"):
        if name in processes:
            _stop_pid(processes[name])
    if "containerd" in processes:
        _stop_pid(processes["containerd"])
    for pid in _shim_pids(socket_path):
        _stop_pid(pid, timeout=5)
    for name, pid, _ in reversed(state.processes):
        if name not in ("kube-proxy", "kubelet", "containerd", "machine-lock"):
            _stop_pid(pid)
    for point in sorted(_mounts_under([state.root]), key=len, reverse=True):
        if _run("umount", point, check=False).returncode != 0:
            _run("umount", "-l", point, check=False)
    if state.kube_proxy:
        _run(state.kube_proxy, "--cleanup", check=False)
    for rule in reversed(state.iptables):
        table, chain, *spec = rule
        if _run("iptables", "-t", table, "-D", chain, *spec, check=False).returncode != 0:
            problems.append(f"iptables rule {rule}")
    if state.kubelet_chains:
        _remove_kubelet_chains()
    for route in state.routes:
        _run("ip", "route", "del", route, "dev", BRIDGE, check=False)
    if state.bridge and _run("ip", "link", "delete", BRIDGE, check=False).returncode != 0:
        problems.append(f"bridge {BRIDGE}")
    for name, value in state.sysctls.items():
        _run("sysctl", "-q", "-w", f"{name}={value}", check=False)
    _keep_logs(state)
    if left := _mounts_under([state.root]):
        problems.append(f"mounts left: {left}")
    else:
        for directory in state.dirs:
            shutil.rmtree(directory, ignore_errors=True)
    if "machine-lock" in processes:  # last: the next run may start once all of the above is gone
        _stop_pid(processes["machine-lock"])
    return problems


def _remove_kubelet_chains() -> None:
    for command in ("iptables", "ip6tables"):
        for hook in ("INPUT", "OUTPUT"):
            while _run(command, "-t", "filter", "-D", hook, "-j", "KUBE-FIREWALL", check=False).returncode == 0:
                pass
        for table, chains in KUBELET_CHAINS.items():
            for chain in chains:
                _run(command, "-t", table, "-F", chain, check=False)
                _run(command, "-t", table, "-X", chain, check=False)


def _keep_logs(state: NodeState) -> None:
    logs = pathlib.Path(state.logs_dir)
    logs.mkdir(parents=True, exist_ok=True)
    for name, _, log in state.processes:
        if log and pathlib.Path(log).is_file():
            shutil.copy(log, logs / f"{name}.log")
    pods = pathlib.Path(state.root) / "pod-logs"
    if pods.is_dir():
        shutil.copytree(pods, logs / "pods", dirs_exist_ok=True, symlinks=False,
                        ignore_dangling_symlinks=True)


# --------------------------------------------------------------------------------------- using the node

class Node:
    """The running node as a test sees it: an admin client of its API server, kubectl, the host's view of the
    kubelet's pod directories."""

    def __init__(self, state: NodeState):
        self.state = state
        self.name = state.name
        self.images = state.images
        api = KubeApiServer.__new__(KubeApiServer)  # a client of the running server, not a second server
        api.url, api.ca_file, api.admin_token = state.api_url, pathlib.Path(state.api_ca), state.admin_token
        api.root, api._http, api._processes = pathlib.Path(state.root), None, []
        self.api = api
        self.kubeconfig = state.kubeconfig
        self.kubelet_root = pathlib.Path(state.kubelet_root)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        result = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args], input=input,
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    def tag_image(self, source: str, tag: str) -> None:
        """Another name for an imported image (an operator upgrade to "a new image" that is this checkout's)."""
        _run(CTR, "--address", self.state.containerd_socket, "-n", "k8s.io", "images", "tag", "--force", source, tag)

    def namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{os.urandom(4).hex()}"
        self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    def delete_namespace(self, name: str, timeout: float = 300) -> float:
        """Delete a test's namespace and wait until its pods are gone (their containers stopped, so the tier's
        memory does not add up over the run), then the PersistentVolumes bound to its claims (cluster-scoped,
        Retain: the namespace does not take them). Returns the seconds it took."""
        began = time.monotonic()
        self.keep_pod_logs(name)  # the kubelet removes a deleted pod's logs with it
        self.api.delete("v1/namespaces", None, name)
        deadline = began + timeout
        while left := self.api.list("v1/pods", name):
            self.keep_pod_logs(name)  # and what they said while stopping
            if time.monotonic() > deadline:
                phases = {pod["metadata"]["name"]: pod["status"].get("phase") for pod in left}
                raise RuntimeError(f"namespace {name}: pods still there after {timeout} s: {phases}")
            time.sleep(1)
        for volume in self.api.list("v1/persistentvolumes"):
            if ((volume["spec"].get("claimRef") or {}).get("namespace")) == name:
                self.api.delete("v1/persistentvolumes", None, volume["metadata"]["name"])
        return time.monotonic() - began

    def keep_pod_logs(self, namespace: str) -> None:
        """Copy the namespace's pod logs (podLogsDir: NAMESPACE_POD_UID/CONTAINER/N.log) into the kept logs."""
        kept = pathlib.Path(self.state.logs_dir) / "pods"
        for directory in (pathlib.Path(self.state.root) / "pod-logs").glob(f"{namespace}_*"):
            with contextlib.suppress(OSError, shutil.Error):  # a log rotated or removed meanwhile
                shutil.copytree(directory, kept / directory.name, dirs_exist_ok=True)

    def pod_volume(self, pod_uid: str, kind: str, volume: str) -> pathlib.Path:
        """A pod's volume on the host, as the kubelet mounts it (kind: 'secret', 'empty-dir', 'projected')."""
        return self.kubelet_root / "pods" / pod_uid / "volumes" / f"kubernetes.io~{kind}" / volume

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{pathlib.Path(log).read_text(errors='replace')[-3000:]}"
                         for name, _, log in self.state.processes if log and pathlib.Path(log).is_file())


def _read_state(path: pathlib.Path) -> NodeState | str | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data["failed"] if "failed" in data else NodeState(**data)


@contextlib.contextmanager
def _flock(path: pathlib.Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_dir(config: pytest.Config) -> pathlib.Path:
    workerinput = getattr(config, "workerinput", None)
    return pathlib.Path(workerinput[RUN_DIR_KEY] if workerinput else config.stash[_RUN_DIR])


_RUN_DIR = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller, or the one process without xdist
        config.stash[_RUN_DIR] = tempfile.mkdtemp(prefix="berth-node-run-")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # xdist: the controller hands each worker the run's directory
    node.workerinput[RUN_DIR_KEY] = node.config.stash[_RUN_DIR]


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return  # a worker: the controller tears down once every worker is done
    directory = pathlib.Path(config.stash[_RUN_DIR])
    state = _read_state(directory / STATE_NAME)
    if isinstance(state, NodeState):
        problems = teardown(state)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"test node: started in {state.start_seconds:.1f} s (images "
                                f"{state.image_seconds:.1f} s); logs kept in {state.logs_dir}")
            for problem in problems:
                reporter.write_line(f"test node teardown left: {problem}", red=True)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def kube_node(request: pytest.FixtureRequest) -> Node:
    """The run's node, started by the first test that asks (in whichever worker)."""
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    directory = run_dir(request.config)
    state_path = directory / STATE_NAME
    with _flock(directory / "lock"):
        state = _read_state(state_path)
        if state is None:
            starter = NodeStarter(state_path)
            try:
                state = starter.start()
            except BaseException as error:
                problems = teardown(starter.state)
                state_path.write_text(json.dumps({"failed": f"{error}"[-6000:]}))
                raise RuntimeError(f"the test node did not start (cleanup left {problems or 'nothing'})") from error
        if isinstance(state, str):
            pytest.fail(f"the test node did not start:\n{state}")
    return Node(state)
