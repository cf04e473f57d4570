"""spec.config.notifications rendered: the registry's one endpoint is the pod's outbox; the
endpoints, their header values read from the mounted Secret (never in a repr or an error), go to the outbox's file
beside config.yml; the 3.x-only fields refused for Distribution 2 naming the field; a rotated header value or a new
endpoint restarts no registry."""

from __future__ import annotations

import json

import pytest
import yaml

from berth_agent.core.errors import InputError
from berth_agent.mounted.mounts import MountedInputs, read_inputs
from berth_agent.render.config import OUTBOX_ENDPOINT, render
from berth_agent.render.paths import OUTBOX_FILE, RenderPaths
from berth_api import Registry
from support.registries.secretdir import swap_secret_dir, write_secret_dir

URL = "http://127.0.0.1:9999/events"


def spec_of(major: str = "3", **notifications):
    return Registry.model_validate({"spec": {"image": f"registry:{major}", "config": {
        "storage": {"inmemory": {}}, "notifications": notifications}}}).spec


RELAY = {"name": OUTBOX_ENDPOINT, "disabled": False, "url": RenderPaths.outbox_url, "timeout": "5s", "threshold": 3,
         "backoff": "100ms"}


def outbox_of(rendered) -> list[dict]:
    return json.loads(rendered.files[OUTBOX_FILE])["endpoints"]


def test_the_registry_posts_to_the_outbox_which_holds_the_endpoints_on_both_versions():
    for major in ("2", "3"):
        spec = spec_of(major, endpoints=[{"name": "scan", "url": URL, "headers": [{"name": "X-Team", "value": "a"}],
                                          "ignoredMediaTypes": ["application/octet-stream"], "threshold": 3}])
        rendered = render(spec, MountedInputs())
        section = yaml.safe_load(rendered.config)["notifications"]
        # What every endpoint ignores, the registry need not send.
        assert section == {"endpoints": [{**RELAY, "ignoredmediatypes": ["application/octet-stream"]}]}
        assert outbox_of(rendered) == [{
            "name": "scan", "url": URL, "headers": {"X-Team": ["a"]}, "timeout": 1.0, "threshold": 3,
            "backoff": 1.0, "ignoredMediaTypes": ["application/octet-stream"], "ignoredActions": []}]


def test_the_relay_url_follows_the_agent_s_outbox_address_and_disabled_endpoints_make_no_events():
    spec = spec_of("3", endpoints=[{"name": "scan", "url": URL}])
    rendered = render(spec, MountedInputs(), paths=RenderPaths(outbox_url="http://127.0.0.1:18083/events"))
    assert yaml.safe_load(rendered.config)["notifications"]["endpoints"][0]["url"] == "http://127.0.0.1:18083/events"
    off = render(spec_of("3", endpoints=[{"name": "scan", "url": URL, "disabled": True}]), MountedInputs())
    assert "notifications" not in yaml.safe_load(off.config) and outbox_of(off) == []


def test_header_values_from_the_secret_and_the_3x_fields(tmp_path):
    write_secret_dir(tmp_path / "notifications", {"token": "Bearer s3cret-token\n", "other": "x"})
    spec = spec_of("3", secretName="hooks", events={"includeReferences": True}, endpoints=[
        {"name": "scan", "url": URL, "headers": [{"name": "Authorization", "secretKey": "token"},
                                                 {"name": "X-Other", "secretKey": "other"},
                                                 {"name": "X-Other", "value": "plain"}],
         "ignore": {"mediaTypes": ["application/vnd.oci.image.index.v1+json"], "actions": ["pull"]}},
        {"name": "audit", "url": URL, "ignore": {"actions": ["pull", "mount"]}}])
    inputs = read_inputs(spec, tmp_path)
    rendered = render(spec, inputs)
    section = yaml.safe_load(rendered.config)["notifications"]
    assert b"s3cret" not in rendered.config  # the registry never holds a header value
    assert section["endpoints"] == [{**RELAY, "ignore": {"mediatypes": [], "actions": ["pull"]}}]
    scan, audit = outbox_of(rendered)
    assert scan["headers"] == {"Authorization": ["Bearer s3cret-token"], "X-Other": ["x", "plain"]}
    assert scan["ignoredMediaTypes"] == ["application/vnd.oci.image.index.v1+json"]
    assert scan["ignoredActions"] == ["pull"]
    assert audit["ignoredActions"] == ["mount", "pull"]
    assert section["events"] == {"includereferences": True}
    assert "s3cret" not in repr(inputs) and "s3cret" not in repr(rendered)
    # The same spec, told --distribution 2: refused naming the field.
    with pytest.raises(InputError) as refused:
        render(spec, inputs, distribution="2")
    assert "spec.config.notifications.endpoints[].ignore" in str(refused.value)

    # A rotated token is the outbox's alone: a new state, and no restart of the registry.
    swap_secret_dir(tmp_path / "notifications", {"token": "Bearer rotated\n", "other": "x"})
    again = render(spec, read_inputs(spec, tmp_path))
    assert again.identity != rendered.identity and again.config == rendered.config
    assert not again.restart_needed(rendered) and not again.retires_credential(rendered)


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
