"""The agent asks the API server only for what every cluster Berth runs on serves: core Secrets,
ConfigMaps and Events, coordination.k8s.io Leases and its own Registry (berth.dev, installed with Berth). No
optional API (COSI, prometheus-operator): the COSI credentials come from a mounted Secret, never from a COSI
object. Were one added, the operator's rule (docs/decisions/0025-optional-apis.md) would have to apply here too:
this test names every API group the agent's code addresses, so adding one fails here first.
"""

from __future__ import annotations

import pathlib
import re

import berth_agent
from berth_api import GROUP

AGENT = pathlib.Path(berth_agent.__file__).parent
ALWAYS_SERVED = {"", "coordination.k8s.io", "events.k8s.io", "berth.dev"}
PATHS = re.compile(r"""["'](/apis?/[^"']*)""")
PLACEHOLDER = re.compile(r"\{+(\w+)\}+")


def groups() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for source in AGENT.rglob("*.py"):
        text = source.read_text()
        for literal in PATHS.findall(text):
            parts = literal.strip("/").split("/")
            group = "" if parts[0] == "api" else (parts[1] if len(parts) > 1 else "")
            named = PLACEHOLDER.fullmatch(group)
            if named:  # an f-string's group: only berth_api's own constant is known here
                group = GROUP if named.group(1) == "GROUP" else f"unknown {{{named.group(1)}}}"
            found.setdefault(group, set()).add(str(source.relative_to(AGENT)))
    return found


def test_the_agent_addresses_only_apis_every_cluster_serves():
    found = groups()
    assert {"", "coordination.k8s.io", GROUP} <= set(found)  # the scan sees the agent's paths at all
    assert set(found) <= ALWAYS_SERVED, {group: files for group, files in found.items() if group not in ALWAYS_SERVED}


def test_its_custom_objects_are_its_own_registry_only():
    templates = [(source, literal) for source in AGENT.rglob("*.py") for literal in PATHS.findall(source.read_text())
                 if literal.startswith("/apis/{")]
    assert [(str(source.relative_to(AGENT)), literal) for source, literal in templates] == [
        ("kube/api.py", "/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}")]  # berth.dev Registries only
    calls = 0
    for source in AGENT.rglob("*.py"):
        calls += len(re.findall(r"\bregistry_path\(", source.read_text())) if source.name != "api.py" else 0
    assert calls >= 3  # status writes, the GC's reads, the Registry list
