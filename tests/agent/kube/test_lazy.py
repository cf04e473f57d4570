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


CONFIG_SCRIPT = r"""
import os, sys
from berth_agent.kube import lazy as kube_lazy
assert kube_lazy.install()
from kubernetes import client, config
try:
    config.load_incluster_config()  # not in a pod here: the exception, from its own module
except config.ConfigException:
    pass
heavy = [m for m in sys.modules if m.split(".")[0] in ("oauthlib", "requests_oauthlib")
         or m.startswith("charset_normalizer.") or m in ("requests.sessions", "kubernetes.config.kube_config")]
assert not heavy, heavy
client.ApiClient(client.Configuration())  # the REST layer imports requests.utils, not requests' __init__
assert "requests.utils" in sys.modules and "requests.sessions" not in sys.modules
from berth_agent.core.deferred import loaded
assert not loaded("requests") and not loaded("charset_normalizer")  # requests.compat holds the stand-in, unused
assert callable(config.load_config) and callable(config.new_client_from_config)  # the rest, on first use
print("ok")
"""


def test_the_in_cluster_config_loads_no_kubeconfig_machinery():
    result = subprocess.run([sys.executable, "-c", CONFIG_SCRIPT], capture_output=True, text=True, timeout=60,
                            env={k: v for k, v in __import__("os").environ.items()
                                 if k not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


KUBECONFIG_SCRIPT = r"""
import warnings
warnings.simplefilter("error")  # requests warns when it finds no character detection: it must find it
from berth_agent.kube import lazy as kube_lazy
assert kube_lazy.install()
from kubernetes import config
assert callable(config.new_client_from_config)  # kube_config: requests-oauthlib, requests whole
import requests
assert requests.Session and requests.compat.chardet.__version__
print("ok")
"""


def test_the_kubeconfig_path_loads_requests_whole_as_before():
    result = subprocess.run([sys.executable, "-c", KUBECONFIG_SCRIPT], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
