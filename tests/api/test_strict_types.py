"""File mode is as strict as the API server: the models take JSON types exactly, as the CRD does, and every
Registry in tests/api/ that the CRD refuses is refused by `berth-agent render` (exit 2).

pydantic in its default (lax) mode turns `enabled: 'yes'` into True and `replicas: "2"` into 2; the API server
refuses both (the openAPIV3Schema says boolean, integer). The models are strict, so a Registry file that the
API server would refuse never renders. The corpus is every document of this directory's tables (the invalid
table of test_registry_validation, the CEL combinations of test_cel_rules, the fixtures) plus the coercions
below; `admission.admit` says which ones the API server refuses.
"""

from __future__ import annotations

import contextlib
import copy
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from api.admission import REPO, admit
from api.test_cel_rules import SPECS
from api.test_registry_validation import INVALID, registry
from berth_agent import cli
from berth_api import Registry, describe_validation_error


def with_value(path: str, value: Any) -> dict[str, Any]:
    """The smallest valid Registry with one field (dotted path under the object) set to `value`."""
    document = registry()
    document["spec"]["http"] = {}
    if path.startswith("spec.garbageCollection"):  # on storage GC can reach: the type is the only problem
        document["spec"]["config"] = {"storage": {"filesystem": {"storageClass": "standard"}}}
    node = document
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return document


# (API path, value of the wrong JSON type that lax pydantic would coerce or the CRD would refuse)
COERCIONS = [
    ("spec.config.storage.maintenance.readonly.enabled", "yes"),
    ("spec.config.storage.maintenance.readonly.enabled", "true"),
    ("spec.config.storage.maintenance.readonly.enabled", 1),
    ("spec.config.storage.maintenance.uploadpurging.dryrun", 0),
    ("spec.config.storage.maintenance.uploadpurging.enabled", "off"),
    ("spec.config.storage.delete.enabled", "True"),
    ("spec.config.storage.redirect.disabled", "1"),
    ("spec.http.http2.disabled", "false"),
    ("spec.http.h2c.enabled", "on"),
    ("spec.http.relativeURLs", "no"),
    ("spec.health.storagedriver.enabled", "y"),
    ("spec.replicas", "2"),
    ("spec.replicas", True),
    ("spec.health.storagedriver.threshold", "3"),
    ("spec.config.storage.cache", {"blobdescriptor": "inmemory", "blobdescriptorsize": "100"}),
    ("spec.redis", {"secret": {"name": "r", "field": "url"}, "db": "1"}),
    ("spec.redis", {"secret": {"name": "r", "field": "url"}, "tls": {"enabled": "yes"}}),
    ("spec.redis", {"secret": {"name": "r", "field": "url"}, "pool": {"maxidle": "4"}}),
    ("spec.http.drainTimeout", 30),
    ("spec.distribution", 3),
    ("spec.image", 5),
    ("spec.config.log.level", ["info"]),
    ("spec.resources", {"requests": {"cpu": 1}}),
    ("spec.http.addr", 5000),
    ("spec.validation.manifests.urls.allow", "^https://"),
    ("spec.health.tcp", {"addr": "redis:6379"}),
    ("metadata", "r"),
    ("spec.garbageCollection", {"dryRun": "true"}),
    ("spec.garbageCollection", {"deleteUntagged": 1}),
    ("spec.garbageCollection", {"readOnlyTimeout": 600}),
    ("spec.garbageCollection", {"schedule": 3}),
]
COERCION_DOCUMENTS = [(f"{path}={value!r}", with_value(path, value)) for path, value in COERCIONS]
COERCION_DOCUMENTS.append(("objectStorage.chunkSize='5242880'", {
    **registry(config={"storage": {"objectStorage": {"bucketClaim": "b", "bucketAccess": "a",
                                                     "chunkSize": str(5 * 1024 * 1024)}}})}))
# The API server routes by apiVersion and kind: a manifest naming another one never reaches the Registry schema.
WRONG_TYPE_META = [
    ("kind Deployment", {**registry(), "kind": "Deployment"}),
    ("apiVersion berth.dev/v9", {**registry(), "apiVersion": "berth.dev/v9"}),
    ("apiVersion apps/v1", {**registry(), "apiVersion": "apps/v1"}),
    ("no kind", {k: v for k, v in registry().items() if k != "kind"}),
    ("no apiVersion", {k: v for k, v in registry().items() if k != "apiVersion"}),
]


def corpus() -> list[tuple[str, dict[str, Any]]]:
    documents = [(f"invalid:{case[0]}", case[1]) for case in INVALID]
    documents += [(f"cel:{index}", {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                                    "metadata": {"name": "r"}, "spec": spec}) for index, spec in enumerate(SPECS)]
    documents += [(f"fixture:{path.name}", yaml.safe_load(path.read_text()))
                  for path in sorted((REPO / "tests" / "api" / "fixtures").glob("*.yaml"))]
    documents += [(f"type:{name}", document) for name, document in COERCION_DOCUMENTS]
    return documents


CORPUS = corpus()
REFUSED = [(name, document) for name, document in CORPUS if admit(copy.deepcopy(document))]


def render(document: dict[str, Any], tmp_path: Path) -> tuple[int, str]:
    """`berth-agent render` on the document (in process: the console script's own main), with no mounts."""
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["render", "--registry", str(path), "--mounts", str(tmp_path / "no-mounts")])
    return code, stderr.getvalue()


def test_the_corpus_has_every_kind_of_refusal():
    names = [name for name, _ in REFUSED]
    assert len(REFUSED) >= 200
    assert sum(name.startswith("type:") for name in names) == len(COERCION_DOCUMENTS)  # the CRD refuses each
    assert sum(name.startswith("cel:") for name in names) >= 100
    assert sum(name.startswith("invalid:") for name in names) >= 40


@pytest.mark.parametrize(("path", "value"), COERCIONS, ids=[name for name, _ in COERCION_DOCUMENTS[:-1]])
def test_the_model_refuses_a_wrong_json_type_where_the_crd_does(path, value):
    document = with_value(path, value)
    crd_paths = {p for p, _ in admit(copy.deepcopy(document))}
    assert crd_paths, "the CRD accepts it: not a type case"
    with pytest.raises(ValidationError) as caught:
        Registry.model_validate(document)
    model_paths = {line.split(": ", 1)[0] for line in describe_validation_error(caught.value).split("; ")}
    # The model names the field (or the value inside it) the CRD names.
    assert any(m == c or m.startswith(c + ".") or c.startswith(m + ".") for m in model_paths for c in crd_paths), (
        model_paths, crd_paths)


def test_lax_validation_would_have_let_coercions_through():
    """Control: without strict mode these render; the strictness above is what refuses them."""
    coerced = [name for name, document in COERCION_DOCUMENTS
               if _lax_accepts(document)]
    assert len(coerced) >= 10, coerced


def _lax_accepts(document: dict[str, Any]) -> bool:
    try:
        Registry.model_validate(document, strict=False)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("document", [d for _, d in REFUSED], ids=[n for n, _ in REFUSED])
def test_render_refuses_what_the_crd_refuses(document, tmp_path):
    code, stderr = render(document, tmp_path)
    assert code == 2, f"berth-agent render accepted a Registry the API server refuses: {admit(document)}"
    # Refused as a Registry (the file names the field), not later for a missing mount.
    assert stderr.startswith(f"berth-agent render: {tmp_path}/registry.yaml: "), stderr


@pytest.mark.parametrize("document", [d for _, d in WRONG_TYPE_META], ids=[n for n, _ in WRONG_TYPE_META])
def test_render_refuses_another_api_version_or_kind(document, tmp_path):
    code, stderr = render(document, tmp_path)
    assert code == 2
    assert "apiVersion" in stderr or "kind" in stderr


def test_the_console_script_refuses_a_coercion(tmp_path):
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(with_value("spec.config.storage.maintenance.readonly.enabled", "yes")))
    result = subprocess.run([sys.executable, "-m", "berth_agent.cli", "render", "--registry", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "spec.config.storage.maintenance.readonly.enabled: Input should be a valid boolean" in result.stderr
