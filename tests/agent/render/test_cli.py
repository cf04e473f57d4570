"""`berth-agent render`, run as a user runs it: exit 0 with config.yml on stdout, exit 2 with one line on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.registries.mountkit import EXAMPLES, S3Target, example_names, load_example, write_mounts_for
from support.registries.secretdir import write_secret_dir

SECRET = "cli-secret-value-never-printed"
TARGET = S3Target("http://127.0.0.1:9000", "bucket", "AKIACLITEST000000001", SECRET)


def berth_agent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "berth_agent.cli", *args], capture_output=True, text=True, timeout=60)


def assert_bad_input(result: subprocess.CompletedProcess, *parts: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for part in parts:
        assert part in lines[0]
    assert SECRET not in result.stderr


@pytest.mark.parametrize("name", example_names())
def test_every_example_renders_to_stdout(name, tmp_path):
    mounts = write_mounts_for(load_example(name).spec, tmp_path / "mounts", s3=TARGET)
    args = ["render", "--registry", str(EXAMPLES / name), "--mounts", str(mounts.root)]
    result = berth_agent(*args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    config = yaml.safe_load(result.stdout)
    assert config["version"] == "0.1" and "draintimeout" in config["http"]
    assert berth_agent(*args).stdout == result.stdout  # same inputs, same bytes


def test_inmemory_example_needs_no_mounts():
    result = berth_agent("render", "--registry", str(EXAMPLES / "inmemory.yaml"), "--mounts", "/nonexistent")
    assert result.returncode == 0 and "inmemory: {}" in result.stdout


def test_distribution_and_paths_options(tmp_path):
    mounts = write_mounts_for(load_example("full.yaml").spec, tmp_path / "mounts", s3=TARGET)
    base = ["render", "--registry", str(EXAMPLES / "full.yaml"), "--mounts", str(mounts.root)]
    v2 = yaml.safe_load(berth_agent(*base).stdout)  # full.yaml's image is registry:2
    v3 = yaml.safe_load(berth_agent(*base, "--distribution", "3", "--config-dir", "/cfg").stdout)
    assert "addr" in v2["redis"] and "addrs" in v3["redis"]
    assert v3["auth"]["htpasswd"]["path"] == "/cfg/htpasswd"
    fs = berth_agent("render", "--registry", str(EXAMPLES / "filesystem-pvc.yaml"), "--mounts", str(tmp_path),
                     "--data-dir", "/data")
    assert yaml.safe_load(fs.stdout)["storage"]["filesystem"]["rootdirectory"] == "/data"


def test_invalid_registry_names_the_field(tmp_path):
    document = yaml.safe_load((EXAMPLES / "inmemory.yaml").read_text())
    document["spec"]["config"]["storage"]["filesystem"] = {"storageClass": "standard"}
    document["spec"]["replicas"] = -1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    result = berth_agent("render", "--registry", str(path))
    assert_bad_input(result, str(path), "spec.replicas", "spec.config.storage")


@pytest.mark.parametrize("content, part", [
    ("spec: [unclosed", "invalid YAML at line"),
    ("- a\n- b\n", "must hold one YAML mapping (a Registry), not a list"),
    ("", "is empty"),
])
def test_unparseable_registry_file(content, part, tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(content)
    assert_bad_input(berth_agent("render", "--registry", str(path)), part)


def test_missing_registry_file(tmp_path):
    assert_bad_input(berth_agent("render", "--registry", str(tmp_path / "absent.yaml")), "absent.yaml",
                     "not found")


def test_malformed_mount_names_file_and_key_and_hides_the_secret(tmp_path):
    write_secret_dir(tmp_path / "cosi", {"BucketInfo": json.dumps({"spec": {
        "bucketName": "b", "authenticationType": "Key", "secretS3": {"accessSecretKey": SECRET}}})})
    result = berth_agent("render", "--registry", str(EXAMPLES / "cosi-existing.yaml"), "--mounts", str(tmp_path))
    assert_bad_input(result, "cosi/BucketInfo: spec.secretS3.accessKeyID", "is missing")


def test_missing_mount_directory(tmp_path):
    result = berth_agent("render", "--registry", str(EXAMPLES / "full.yaml"), "--mounts", str(tmp_path))
    assert_bad_input(result, "cosi/", "not mounted")


def test_bad_redis_url_never_echoes_the_url(tmp_path):
    spec = load_example("full.yaml").spec
    mounts = write_mounts_for(spec, tmp_path, s3=TARGET, redis_url=f"redis://user:{SECRET}@cache:6379")
    result = berth_agent("render", "--registry", str(EXAMPLES / "full.yaml"), "--mounts", str(mounts.root))
    assert_bad_input(result, "redis/redisConnection", "Distribution 2")
    for value in mounts.secret_values:
        assert value not in result.stderr


def test_installed_entry_point_renders_an_example():
    result = subprocess.run(["berth-agent", "render", "--registry", "examples/inmemory.yaml"],
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[3], timeout=60)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["storage"]["inmemory"] == {}
