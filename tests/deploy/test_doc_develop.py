"""What README.md and docs/guide/develop.md give as written: the regenerate commands, run in a scratch
directory with the installed console script, write exactly the committed CRD and pages; the README's Registry is
one both the CRD and the model accept."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from api.admission import admit
from berth_api import Registry
from support.common.doc_commands import REPO, block, commands


def test_the_regenerate_commands_write_the_committed_files(tmp_path: Path) -> None:
    script = shutil.which("berth-crd")
    assert script, "berth-crd is not installed: pip install -e ."
    written = []
    for command in commands("develop-regenerate"):
        target = re.fullmatch(r"berth-crd(?: --[a-z]+)? > (\S+)", command).group(1)
        (tmp_path / target).parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        assert (tmp_path / target).read_text() == (REPO / target).read_text(), f"{target} is not what {command} writes"
        written.append(target)
    assert written == ["crds/berth.dev_registries.yaml", "docs/reference/api.md", "docs/guide/troubleshooting.md"]


def test_the_readme_registry_is_admitted() -> None:
    registry = yaml.safe_load(block("readme-registry"))
    assert admit(registry) == []
    Registry.model_validate(registry)
