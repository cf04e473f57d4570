"""The committed CRD: generated from the models, accepted by Kubernetes 1.30+, structural, documented."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import re2
from kubernetes_validate.utils import all_versions
from packaging.version import Version
from pydantic import BaseModel, Field

from api.admission import CRD_FILE, cel_rules, committed_crd, crd_schema, join, walk
from berth_api import GC_STORAGE_MESSAGE, crd, crd_command
from berth_api.auth import (
    AUTH_MESSAGE,
    AUTH_PATH,
    BOTH_PLACES_MESSAGE,
    EXACTLY_ONE_MESSAGE,
    STORAGE_AUTH_PATH,
    TOKEN_V3_FIELDS,
    token_v3_message,
)
from berth_api.exposure import (
    DNS_NAMES_MESSAGE,
    LB_CLASS_MESSAGE,
    NODE_PORT_MESSAGE,
    TLS_SOURCE_MESSAGE,
    TRAFFIC_POLICY_MESSAGE,
)
from berth_api.kube_types import ONE_SOURCE_MESSAGE, TOLERATION_RULES
from berth_api.network_policy import PEER_MESSAGE
from berth_api.notifications import (
    HEADER_SOURCE_MESSAGE,
    NOTIFICATIONS_V3_FIELDS,
    SECRET_NEEDED_MESSAGE,
    UNIQUE_NAMES_MESSAGE,
    notifications_v3_message,
)
from berth_api.pod_template import ANNOTATIONS_MESSAGE, ENV_MESSAGE, LABELS_MESSAGE
from berth_api.proxy import GC_PROXY_MESSAGE, PROXY_V3_FIELDS, proxy_v3_message
from berth_api.s3 import KEY_ID_MESSAGE, OBJECT_STORAGE_PATH, S3_PATH, v3_options_rules
from berth_api.storage import BACKENDS_MESSAGE
from berth_api.types import v3_only_message

TYPES = {"object", "array", "string", "integer", "number", "boolean"}
# Keywords a structural schema may not carry here: type unions, references, and what pruning replaces.
FORBIDDEN = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "const", "title", "nullable", "exclusiveMinimum"}


def test_committed_crd_matches_the_models() -> None:
    committed = CRD_FILE.read_text(encoding="utf-8")
    assert committed == crd.render_crd(), (
        f"{CRD_FILE.name} is out of date with agent/berth_api; regenerate it with `{crd.REGENERATE_COMMAND}`"
    )


def test_generation_is_deterministic() -> None:
    assert crd.render_crd() == crd.render_crd()


def test_check_option_reports_drift(tmp_path, capsys) -> None:
    current = tmp_path / "crd.yaml"
    current.write_text(crd.render_crd(), encoding="utf-8")
    assert crd_command.main(["--check", str(current)]) == 0
    current.write_text(crd.render_crd().replace("minimum: 0", "minimum: 1", 1), encoding="utf-8")
    assert crd_command.main(["--check", str(current)]) == 1
    assert crd.REGENERATE_COMMAND in capsys.readouterr().err


def test_the_console_script_checks_the_committed_file() -> None:
    script = shutil.which("berth-crd")
    assert script, "berth-crd is not installed: pip install -e ."
    result = subprocess.run([script, "--check", str(CRD_FILE)], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, "")


def test_main_prints_the_crd(capsys) -> None:
    assert crd_command.main([]) == 0
    assert capsys.readouterr().out == crd.render_crd()


def test_generation_refuses_a_field_without_description() -> None:
    class Inner(BaseModel):
        documented: int = Field(0, description="Has one.")
        bare: int = 0

    class Outer(BaseModel):
        inner: Inner = Field(description="Nested.")

    with pytest.raises(crd.CrdError, match=r"inner\.bare: no description"):
        crd.structural_schema(Outer.model_json_schema(by_alias=True))


def test_generation_refuses_a_type_union() -> None:
    class Either(BaseModel):
        value: int | str = Field(description="Not structural.")

    with pytest.raises(crd.CrdError, match="value: a union of several types"):
        crd.structural_schema(Either.model_json_schema(by_alias=True))


def test_names_scope_and_version() -> None:
    document = committed_crd()
    assert document["apiVersion"] == "apiextensions.k8s.io/v1"
    assert document["kind"] == "CustomResourceDefinition"
    assert document["metadata"]["name"] == "registries.berth.dev"
    spec = document["spec"]
    assert spec["group"] == "berth.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {"kind": "Registry", "listKind": "RegistryList", "plural": "registries",
                             "singular": "registry", "shortNames": ["reg"]}
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)


# Kubernetes' own schema for CustomResourceDefinition, offline (docs/upstream.md#parts-offline-validation).

KUBERNETES_VERSIONS = [v for v in all_versions() if Version(v) >= Version("1.30")]


def test_kubernetes_validate_knows_1_30_and_newer() -> None:
    assert KUBERNETES_VERSIONS[0] == "1.30.0"
    assert len(KUBERNETES_VERSIONS) >= 2


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kubernetes_accepts_the_crd_strictly(version: str) -> None:
    # Checked against that very version's schema (the library answers with the one it used).
    assert kubernetes_validate.validate(committed_crd(), version, strict=True) == version.rsplit(".", 1)[0]


def test_strict_validation_catches_an_unknown_keyword() -> None:
    """Control: the check above can fail."""
    broken = copy.deepcopy(committed_crd())
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["nullabel"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.30.0", strict=True)


# Structural schema rules (what the API server checks beyond the OpenAPI shape).

NODES = list(walk(crd_schema()))


def structural_problems(path: str, node: dict[str, Any]) -> list[str]:
    problems = []
    if node.get("type") not in TYPES:
        problems.append("needs one type")
    if FORBIDDEN & node.keys():
        problems.append(f"carries {sorted(FORBIDDEN & node.keys())}")
    if "additionalProperties" in node:
        if not isinstance(node["additionalProperties"], dict):
            problems.append("additionalProperties must be a value schema, never a boolean")
        if "properties" in node:
            problems.append("properties and additionalProperties exclude each other")
    if node.get("type") == "array" and "items" not in node:
        problems.append("an array needs items")
    if not set(node.get("required", [])) <= set(node.get("properties", {})):
        problems.append("requires a field it does not declare")
    if any(not jsonschema.Draft202012Validator({"type": node.get("type")}).is_valid(v) for v in node.get("enum", [])):
        problems.append("enum value of the wrong type")
    if "default" in node and not jsonschema.Draft202012Validator(node).is_valid(node["default"]):
        problems.append(f"default {node['default']!r} is invalid for the field")
    if "pattern" in node:
        try:
            re2.compile(node["pattern"])  # the API server compiles patterns with Go's regexp, which is RE2
        except re2.error as exc:
            problems.append(f"pattern is not RE2: {exc}")
    return [f"{path or '(root)'}: {problem}" for problem in problems]


def test_every_node_is_structural() -> None:
    assert len(NODES) > 100
    assert [problem for path, node in NODES for problem in structural_problems(path, node)] == []


def test_the_structural_check_can_fail() -> None:
    assert structural_problems("x", {"anyOf": [{"type": "string"}, {"type": "null"}]}) == [
        "x: needs one type", "x: carries ['anyOf']"]
    assert structural_problems("x", {"type": "object", "properties": {}, "additionalProperties": False}) == [
        "x: additionalProperties must be a value schema, never a boolean",
        "x: properties and additionalProperties exclude each other"]
    assert structural_problems("x", {"type": "string", "default": "1d", "pattern": "^(?=a)[0-9]+s$"})[0].startswith(
        "x: default '1d' is invalid")
    assert "x: pattern is not RE2" in structural_problems("x", {"type": "string", "pattern": "(?=a)"})[0]


def test_every_property_has_a_description() -> None:
    missing = [
        join(path, name)
        for path, node in NODES
        for name, prop in node.get("properties", {}).items()
        if not prop.get("description") and join(path, name) != "metadata"
    ]
    assert missing == []


def test_metadata_is_left_to_the_api_server() -> None:
    assert crd_schema()["properties"]["metadata"] == {"type": "object"}
    assert crd_schema()["required"] == ["spec"]


def test_conditions_are_a_map_by_type() -> None:
    conditions = crd_schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]


def test_patterns_mean_the_same_in_python_and_re2() -> None:
    """pydantic checks with Python-compatible regex, the API server with RE2: they must agree on samples."""
    samples = ["30s", "1h30m", "2µs", "1.5h", "0", "30 s", "1d", "", "10Gi", "500m", "1.5Ti", "10GB",
               ":5000", "127.0.0.1:5000", "[::1]:5000", "localhost", "a b:1", "registry-data", "Bad_Name",
               "https://r.example.com/", "r.example.com", "http://a b", "tls.crt", "a/b", "Ready", "All good",
               "0 3 * * sun", "*/15 0-6 1,15 jan-mar mon-fri", "0 3 * *", "0 3 * * * *", " 0 3 * * 0 ", "10m",
               "1h30m", "90s", "1h 30m", "m", "1h30"]
    for path, node in NODES:
        if "pattern" in node:
            python, go = re.compile(node["pattern"]), re2.compile(node["pattern"])
            for sample in samples:
                assert bool(python.search(sample)) == bool(go.search(sample)), (path, sample)


# CEL rules: they compile, stay cheap, and sit where the models' cross-field validators sit.

RULES = cel_rules(crd_schema())


def test_the_cross_field_rules_are_all_there() -> None:
    by_path = {(path, rule["message"]) for path, rule in RULES}
    assert by_path == {
        ("spec.config.storage", BACKENDS_MESSAGE),
        ("spec.config.storage.azure", "set realm or serviceURL, not both"),
        *(("spec.config.storage.azure.credentials", message) for message in (
            "shared_key and client_secret need secret (the Secret and key holding the account key or the client "
            "secret)", "default_credentials takes no secret (the pod's workload identity authenticates)",
            "client_secret needs tenantID and clientID, and only client_secret takes them")),
        ("spec.config.storage.gcs", "chunkSize must be a multiple of 262144 (256 KiB)"),
        ("spec.config.storage.gcs.credentials", "key needs secret (the Secret and key holding the service account's "
         "JSON key), and default_credentials takes none"),
        *(("spec", v3_only_message(f"config.storage.{backend}")) for backend in ("azure", "gcs")),
        ("spec.config.storage.filesystem", "set exactly one of persistentVolumeClaim and storageClass"),
        ("spec.config.storage.objectStorage", "set exactly one of bucketClaim and bucketClass"),
        ("spec.config.storage.objectStorage", "set exactly one of bucketAccess and bucketAccessClass"),
        # the S3 options on both S3 backends, storage.s3's CA, and what Distribution 2 cannot do
        *((f"spec.config.storage.{backend}", KEY_ID_MESSAGE) for backend in ("objectStorage", "s3")),
        ("spec.config.storage.s3.ca", "set exactly one of secret and configMap"),
        *(("spec", v3_only_message(f"{path.removeprefix('spec.')}.{field}"))
          for path in (OBJECT_STORAGE_PATH, S3_PATH) for _, field in v3_options_rules(path)),
        ("spec", "config.storage.cache.blobdescriptor redis needs spec.redis"),
        ("spec.garbageCollection.readOnlyTimeout", "readOnlyTimeout must be between 1m and 24h"),
        ("spec", GC_STORAGE_MESSAGE),
        ("spec.config", BOTH_PLACES_MESSAGE),
        ("spec.config.auth", EXACTLY_ONE_MESSAGE),
        *(rule for place in (AUTH_PATH, STORAGE_AUTH_PATH) for rule in (
            (place, AUTH_MESSAGE),
            (f"{place}.token", "set rootCertBundle, jwks or both: the registry needs keys to trust"),
            (f"{place}.token.rootCertBundle", "set exactly one of secret and configMap"),
            (f"{place}.token.jwks", "set exactly one of secret and configMap"),
            *(("spec", token_v3_message(field, place)) for field in TOKEN_V3_FIELDS))),
        ("spec", GC_PROXY_MESSAGE),
        *(("spec", proxy_v3_message(field)) for field in PROXY_V3_FIELDS),
        ("spec.config.notifications", SECRET_NEEDED_MESSAGE),
        ("spec.config.notifications", UNIQUE_NAMES_MESSAGE),
        ("spec.config.notifications.endpoints.[].headers.[]", HEADER_SOURCE_MESSAGE),
        *(("spec", notifications_v3_message(field)) for field in NOTIFICATIONS_V3_FIELDS),
        ("spec.service", NODE_PORT_MESSAGE),
        ("spec.service", LB_CLASS_MESSAGE),
        ("spec.service", TRAFFIC_POLICY_MESSAGE),
        ("spec.http.tls", TLS_SOURCE_MESSAGE),
        ("spec.http.tls", DNS_NAMES_MESSAGE),
        ("spec.ingress.tls", TLS_SOURCE_MESSAGE),
        # the pod overrides, the registry's env and the ServiceAccount's annotations
        ("spec.pod.labels", LABELS_MESSAGE),
        ("spec.pod.annotations", ANNOTATIONS_MESSAGE),
        ("spec.serviceAccount.annotations", ANNOTATIONS_MESSAGE),
        *(("spec.pod.tolerations.[]", message) for _rule, message in TOLERATION_RULES),
        ("spec.env.[]", "set exactly one of value and valueFrom"),
        ("spec.env.[]", ENV_MESSAGE),
        ("spec.env.[].valueFrom", ONE_SOURCE_MESSAGE),
        # each peer of spec.networkPolicy is an ipBlock or selectors
        *((f"spec.networkPolicy.{field}.[]", PEER_MESSAGE) for field in ("from", "metricsFrom")),
    }


@pytest.mark.parametrize(("path", "rule"), RULES, ids=[r["message"] for _, r in RULES])
def test_rule_compiles_and_has_bounded_cost(path: str, rule: dict[str, str]) -> None:
    celpy.Environment().compile(rule["rule"])
    # The API server refuses rules whose estimated cost is unbounded; that only happens when a rule sits
    # under a list or map, or iterates one without maxItems. These iterate list literals, or the notification
    # lists, which are bounded by maxItems (checked here; the real API server tier compiles them).
    parts = path.split(".")
    assert "*" not in parts, path
    if "[]" in parts:
        assert path in BOUNDED_LIST_RULE_PATHS, path
    for match in re.finditer(r"\.(all|exists|exists_one|filter|map)\(", rule["rule"]):
        before = rule["rule"][: match.start()]
        if before.endswith("]"):
            continue
        field = re.search(r"([A-Za-z_]+)$", before).group(1)
        if field == "self":  # a map's own rule over its keys: bounded by maxProperties
            assert 0 < dict(NODES)[path].get("maxProperties", 0) <= 64, path
            continue
        assert field in BOUNDED_LISTS, f"{rule['rule']!r} iterates a field"


# The lists CEL rules may iterate or sit under: each has maxItems in the schema.
BOUNDED_LISTS = {"endpoints": ("spec", "config", "notifications", "endpoints"),
                 "headers": ("spec", "config", "notifications", "endpoints", "[]", "headers")}
BOUNDED_LIST_RULE_PATHS = {"spec.config.notifications.endpoints.[].headers.[]", "spec.env.[]", "spec.env.[].valueFrom",
                           "spec.pod.tolerations.[]", "spec.networkPolicy.from.[]", "spec.networkPolicy.metricsFrom.[]"}


def test_the_lists_rules_iterate_are_bounded() -> None:
    for path in BOUNDED_LISTS.values():
        node = crd_schema()
        for part in path:
            node = node["items"] if part == "[]" else node["properties"][part]
        assert node["type"] == "array" and 0 < node["maxItems"] <= 32, path


def test_rules_name_only_fields_their_node_declares() -> None:
    """The API server type-checks rules against the schema when the CRD is created; cel-python does not."""
    nodes = dict(NODES)
    for path, rule in RULES:
        for reference, call in re.findall(r"\bself((?:\.\w+)+)(\(?)", rule["rule"]):
            node = nodes[path]
            names = reference.strip(".").split(".")
            for name in names[:-1] if call else names:  # self.image.matches(...): a method, not a field
                assert name in node.get("properties", {}), f"{path}: {rule['rule']!r} names {name!r}"
                node = node["properties"][name]


# Subresources and printer columns point at fields that exist.

def schema_at(json_path: str) -> dict[str, Any]:
    """The schema node a simple JSONPath (with [?(...)] filters on lists) leads to."""
    node = crd_schema()
    for part in re.sub(r"\[\?\(.*?\)\]", ".[]", json_path).strip(".").split("."):
        if part == "[]":
            node = node["items"]
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        else:
            raise AssertionError(f"{json_path}: no field {part!r}")
    return node


def test_scale_subresource() -> None:
    version = committed_crd()["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    scale = version["subresources"]["scale"]
    assert scale == {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                     "labelSelectorPath": ".status.selector"}
    assert schema_at(scale["specReplicasPath"])["type"] == "integer"
    assert schema_at(scale["statusReplicasPath"])["type"] == "integer"
    assert schema_at(scale["labelSelectorPath"])["type"] == "string"


def test_printer_columns() -> None:
    columns = committed_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    shown = [c["name"] for c in columns if c.get("priority", 0) == 0]
    assert shown == ["Storage", "Replicas", "Ready", "Progress", "URL", "Age"]
    for column in columns:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            assert column["type"] == "date"
            continue
        assert schema_at(column["jsonPath"])["type"] == column["type"], column["name"]
    storage = schema_at(next(c["jsonPath"] for c in columns if c["name"] == "Storage"))
    assert storage["enum"] == ["filesystem", "objectStorage", "s3", "azure", "gcs", "inmemory"]
    # Every backend the spec offers can be written there: a missing one made the API server refuse the operator's
    # status patch (422) for azure and gcs Registries, which then never got a status.
    backends = schema_at(".spec.config.storage")["properties"]
    not_backends = {"maintenance", "delete", "redirect", "cache", "auth"}
    assert set(backends) - not_backends <= set(storage["enum"]), backends.keys()
