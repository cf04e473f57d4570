"""A port another process already holds on a pod's address (the clean-clone CI at 02b99c9).

Test pods on one machine share its loopback addresses: a replica on 127.0.0.2:PORT can meet another xdist
worker's pod there, which a bind to 127.0.0.1:0 (the old free_port) never sees. The pod then cannot listen, and
whatever answers on its address is the stranger: the CI's token test pushed to another test's pull-through cache
and got `unsupported`. In a cluster each pod has its own address, so this is the test support's to prevent: a
free port is free on every loopback address tests use, and a pod is serving only on a listener of its own. The
product's part is checked too: the agent's /readyz does not call such a pod ready.
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading

import pytest

from support.common.polling import wait_for
from support.common.ports import LOOPBACK_HOSTS, NODE_PORTS_LOW, first_free, free_port, wait_listening, worker_slice
from support.registries.pod import filesystem_spec, on_distribution
from support.registries.registry import make_oci_image, pull_image, push_image, registry_binaries

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

HOST = "127.0.0.2"


def test_a_port_in_use_on_another_loopback_address_is_not_free():
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))  # what the old free_port checked: free on 127.0.0.1
        other = free_port()
        assert first_free([port, other], LOOPBACK_HOSTS) == other
        assert first_free([port, port, other], LOOPBACK_HOSTS[1:]) == other


def test_ports_are_picked_below_the_ephemeral_range_one_slice_per_worker():
    """Nothing that binds port 0 or connects out is handed a picked port; two workers never pick the same one."""
    slices = [worker_slice(f"gw{index}", 4, 32768) for index in range(4)]
    assert all(len(ports) >= 2000 for ports in slices)
    assert all(ports.stop <= min(32768, NODE_PORTS_LOW) and ports.start >= 1024 for ports in slices)
    assert sum(len(set(a) & set(b)) for a in slices for b in slices if a is not b) == 0
    assert worker_slice(None, 1, 32768) == range(20000, 30000)
    assert worker_slice("gw0", 2, 20000).stop <= 20000  # a machine whose ephemeral range starts lower
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    picks = [free_port() for _ in range(50)]
    assert all(port < low for port in picks) and len(set(picks)) == 50, picks


def test_a_server_is_up_only_once_its_own_process_listens():
    """wait_listening (redis-server, Prometheus, Azurite, fake-gcs-server): a stranger on the port does not pass
    for the server; an exit before listening is said; the server's own listener is."""
    port = free_port()
    listen = (f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
              "print('up', flush=True); time.sleep(30)")
    server = subprocess.Popen([sys.executable, "-c", listen], stdout=subprocess.PIPE)
    try:
        wait_listening(server, port, "the server", timeout=20)
    finally:
        server.kill()
        server.wait()
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", port))
        stranger.listen()
        idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            with pytest.raises(TimeoutError, match="someone else listens there"):
                wait_listening(idle, port, "the server", timeout=0.5)
        finally:
            idle.kill()
            idle.wait()
    failing = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match="exited with 3 before it listened"):
        wait_listening(failing, port, "the server", timeout=20)


class _Stranger(http.server.ThreadingHTTPServer):
    """Another test's registry on the pod's address: GET /v2/ answers 200, an upload is refused `UNSUPPORTED` as
    a pull-through cache refuses it."""

    def __init__(self, port: int) -> None:
        super().__init__((HOST, port), _StrangerHandler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _StrangerHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._answer(200, b"{}")

    def do_POST(self) -> None:  # noqa: N802
        self._answer(405, b'{"errors":[{"code":"UNSUPPORTED","message":"The operation is unsupported."}]}')

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("dist", registry_binaries())
def test_a_pod_whose_address_a_stranger_holds_is_not_serving_until_it_listens(pod, dist, tmp_path):
    pod.listen_host = HOST
    stranger = _Stranger(pod.port)
    try:
        pod.write_registry_file(on_distribution(filesystem_spec(pod.port, http={"addr": f"{HOST}:{pod.port}"}),
                                                dist[0]))
        pod.start_agent()
        pod.start_supervisor()
        # The agent's pre-flight refuses the first config, naming the field (so nothing of the pod's starts).
        failed = wait_for(lambda: pod.actions("failed"), what=lambda: f"the refusal\n{pod.agent_log_text()}")[0]
        assert f"spec.http.addr: cannot listen on {HOST}:{pod.port}" in failed["error"], failed
        assert not pod.serving(), "the stranger's answer was taken for the pod's"
        assert pod.health("/readyz") != 200, "the agent calls a pod ready that cannot listen"
    finally:
        stranger.close()
    pod.wait_serving(timeout=60)  # the port is free: the agent's retry applies the config by itself
    pushed = make_oci_image(tmp_path / "push", layer_size=64 * 1024)
    push_image(pushed, pod.host, "demo/app:1")  # the push the CI's token test made, now to the pod's registry
    assert pull_image(pod.host, "demo/app:1", tmp_path / "pull").blobs == pushed.blobs
