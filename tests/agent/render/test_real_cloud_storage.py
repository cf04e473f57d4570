"""The emulators of tests/support (Azurite; fake-gcs-server with its token endpoint and upload proxy) are real
enough for the registry's azure and gcs drivers (Distribution 3.1.1): a push lands blobs in the emulator, a pull
gets them back, and a revoked key really fails. Berth's own tests of these drivers stand on this."""

from __future__ import annotations

import http.client
import ssl
import urllib.request
from pathlib import Path

import pytest
import yaml

from support.clouds.azurite import new_account_key, requires_azurite, running_azurite
from support.clouds.gcs import running_gcs
from support.registries.registry import (
    REGISTRY3_BINARY,
    http_get,
    pull_image,
    push_and_pull_back,
    requires_registry3,
    running_registry,
)

pytestmark = requires_registry3
ACCOUNT = "berthacct"


def _config(storage: dict) -> bytes:
    return yaml.safe_dump({"version": 0.1, "http": {"addr": ":5000"}, "storage": storage}).encode()


def _azure(azurite, key: str, *, redirect: bool = False) -> dict:
    driver = {"accountname": ACCOUNT, "accountkey": key, "container": "registry",
              "serviceurl": azurite.service_url(ACCOUNT), "credentials": {"type": "shared_key"}}
    return {"azure": driver, "redirect": {"disable": not redirect}}


@requires_azurite
def test_azure_push_pull_and_a_revoked_key_is_refused(tmp_path: Path) -> None:
    key1, key2 = new_account_key(), new_account_key()
    with running_azurite(tmp_path / "azurite", {ACCOUNT: (key1, key2)}) as azurite:
        azurite.create_container(ACCOUNT, "registry")
        with running_registry(_config(_azure(azurite, key1)), tmp_path / "reg", binary=REGISTRY3_BINARY) as reg:
            pushed, pulled = push_and_pull_back(reg, tmp_path / "img")
            assert pulled.blobs == pushed.blobs
            stored = azurite.list_blobs(ACCOUNT, "registry")
            assert all(any(digest.split(":")[1] in name for name in stored) for digest in pushed.layer_digests)

            azurite.set_keys(ACCOUNT, new_account_key(), key2)  # key1 regenerated: what the registry holds is dead
            answer = http_get(f"{reg.url}/v2/berth/test/manifests/1", headers={
                "Accept": "application/vnd.oci.image.manifest.v1+json"})
            assert answer.status == 500
            assert "AuthorizationFailure" in reg.log()
        # key2, the other key of the account, serves the same data
        with running_registry(_config(_azure(azurite, key2)), tmp_path / "reg2", binary=REGISTRY3_BINARY) as reg:
            assert pull_image(reg, "berth/test:1", tmp_path / "again").blobs == pushed.blobs


@requires_azurite
def test_azure_redirect_is_a_shared_key_sas_url(tmp_path: Path) -> None:
    """With redirects on, a blob GET answers 307 to an https SAS URL that Azurite honours."""
    key1 = new_account_key()
    with running_azurite(tmp_path / "azurite", {ACCOUNT: (key1,)}, https=True) as azurite:
        azurite.create_container(ACCOUNT, "registry")
        env = {"SSL_CERT_FILE": str(azurite.ca_path)}
        with running_registry(_config(_azure(azurite, key1, redirect=True)), tmp_path / "reg",
                              binary=REGISTRY3_BINARY, env=env) as reg:
            pushed, pulled = push_and_pull_back(reg, tmp_path / "img")
            assert pulled.blobs == pushed.blobs
            layer = pushed.layer_digests[0]
            connection = http.client.HTTPConnection("127.0.0.1", reg.port, timeout=10)  # does not follow redirects
            connection.request("GET", f"/v2/berth/test/blobs/{layer}")
            answer = connection.getresponse()
            assert answer.status == 307
            location = answer.getheader("Location")
            connection.close()
            assert location.startswith(azurite.service_url(ACCOUNT) + "/registry/") and "sig=" in location
            # the SAS alone authorises this GET (no Authorization header); TLS is not what is tested here
            with urllib.request.urlopen(location, context=ssl._create_unverified_context(), timeout=10) as blob:
                assert blob.read() == pushed.blobs[layer]


def test_gcs_push_pull_through_all_three_endpoints_and_a_revoked_key_is_refused(tmp_path: Path) -> None:
    with running_gcs(tmp_path / "gcs") as gcs:
        gcs.create_bucket("registry")
        key = gcs.create_key("registry@berth-test.iam.gserviceaccount.com")
        keyfile = tmp_path / "key.json"
        keyfile.write_text(key.json())
        storage = {"gcs": {"bucket": "registry", "keyfile": str(keyfile), "chunksize": 262144},
                   "redirect": {"disable": True}}
        with running_registry(_config(storage), tmp_path / "reg", binary=REGISTRY3_BINARY,
                              env=gcs.registry_env()) as reg:
            # 700 KiB: more than two chunks, so the resumable session really carries several PUTs
            pushed, pulled = push_and_pull_back(reg, tmp_path / "img", layer_size=700 * 1024)
            assert pulled.blobs == pushed.blobs
            stored = gcs.list_objects("registry")
            assert all(any(digest.split(":")[1] in name for name in stored) for digest in pushed.layer_digests)
            assert gcs.proxy.requests >= 1 and gcs.proxy.unauthorized == 0  # the upload host, with a live token
            assert len(gcs.tokens.tokens) >= 1  # the key's JWT was exchanged at its token_uri

            gcs.revoke_key(key)
            with pytest.raises(RuntimeError, match="500"):
                push_and_pull_back(reg, tmp_path / "img2", reference="berth/other:1")
            assert gcs.proxy.unauthorized >= 1
            assert "Invalid Credentials" in reg.log()
