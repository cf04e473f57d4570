"""spec.config.notifications rendered (issue 21): Distribution's notifications section, header values read from the
mounted Secret (never in a repr or an error), the 3.x-only fields refused for Distribution 2 naming the field, and
a restart when a header value changes (the registry reads the section once, at start)."""

from __future__ import annotations

import pytest
import yaml

from berth_agent.core.errors import InputError
from berth_agent.inputs.mounts import MountedInputs, read_inputs
from berth_agent.render.config import render
from berth_api import Registry
from support.registries.secretdir import swap_secret_dir, write_secret_dir

URL = "http://127.0.0.1:9999/events"


def spec_of(major: str = "3", **notifications):
    return Registry.model_validate({"spec": {"image": f"registry:{major}", "config": {
        "storage": {"inmemory": {}}, "notifications": notifications}}}).spec


def test_plain_endpoints_on_both_versions():
    for major in ("2", "3"):
        spec = spec_of(major, endpoints=[{"name": "scan", "url": URL, "headers": [{"name": "X-Team", "value": "a"}],
                                          "ignoredMediaTypes": ["application/octet-stream"], "threshold": 3}])
        section = yaml.safe_load(render(spec, MountedInputs()).config)["notifications"]
        assert section == {"endpoints": [{
            "name": "scan", "disabled": False, "url": URL, "headers": {"X-Team": ["a"]}, "timeout": "1s",
            "threshold": 3, "backoff": "1s", "ignoredmediatypes": ["application/octet-stream"]}]}


def test_header_values_from_the_secret_and_the_3x_fields(tmp_path):
    write_secret_dir(tmp_path / "notifications", {"token": "Bearer s3cret-token\n", "other": "x"})
    spec = spec_of("3", secretName="hooks", events={"includeReferences": True}, endpoints=[
        {"name": "scan", "url": URL, "headers": [{"name": "Authorization", "secretKey": "token"},
                                                 {"name": "X-Other", "secretKey": "other"},
                                                 {"name": "X-Other", "value": "plain"}],
         "ignore": {"mediaTypes": ["application/vnd.oci.image.index.v1+json"], "actions": ["pull"]}}])
    inputs = read_inputs(spec, tmp_path)
    rendered = render(spec, inputs)
    section = yaml.safe_load(rendered.config)["notifications"]
    assert section["endpoints"][0]["headers"] == {"Authorization": ["Bearer s3cret-token"], "X-Other": ["x", "plain"]}
    assert section["endpoints"][0]["ignore"] == {"mediatypes": ["application/vnd.oci.image.index.v1+json"],
                                                 "actions": ["pull"]}
    assert section["events"] == {"includereferences": True}
    assert "s3cret" not in repr(inputs) and "s3cret" not in repr(rendered)
    # The same spec, told --distribution 2: refused naming the field.
    with pytest.raises(InputError) as refused:
        render(spec, inputs, distribution="2")
    assert "spec.config.notifications.endpoints[].ignore" in str(refused.value)

    # A rotated token is a new config: the registry reads it at start, so it restarts (hitlessly).
    swap_secret_dir(tmp_path / "notifications", {"token": "Bearer rotated\n", "other": "x"})
    again = render(spec, read_inputs(spec, tmp_path))
    assert again.config != rendered.config and again.restart_needed(rendered)


@pytest.mark.parametrize(("payload", "words"), [
    ({"other": "x"}, "notifications/token"),
    ({"token": "   \n"}, "is empty"),
    ({"token": "Bearer a\r\nX-Injected: 1"}, "line break"),
])
def test_a_bad_key_names_the_volume_and_key_never_the_value(tmp_path, payload, words):
    write_secret_dir(tmp_path / "notifications", payload)
    spec = spec_of("3", secretName="hooks", endpoints=[
        {"name": "scan", "url": URL, "headers": [{"name": "Authorization", "secretKey": "token"}]}])
    with pytest.raises(InputError) as refused:
        read_inputs(spec, tmp_path)
    assert words in str(refused.value) and "Injected" not in str(refused.value)
