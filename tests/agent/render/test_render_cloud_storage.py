"""spec.config.storage.azure and .gcs rendered from the mounted Secrets, and the rendered config run by
the real registry-v3.1.1 against Azurite and fake-gcs-server (tests/support): a push and a pull through it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from berth_agent.core.errors import InputError
from berth_agent.mounted.mounts import MountedInputs, read_inputs
from berth_agent.render.config import render
from berth_agent.render.paths import GCS_KEY_FILE, RenderPaths
from berth_api import Registry
from support.clouds.azurite import new_account_key, requires_azurite, running_azurite
from support.clouds.gcs import running_gcs
from support.registries.registry import REGISTRY3_BINARY, push_and_pull_back, requires_registry3, running_registry
from support.registries.secretdir import swap_secret_dir, write_secret_dir

IDS = {"tenantID": "00000000-0000-0000-0000-000000000001", "clientID": "00000000-0000-0000-0000-000000000002"}


def spec_of(storage: dict, major: str = "3"):
    return Registry.model_validate({"spec": {"image": f"registry:{major}", "config": {"storage": storage}}}).spec


def azure_spec(creds: dict, **extra):
    return spec_of({"azure": {"accountName": "berthdata", "container": "registry", "credentials": creds, **extra},
                    "redirect": {"disabled": True}})


def test_azure_shared_key_client_secret_and_default_credentials(tmp_path: Path) -> None:
    write_secret_dir(tmp_path / "azure", {"accountKey": "a2V5MQ==\n", "clientSecret": "entra~secret\n"})
    spec = azure_spec({"type": "shared_key", "secret": {"name": "azure", "field": "accountKey"}},
                      serviceURL="http://127.0.0.1:10000/berthdata", rootDirectory="reg", maxRetries=3,
                      retryDelay="250ms")
    inputs = read_inputs(spec, tmp_path)
    assert "a2V5" not in repr(inputs)
    assert yaml.safe_load(render(spec, inputs).config)["storage"]["azure"] == {
        "accountname": "berthdata", "container": "registry", "accountkey": "a2V5MQ==",
        "credentials": {"type": "shared_key"}, "serviceurl": "http://127.0.0.1:10000/berthdata",
        "rootdirectory": "reg", "max_retries": 3, "retry_delay": "250ms"}

    spec = azure_spec({"type": "client_secret", "secret": {"name": "azure", "field": "clientSecret"}, **IDS},
                      realm="core.chinacloudapi.cn")
    azure = yaml.safe_load(render(spec, read_inputs(spec, tmp_path)).config)["storage"]["azure"]
    assert azure["credentials"] == {"type": "client_secret", "clientid": IDS["clientID"],
                                    "tenantid": IDS["tenantID"], "secret": "entra~secret"}
    assert azure["realm"] == "core.chinacloudapi.cn" and "accountkey" not in azure

    spec = azure_spec({"type": "default_credentials"})
    assert read_inputs(spec, tmp_path / "nothing-mounted") == MountedInputs()
    azure = yaml.safe_load(render(spec, MountedInputs()).config)["storage"]["azure"]
    assert azure == {"accountname": "berthdata", "container": "registry",
                     "credentials": {"type": "default_credentials"}}


def test_a_new_azure_key_restarts_the_registry_and_an_empty_one_is_refused(tmp_path: Path) -> None:
    spec = azure_spec({"type": "shared_key", "secret": {"name": "azure", "field": "accountKey"}})
    write_secret_dir(tmp_path / "azure", {"accountKey": "one"})
    old = render(spec, read_inputs(spec, tmp_path))
    swap_secret_dir(tmp_path / "azure", {"accountKey": "two"})
    new = render(spec, read_inputs(spec, tmp_path))
    assert new.restart_needed(old) and new.identity != old.identity
    swap_secret_dir(tmp_path / "azure", {"accountKey": "\n"})
    with pytest.raises(InputError, match="is empty") as caught:
        read_inputs(spec, tmp_path)
    assert caught.value.source == "azure/accountKey"


def test_gcs_key_is_the_keyfile_beside_config_and_a_bad_key_names_the_file(tmp_path: Path) -> None:
    spec = spec_of({"gcs": {"bucket": "berth-registry", "rootDirectory": "reg", "chunkSize": 524288,
                            "credentials": {"type": "key", "secret": {"name": "gcs", "field": "key.json"}}}})
    with running_gcs(tmp_path / "gcs") as gcs:
        key = gcs.create_key("registry@berth-test.iam.gserviceaccount.com")
    write_secret_dir(tmp_path / "mounts" / "gcs", {"key.json": key.json()})
    inputs = read_inputs(spec, tmp_path / "mounts")
    assert "PRIVATE" not in repr(inputs)
    paths = RenderPaths(config_dir=tmp_path / "etc")
    rendered = render(spec, inputs, paths=paths)
    assert yaml.safe_load(rendered.config)["storage"]["gcs"] == {
        "bucket": "berth-registry", "keyfile": str(tmp_path / "etc" / GCS_KEY_FILE), "rootdirectory": "reg",
        "chunksize": 524288}
    assert rendered.files == {GCS_KEY_FILE: key.json().encode()}
    assert key.private_key_pem.splitlines()[1] not in rendered.config.decode()

    for bad, message in ((b"{not json", "is not JSON"), (b'{"type": "authorized_user"}', "is not a service account"),
                         (b'{"type": "service_account", "client_email": "a@b"}', "has no private_key")):
        swap_secret_dir(tmp_path / "mounts" / "gcs", {"key.json": bad})
        with pytest.raises(InputError, match=message) as caught:
            read_inputs(spec, tmp_path / "mounts")
        assert caught.value.source == "gcs/key.json"

    default = spec_of({"gcs": {"bucket": "berth-registry", "credentials": {"type": "default_credentials"}}})
    rendered = render(default, MountedInputs())
    assert yaml.safe_load(rendered.config)["storage"]["gcs"] == {"bucket": "berth-registry"} and not rendered.files


def test_told_distribution_2_the_renderer_refuses_naming_the_backend() -> None:
    spec = azure_spec({"type": "default_credentials"})
    with pytest.raises(InputError) as caught:
        render(spec, MountedInputs(), distribution="2")
    assert caught.value.source == "spec.config.storage.azure"


def _write(rendered, config_dir: Path) -> Path:
    for name, data in rendered.files.items():
        (config_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (config_dir / name).write_bytes(data)
    path = config_dir / "config.yml"
    path.write_bytes(rendered.config)
    return path


@requires_registry3
@requires_azurite
def test_the_rendered_azure_config_runs_the_real_registry(tmp_path: Path) -> None:
    key1, key2 = new_account_key(), new_account_key()
    with running_azurite(tmp_path / "azurite", {"berthdata": (key1, key2)}) as azurite:
        azurite.create_container("berthdata", "registry")
        spec = azure_spec({"type": "shared_key", "secret": {"name": "azure", "field": "accountKey"}},
                          serviceURL=azurite.service_url("berthdata"))
        write_secret_dir(tmp_path / "mounts" / "azure", {"accountKey": key2})
        paths = RenderPaths(config_dir=tmp_path / "etc")
        (tmp_path / "etc").mkdir()
        config = _write(render(spec, read_inputs(spec, tmp_path / "mounts"), paths=paths), tmp_path / "etc")
        with running_registry(config, tmp_path / "reg", addr=None, binary=REGISTRY3_BINARY) as reg:
            pushed, pulled = push_and_pull_back(reg, tmp_path / "img")
        assert pulled.blobs == pushed.blobs
        assert any("blobs/sha256" in name for name in azurite.list_blobs("berthdata", "registry"))


@requires_registry3
def test_the_rendered_gcs_config_runs_the_real_registry(tmp_path: Path) -> None:
    with running_gcs(tmp_path / "gcs") as gcs:
        gcs.create_bucket("berth-registry")
        key = gcs.create_key("registry@berth-test.iam.gserviceaccount.com")
        spec = spec_of({"gcs": {"bucket": "berth-registry", "chunkSize": 262144,
                                "credentials": {"type": "key", "secret": {"name": "gcs", "field": "key.json"}}},
                        "redirect": {"disabled": True}})
        write_secret_dir(tmp_path / "mounts" / "gcs", {"key.json": key.json()})
        paths = RenderPaths(config_dir=tmp_path / "etc")
        (tmp_path / "etc").mkdir()
        config = _write(render(spec, read_inputs(spec, tmp_path / "mounts"), paths=paths), tmp_path / "etc")
        with running_registry(config, tmp_path / "reg", addr=None, binary=REGISTRY3_BINARY,
                              env=gcs.registry_env()) as reg:
            pushed, pulled = push_and_pull_back(reg, tmp_path / "img", layer_size=600 * 1024)
        assert pulled.blobs == pushed.blobs
        assert gcs.proxy.requests >= 1 and gcs.proxy.unauthorized == 0
        assert any("blobs/sha256" in name for name in gcs.list_objects("berth-registry"))


# COSI for Azure and GCS (docs/decisions/0036-azure-and-gcs-not-through-cosi.md): what COSI hands out cannot feed these
# drivers, and the agent says so.
AZURE_BUCKET_INFO = {"metadata": {"name": "ba-1"}, "spec": {
    "bucketName": "bc-1", "authenticationType": "Key", "protocols": ["Azure"], "secretS3": None,
    "secretAzure": {"accessToken": "https://berthdata.blob.core.windows.net/c?sv=2022&sig=SECRETSIG",
                    "expiryTimeStamp": "2026-12-31T00:00:00Z"}}}


@pytest.mark.parametrize(("data", "where", "says"), [
    ({"BucketInfo": json.dumps(AZURE_BUCKET_INFO)}, "cosi/BucketInfo: spec.secretAzure", "SAS token"),
    ({"COSI_AZURE_STORAGE_ACCOUNT": "berthdata", "COSI_AZURE_ACCESS_TOKEN": "sv=2022&sig=SECRETSIG"}, "cosi/",
     "SAS token"),
    ({"COSI_GCS_PROJECT_ID": "p", "COSI_GCS_BUCKET_NAME": "b", "COSI_GCS_ACCESS_ID": "GOOG1E",
      "COSI_GCS_ACCESS_SECRET": "SECRETSIG"}, "cosi/", "HMAC keys"),
])
def test_a_cosi_secret_for_azure_or_gcs_is_refused_saying_why(tmp_path: Path, data, where, says) -> None:
    write_secret_dir(tmp_path / "cosi", data)
    spec = spec_of({"objectStorage": {"bucketClaim": "c", "bucketAccess": "a"}})
    with pytest.raises(InputError) as caught:
        read_inputs(spec, tmp_path)
    assert caught.value.source == where
    assert says in str(caught.value) and "SECRETSIG" not in str(caught.value)
