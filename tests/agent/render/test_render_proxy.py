"""spec.config.proxy rendered: Distribution's proxy section, the credentials read from the mounted
Secret (username and password keys), ttl and cacheWriteTimeout for 3.x only, and a restart when the
credentials change (the registry reads them once, at start)."""

from __future__ import annotations

import pytest
import yaml

from berth_agent.core.errors import InputError
from berth_agent.mounted.mounts import MountedInputs, read_inputs
from berth_agent.render.config import render
from berth_api import Registry
from support.registries.secretdir import write_secret_dir

HUB = "https://registry-1.docker.io"


def spec_of(major: str = "3", **proxy):
    return Registry.model_validate({"spec": {"image": f"registry:{major}", "config": {
        "storage": {"inmemory": {}}, "proxy": {"remoteURL": HUB, **proxy}}}}).spec


def test_an_anonymous_proxy_on_both_versions():
    for major in ("2", "3"):
        rendered = render(spec_of(major), MountedInputs())
        assert yaml.safe_load(rendered.config)["proxy"] == {"remoteurl": HUB}
        assert rendered.proxy is not None and rendered.proxy.username is None


def test_credentials_and_the_3x_fields(tmp_path):
    write_secret_dir(tmp_path / "proxy", {"username": "berth\n", "password": "dckr_pat_s3cret\n"})
    spec = spec_of("3", credentials={"secretName": "hub"}, ttl="72h", cacheWriteTimeout="1m")
    inputs = read_inputs(spec, tmp_path)
    rendered = render(spec, inputs)
    assert yaml.safe_load(rendered.config)["proxy"] == {
        "remoteurl": HUB, "username": "berth", "password": "dckr_pat_s3cret", "ttl": "72h",
        "cachewritetimeout": "1m"}
    assert "s3cret" not in repr(inputs) and "s3cret" not in repr(rendered) and "s3cret" not in repr(rendered.proxy)
    # The same spec, told --distribution 2: refused naming the field.
    with pytest.raises(InputError) as caught:
        render(spec, inputs, distribution="2")
    assert caught.value.source == "spec.config.proxy.ttl"


def test_a_new_password_restarts_the_registry(tmp_path):
    spec = spec_of("2", credentials={"secretName": "hub"})
    old = render(spec, MountedInputs(proxy_username="berth", proxy_password="one"))
    new = render(spec, MountedInputs(proxy_username="berth", proxy_password="two"))
    assert new.restart_needed(old) and new.identity != old.identity


@pytest.mark.parametrize(("keys", "problem"), [
    ({"username": "berth"}, "proxy/password"),
    ({"password": "pw"}, "proxy/username"),
    ({"username": "   \n", "password": "pw"}, "proxy/username: is empty"),
])
def test_a_credentials_secret_without_both_keys_is_refused_naming_the_key(tmp_path, keys, problem):
    write_secret_dir(tmp_path / "proxy", keys)
    with pytest.raises(InputError) as caught:
        read_inputs(spec_of("3", credentials={"secretName": "hub"}), tmp_path)
    assert str(caught.value).startswith(problem)


def test_credentials_not_mounted_are_refused():
    with pytest.raises(InputError) as caught:
        render(spec_of("3", credentials={"secretName": "hub"}), MountedInputs())
    assert caught.value.source == "spec.config.proxy.credentials.secretName"
