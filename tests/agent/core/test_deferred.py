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

