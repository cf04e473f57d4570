"""Every example (examples/*.yaml) and every fixture here is a Registry both the CRD and the model accept,
and the API server's defaulting from the CRD yields the values the model defaults to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from api.admission import REPO, admit, apply_defaults, crd_schema
from berth_api import Registry

FILES = sorted((REPO / "examples").glob("*.yaml")) + sorted((Path(__file__).parent / "fixtures").glob("*.yaml"))
DOCUMENTS = [
    pytest.param(document, id=f"{path.relative_to(REPO)}#{index}")
    for path in FILES
    for index, document in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8")))
]
# The Docker Hub mirror (examples/dockerhub-mirror/): a Registry and the token Secret it names, in a folder of
# their own (`kubectl apply -f` the folder); every other example is one Registry.
MIRROR = REPO / "examples" / "dockerhub-mirror"


def test_the_docker_hub_mirror_example_is_a_registry_and_the_secret_it_reads(tmp_path: Path) -> None:
    from berth_agent.mounted.mounts import read_inputs
    from berth_agent.render.config import render
    from berth_api.pod import PROXY_PASSWORD_KEY, PROXY_USERNAME_KEY
    from support.registries.secretdir import write_secret_dir

    registry = yaml.safe_load((MIRROR / "registry.yaml").read_text(encoding="utf-8"))
    secret = yaml.safe_load((MIRROR / "token-secret.yaml").read_text(encoding="utf-8"))
    assert admit(registry) == []
    proxy = Registry.model_validate(registry).spec.config.proxy
    assert proxy is not None and proxy.remote_url == "https://registry-1.docker.io"
    assert proxy.credentials is not None and proxy.credentials.secret_name == secret["metadata"]["name"]
    assert (secret["apiVersion"], secret["kind"], secret["type"]) == ("v1", "Secret", "kubernetes.io/basic-auth")
    assert set(secret["stringData"]) == {PROXY_USERNAME_KEY, PROXY_PASSWORD_KEY}
    write_secret_dir(tmp_path / "proxy", secret["stringData"])
    spec = Registry.model_validate(registry).spec
    rendered = render(spec, read_inputs(spec, tmp_path))
    assert yaml.safe_load(rendered.config)["proxy"] == {
        "remoteurl": "https://registry-1.docker.io", "username": secret["stringData"]["username"],
        "password": secret["stringData"]["password"], "ttl": "168h"}


def test_there_are_documents_to_check() -> None:
    assert len(DOCUMENTS) >= 3
    names = {path.name for path in FILES}
    assert {"tls-htpasswd.yaml", "redis-cache.yaml", "with-status.yaml"} <= names


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_api_server_would_accept_it(document: dict[str, Any]) -> None:
    assert (document["apiVersion"], document["kind"]) == ("berth.dev/v1alpha1", "Registry")
    assert admit(document) == []


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_model_accepts_it(document: dict[str, Any]) -> None:
    registry = Registry.model_validate(document)
    # Nothing dropped or renamed on the way in: the model gives back the very document.
    assert registry.model_dump(mode="json", by_alias=True, exclude_unset=True) == document


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Scalar values by path; empty maps and lists have none."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in leaves(item, f"{path}.{key}").items()}
    if isinstance(value, list):
        return {k: v for index, item in enumerate(value) for k, v in leaves(item, f"{path}.{index}").items()}
    return {path: value}


@pytest.mark.parametrize("document", DOCUMENTS)
def test_crd_defaults_match_model_defaults(document: dict[str, Any]) -> None:
    by_crd = apply_defaults(document, crd_schema())
    by_model = Registry.model_validate(document).model_dump(by_alias=True, exclude_none=True)
    assert leaves(by_crd["spec"]) == leaves(by_model["spec"])
    assert leaves(by_crd.get("status")) == leaves(by_model.get("status"))


CORPORATE = REPO / "examples" / "corporate-cache"


def test_the_corporate_cache_example_is_a_registry_and_the_configmap_its_env_reads() -> None:
    """examples/corporate-cache/: every pod override, and NO_PROXY from the folder's ConfigMap."""
    registry = yaml.safe_load((CORPORATE / "registry.yaml").read_text(encoding="utf-8"))
    config_map = yaml.safe_load((CORPORATE / "egress-configmap.yaml").read_text(encoding="utf-8"))
    assert admit(registry) == []
    spec = Registry.model_validate(registry).spec
    [ref] = [var.value_from.config_map_key_ref for var in spec.env if var.value_from is not None]
    assert (ref.name, ref.key in config_map["data"]) == (config_map["metadata"]["name"], True)
    assert spec.config.proxy is not None and spec.pod.image_pull_secrets and spec.pod.tolerations
