"""Pre-flight of Azure Blob and GCS credentials against the real emulators: a live key passes, a
regenerated (revoked) key, a deleted service-account key and a missing container or bucket are refused quoting the
service's status and error code, never a credential; and check_render runs the check only when the credentials or
the container/bucket change."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth_agent.apply.preflight import check_render
from berth_agent.apply.preflight_azure import azure_target, check_container
from berth_agent.apply.preflight_gcs import check_bucket, gcs_target
from berth_agent.core.errors import PreflightError
from berth_agent.mounted.mounts import MountedInputs, parse_gcs_key
from berth_agent.render.config import render
from berth_api import Registry
from support.clouds.azurite import new_account_key, requires_azurite, running_azurite
from support.clouds.gcs import running_gcs

ACCOUNT = "berthacct"


def _azure_document(service_url: str, key: str, container: str = "registry") -> dict:
    return {"storage": {"azure": {"accountname": ACCOUNT, "container": container, "accountkey": key,
                                  "serviceurl": service_url, "credentials": {"type": "shared_key"}}}}


@requires_azurite
def test_azure_shared_key_live_revoked_and_missing_container(tmp_path: Path) -> None:
    key1, key2 = new_account_key(), new_account_key()
    with running_azurite(tmp_path / "azurite", {ACCOUNT: (key1, key2)}) as azurite:
        azurite.create_container(ACCOUNT, "registry")
        url = azurite.service_url(ACCOUNT)
        check_container(azure_target(_azure_document(url, key1)))
        check_container(azure_target(_azure_document(url, key2)))

        with pytest.raises(PreflightError) as missing:
            check_container(azure_target(_azure_document(url, key1, container="nope")))
        assert "HTTP 404, ContainerNotFound" in str(missing.value) and "'nope'" in str(missing.value)

        azurite.set_keys(ACCOUNT, new_account_key(), key2)  # key1 regenerated
        with pytest.raises(PreflightError) as refused:
            check_container(azure_target(_azure_document(url, key1)))
        message = str(refused.value)
        assert message.startswith("spec.config.storage.azure: the container 'registry' of account 'berthacct' "
                                  "refused the new credentials (HTTP 403, ")
        assert "AuthorizationFailure" in message or "AuthenticationFailed" in message
        assert key1 not in message and key1[:12] not in message
        check_container(azure_target(_azure_document(url, key2)))  # the other key still serves


@requires_azurite
def test_check_render_checks_azure_only_when_the_credentials_change(tmp_path: Path) -> None:
    key1, key2 = new_account_key(), new_account_key()
    with running_azurite(tmp_path / "azurite", {ACCOUNT: (key1, key2)}) as azurite:
        azurite.create_container(ACCOUNT, "registry")
        spec = Registry.model_validate({"spec": {"config": {"storage": {"azure": {
            "accountName": ACCOUNT, "container": "registry", "serviceURL": azurite.service_url(ACCOUNT),
            "credentials": {"type": "shared_key", "secret": {"name": "azure", "field": "accountKey"}}}}}}}).spec
        running = render(spec, MountedInputs(azure_secret=key1))
        azurite.set_keys(ACCOUNT, key1)  # key2 revoked
        edited = render(spec.model_copy(update={"config": spec.config.model_copy(update={
            "log": spec.config.log.model_copy(update={"level": "debug"})})}), MountedInputs(azure_secret=key1))
        check_render(edited, running)  # the key did not change: not checked (it is live anyway)
        with pytest.raises(PreflightError, match=r"HTTP 403"):
            check_render(render(spec, MountedInputs(azure_secret=key2)), running)


def test_gcs_key_live_deleted_and_missing_bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_gcs(tmp_path / "gcs") as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.emulator_host)  # as the registry's storage client
        gcs.create_bucket("berth-registry")
        key = gcs.create_key("registry@berth-test.iam.gserviceaccount.com")
        document = {"storage": {"gcs": {"bucket": "berth-registry", "keyfile": "/etc/berth/gcs/key.json"}}}
        files = {"gcs/key.json": key.json().encode()}
        check_bucket(gcs_target(document, files))
        assert len(gcs.tokens.tokens) == 1  # the JWT was exchanged at the key's token_uri

        missing = {"storage": {"gcs": {**document["storage"]["gcs"], "bucket": "nope"}}}
        with pytest.raises(PreflightError, match=r"the bucket 'nope' refused the new key \(HTTP 404"):
            check_bucket(gcs_target(missing, files))

        gcs.revoke_key(key)
        with pytest.raises(PreflightError) as refused:
            check_bucket(gcs_target(document, files))
        message = str(refused.value)
        assert message == ("spec.config.storage.gcs.credentials.secret: the token endpoint refused the key of "
                           "registry@berth-test.iam.gserviceaccount.com (HTTP 400, invalid_grant); keeping the "
                           "running config")
        assert key.private_key_pem.splitlines()[1] not in message


def test_gcs_check_render_on_a_new_key_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_gcs(tmp_path / "gcs") as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.emulator_host)
        gcs.create_bucket("berth-registry")
        old, new = (gcs.create_key("registry@berth-test.iam.gserviceaccount.com") for _ in range(2))
        spec = Registry.model_validate({"spec": {"config": {"storage": {"gcs": {
            "bucket": "berth-registry",
            "credentials": {"type": "key", "secret": {"name": "gcs", "field": "key.json"}}}}}}}).spec

        def rendered(key):
            return render(spec, MountedInputs(gcs_key=parse_gcs_key(key.json().encode(), "gcs/key.json")))

        running = rendered(old)
        check_render(rendered(new), running)
        exchanged = len(gcs.tokens.tokens)
        gcs.revoke_key(new)
        check_render(rendered(old), rendered(old))  # nothing changed: no exchange at all
        assert len(gcs.tokens.tokens) == exchanged
        with pytest.raises(PreflightError, match="invalid_grant"):
            check_render(rendered(new), running)
