"""kube_lazy: the official client, loaded lazily, in a fresh interpreter (the agent process's situation)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import sys, re
from berth_agent.kube import lazy as kube_lazy
assert kube_lazy.install()
from kubernetes import client
configuration = client.Configuration()
configuration.host = sys.argv[1]
api = client.ApiClient(configuration)
core = client.CoreV1Api(api)
core.create_namespaced_secret("default", client.V1Secret(metadata=client.V1ObjectMeta(name="s1"),
                                                         string_data={"k": "v"}))
names = [s.metadata.name for s in core.list_namespaced_secret("default").items]
assert "s1" in names, names
try:
    core.read_namespaced_secret("missing", "default")
except client.exceptions.ApiException as exc:
    assert exc.status == 404
else:
    raise AssertionError("no 404")
loaded = [m for m in sys.modules if m.startswith("kubernetes.client.models.")]
assert len(loaded) < 40, len(loaded)
rss = int(re.search(r"VmRSS:\s+(\d+)", open("/proc/self/status").read()).group(1)) // 1024
print("ok", len(loaded), rss)
"""


def test_the_lazy_client_talks_to_an_api_server_loading_few_models(kube_api):
    result = subprocess.run([sys.executable, "-c", SCRIPT, kube_api.url], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok ")


def test_install_does_nothing_once_kubernetes_is_imported():
    import kubernetes.client  # noqa: F401  (the test process has the full client)

    from berth_agent.kube import lazy as kube_lazy

    assert kube_lazy.install() is False
