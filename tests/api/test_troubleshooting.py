"""docs/guide/troubleshooting.md lists every reason the operator and the agent can set, and is generated."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from berth_api import crd_command, reasons
from berth_operator.engine import status

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "troubleshooting.md"
CAMEL_CASE = re.compile(r"^[A-Z][a-z]+(?:[A-Z][a-z0-9]*)*$")
# Calls whose string arguments are Event reasons: the agent's reporter.event and gc _event, its pre-flight
# warnings, the operator's GC events and its writes (Action's verb is the reason of write_events' Events).
# The value is the position of the reason among the call's arguments.
EVENT_CALLS = {"event": 0, "_event": 0, "PreflightWarning": 0, "GcEvent": 1, "Action": 0}


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _constants(node: ast.AST) -> set[str]:
    """Whole string literals in node (a part of an f-string is no reason: gc_result_events covers that one)."""
    if isinstance(node, ast.JoinedStr):
        return set()
    if isinstance(node, ast.Constant):
        return {node.value} if isinstance(node.value, str) and CAMEL_CASE.match(node.value) else set()
    return set().union(*(_constants(child) for child in ast.iter_child_nodes(node)))


def event_reasons_in(source_root: Path) -> set[str]:
    """CamelCase string literals passed to an Event-making call, or assigned to a variable named `reason`, in
    every module under source_root."""
    found: set[str] = set()
    for module in source_root.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _name(node.func) in EVENT_CALLS:
                position = EVENT_CALLS[_name(node.func)]
                if len(node.args) > position:
                    found |= _constants(node.args[position])
            elif isinstance(node, ast.Assign):
                targets = [t for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)]
                if any(t.id == "reason" for t in targets):
                    found |= _constants(node.value)
    return found


def gc_result_events() -> set[str]:
    """The operator posts GarbageCollection<Result> for each result a run can end with."""
    from typing import get_args

    from berth_api.gc import GcResult
    return {f"GarbageCollection{result}" for result in get_args(GcResult)}


def ready_reasons() -> set[str]:
    """The reasons engine.status.conditions writes as literals (Ready's and the idle ones)."""
    tree = ast.parse(Path(status.__file__).read_text(encoding="utf-8"))
    return {node.elts[1].value for node in ast.walk(tree)
            if isinstance(node, ast.Tuple) and len(node.elts) == 3
            and all(isinstance(e, ast.Constant) for e in node.elts[:2]) and node.elts[0].value in ("True", "False")}


def test_the_committed_page_is_generated() -> None:
    assert PAGE.read_text(encoding="utf-8") == reasons.render_troubleshooting(), (
        f"{PAGE.name} is out of date; regenerate it with `{reasons.REGENERATE_COMMAND}`")
    assert crd_command.main(["--troubleshooting", "--check", str(PAGE)]) == 0


def test_every_condition_reason_of_the_operator_is_documented_in_its_condition() -> None:
    assert [r.name for r in reasons.DEGRADED] == list(status.DEGRADED_REASONS)
    assert [r.name for r in reasons.PROGRESSING] == list(status.PROGRESSING_REASONS)
    assert ready_reasons() >= {"Available", "ScaledToZero", "AsExpected"}  # the scan sees the literals
    assert ready_reasons() - set(status.DEGRADED_REASONS) == {r.name for r in reasons.READY}


def test_every_event_reason_of_the_agent_is_documented() -> None:
    found = event_reasons_in(ROOT / "agent" / "berth_agent")
    assert {"ConfigApplied", "CertificateExpiresSoon", "UpstreamAuthFailed", "RegistryCrashLooping"} <= found
    assert found == {r.name for r in reasons.AGENT_EVENTS}


def test_every_event_reason_of_the_operator_is_documented() -> None:
    found = event_reasons_in(ROOT / "operator" / "berth_operator") | gc_result_events()
    # The operator also posts each new Degraded reason as a Warning: those are documented as conditions.
    found -= set(status.DEGRADED_REASONS)
    assert {"InvalidGarbageCollectionRequest", "Replaced", "Created"} <= found
    assert found == {r.name for r in reasons.OPERATOR_EVENTS}


def test_the_scan_finds_a_new_reason(tmp_path) -> None:
    (tmp_path / "m.py").write_text('async def f(r):\n    await r.event("BrandNewReason", "x", warning=True)\n'
                                   'reason = "OtherNewReason" if r else "ThirdNewReason"\n')
    assert event_reasons_in(tmp_path) == {"BrandNewReason", "OtherNewReason", "ThirdNewReason"}


def test_every_reason_has_a_meaning_and_a_remedy() -> None:
    for reason in reasons.CONDITION_REASONS + reasons.EVENT_REASONS:
        assert reason.meaning.strip() and reason.remedy.strip(), reason.name
        assert f"| `{reason.name}` |" in PAGE.read_text(encoding="utf-8")
