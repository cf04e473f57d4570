"""core/deferred.py: a package whose __init__ runs on first use of a name it defines, in a fresh interpreter (the
agent process's situation: `berth-agent run` defers aiohttp before anything imports it)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import sys
from berth_agent.core import deferred
assert deferred.defer("aiohttp")
assert not deferred.defer("aiohttp")  # once
import aiohttp
from aiohttp import web
assert aiohttp.web is web
assert not deferred.loaded("aiohttp") and "aiohttp.client" not in sys.modules and "aiohttp.connector" not in sys.modules
assert aiohttp.__version__
session_class = aiohttp.ClientSession  # the first name the __init__ defines runs it
assert deferred.loaded("aiohttp") and sys.modules["aiohttp"] is aiohttp
from aiohttp.client import ClientSession
assert session_class is ClientSession and aiohttp.ClientTimeout and "ClientSession" in aiohttp.__all__
try:
    aiohttp.no_such_name
except AttributeError:
    pass
else:
    raise AssertionError("no AttributeError")
print("ok")
"""


def test_a_deferred_package_loads_submodules_alone_and_its_init_on_first_use():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_defer_does_nothing_once_the_package_is_imported():
    import aiohttp  # noqa: F401  (the test process has it)

    from berth_agent.core import deferred

    assert deferred.defer("aiohttp") is False
    assert deferred.loaded("aiohttp")


METRICS_SCRIPT = r"""
import sys
from berth_agent.core import deferred
assert deferred.defer("prometheus_client")
from berth_agent.core import health, metrics  # what the agent imports at its start
assert not deferred.loaded("prometheus_client") and "prometheus_client.exposition" not in sys.modules
metrics.reloads_total.inc()
import prometheus_client
from prometheus_client.registry import REGISTRY
text = prometheus_client.generate_latest(REGISTRY).decode()  # the first scrape runs the package's __init__
assert deferred.loaded("prometheus_client")
for name in ("berth_agent_reloads_total 1.0", "process_resident_memory_bytes", "python_gc_objects_collected_total",
             "python_info"):
    assert name in text, (name, text[:2000])
print("ok")
"""


def test_the_first_scrape_has_the_default_collectors_of_a_deferred_prometheus_client():
    result = subprocess.run([sys.executable, "-c", METRICS_SCRIPT], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
