"""The agent asks the API server only for what every cluster Berth runs on serves (issue 26, part 2): core Secrets,
ConfigMaps and Events, coordination.k8s.io Leases and its own Registry (berth.dev, installed with Berth). No
optional API (COSI, prometheus-operator): the COSI credentials come from a mounted Secret, never from a COSI
object. Were one added, the operator's rule (docs/design.md §4.3, "Optional APIs") would have to apply here too:
this test names every API group the agent's code addresses, so adding one fails here first.
"""

from __future__ import annotations

import pathlib
import re

import berth_agent

AGENT = pathlib.Path(berth_agent.__file__).parent
ALWAYS_SERVED = {"", "coordination.k8s.io", "events.k8s.io", "berth.dev"}
PATHS = re.compile(r"""["'](/apis?/[^"'{]*)""")


def groups() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for source in AGENT.rglob("*.py"):
        text = source.read_text()
        for literal in PATHS.findall(text):
            parts = literal.strip("/").split("/")
            group = "" if parts[0] == "api" else (parts[1] if len(parts) > 1 else "")
            found.setdefault(group, set()).add(str(source.relative_to(AGENT)))
        if "CustomObjectsApi" in text:
            found.setdefault("berth.dev", set()).add(str(source.relative_to(AGENT)))
    return found


def test_the_agent_addresses_only_apis_every_cluster_serves():
    found = groups()
    assert "" in found and "coordination.k8s.io" in found  # the scan sees the agent's paths at all
    assert set(found) <= ALWAYS_SERVED, {group: files for group, files in found.items() if group not in ALWAYS_SERVED}


def test_its_custom_objects_are_its_own_registry_only():
    calls = 0
    for source in AGENT.rglob("*.py"):
        text = source.read_text()
        for group in re.findall(r"_custom_object(?:_status)?\(\s*([A-Za-z_.]+)", text):
            calls += 1
            assert group == "GROUP", f"{source.relative_to(AGENT)}: a custom object of group {group}"
    assert calls >= 3  # status writes, the GC's reads, the Registry list
