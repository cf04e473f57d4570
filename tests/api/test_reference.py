"""docs/reference/api.md: generated from the models, documenting every field of spec with what the CRD checks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pydantic import Field

from berth_api import crd, crd_command, reference
from berth_api.registry import Registry, RegistrySpec

REFERENCE_FILE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md"


def _spec_paths(node: dict, path: str) -> set[str]:
    """Every field path under spec, as the reference names them (lists with [], maps with .*)."""
    paths = set()
    for name, prop in (node.get("properties") or {}).items():
        field_path = f"{path}.{name}"
        paths.add(field_path)
        paths |= _spec_paths(reference._element(prop), field_path + reference._suffix(prop))
    return paths


def test_committed_reference_matches_the_models() -> None:
    assert REFERENCE_FILE.read_text(encoding="utf-8") == reference.render_reference(), (
        f"{REFERENCE_FILE.name} is out of date with agent/berth_api; regenerate it with "
        f"`{reference.REGENERATE_COMMAND}`"
    )


def test_every_spec_field_has_a_row_under_its_object() -> None:
    text = reference.render_reference()
    paths = _spec_paths(crd.registry_schema()["properties"]["spec"], "spec")
    assert len(paths) > 300  # the walk reached the nested objects, not only spec's own fields
    sections = {}
    for block in text.split("\n## `")[1:]:
        heading, _, body = block.partition("`\n")
        sections[heading] = body
    for path in paths:
        parent, _, name = path.rpartition(".")
        assert parent in sections, f"no section for {parent}"
        assert f"| `{name}`" in sections[parent], f"{path}: no row in the reference"


def test_validation_and_defaults_are_shown() -> None:
    text = reference.render_reference()
    assert "| `replicas` | integer | `1` | ≥ 0; ≤ 2147483647 |" in text
    assert "one of `2`, `3`" in text
    assert "set exactly one of value and valueFrom" in text  # a CEL rule's message, on spec.env[]


def test_a_field_added_without_regenerating_fails_the_check(tmp_path, monkeypatch, capsys) -> None:
    committed = tmp_path / "api.md"
    committed.write_text(reference.render_reference(), encoding="utf-8")
    assert crd_command.main(["--reference", "--check", str(committed)]) == 0

    class SpecWithNewField(RegistrySpec):
        addedField: int = Field(default=0, description="A field added without regenerating the reference.")

    class WithNewField(Registry):
        spec: SpecWithNewField = Field(description="The registry wanted.")

    monkeypatch.setattr(crd, "Registry", WithNewField)
    assert "| `addedField` | integer | `0` |" in reference.render_reference()
    assert crd_command.main(["--reference", "--check", str(committed)]) == 1
    assert reference.REGENERATE_COMMAND in capsys.readouterr().err


def test_the_console_script_checks_the_committed_reference() -> None:
    script = shutil.which("berth-crd")
    assert script, "berth-crd is not installed: pip install -e ."
    result = subprocess.run([script, "--reference", "--check", str(REFERENCE_FILE)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
