"""Token and silly auth rendered: the options each Distribution knows, the trust files beside
config.yml, a restart when only they change, and the 3.x-only fields refused for 2.8."""

from __future__ import annotations

import pytest
import yaml

from berth_agent.core.errors import InputError
from berth_agent.mounted.mounts import MountedInputs, read_inputs
from berth_agent.render.config import RenderPaths, render
from berth_agent.render.paths import HTPASSWD_FILE, TOKEN_BUNDLE_FILE, TOKEN_JWKS_FILE
from berth_api import Registry
from support.registries.secretdir import write_secret_dir

BUNDLE = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
JWKS = b'{"keys": []}'
TOKEN = {"realm": "https://auth.example.com/token", "service": "registry.example.com",
         "issuer": "auth.example.com", "rootCertBundle": {"configMap": {"name": "issuer-trust", "field": "ca.pem"}}}


def spec_of(major: str = "3", **auth):
    return Registry.model_validate({"spec": {"image": f"registry:{major}", "config": {
        "storage": {"inmemory": {}}, "auth": auth}}}).spec


def test_token_with_a_bundle_on_both_versions(tmp_path):
    for major in ("2", "3"):
        rendered = render(spec_of(major, token=TOKEN), MountedInputs(token_bundle=BUNDLE),
                          paths=RenderPaths(config_dir=tmp_path))
        assert yaml.safe_load(rendered.config)["auth"] == {"token": {
            "realm": "https://auth.example.com/token", "service": "registry.example.com",
            "issuer": "auth.example.com", "rootcertbundle": str(tmp_path / TOKEN_BUNDLE_FILE),
            "autoredirect": False}}
        assert rendered.files == {TOKEN_BUNDLE_FILE: BUNDLE}
        assert rendered.origins[TOKEN_BUNDLE_FILE] == (
            "spec.config.auth.token.rootCertBundle (ConfigMap issuer-trust key ca.pem)")


def test_the_3x_fields_and_a_jwks_from_a_secret(tmp_path):
    token = {**TOKEN, "jwks": {"secret": {"name": "issuer-keys", "field": "jwks.json"}}, "autoRedirect": True,
             "signingAlgorithms": ["RS256", "ES256"], "autoRedirectPath": "/auth/token"}
    rendered = render(spec_of("3", token=token), MountedInputs(token_bundle=BUNDLE, token_jwks=JWKS),
                      paths=RenderPaths(config_dir=tmp_path))
    section = yaml.safe_load(rendered.config)["auth"]["token"]
    assert section["jwks"] == str(tmp_path / TOKEN_JWKS_FILE) and section["autoredirect"] is True
    assert section["signingalgorithms"] == ["RS256", "ES256"] and section["autoredirectpath"] == "/auth/token"
    assert rendered.files == {TOKEN_BUNDLE_FILE: BUNDLE, TOKEN_JWKS_FILE: JWKS}
    # The spec says 3; an agent told --distribution 2 refuses, naming the field.
    with pytest.raises(InputError) as caught:
        render(spec_of("3", token=token), MountedInputs(token_bundle=BUNDLE, token_jwks=JWKS), distribution="2")
    assert "spec.config.auth.token.jwks" in str(caught.value) and "Distribution 3" in str(caught.value)


def test_silly_is_rendered_as_given():
    rendered = render(spec_of(silly={"realm": "test-realm", "service": "test"}), MountedInputs())
    assert yaml.safe_load(rendered.config)["auth"] == {"silly": {"realm": "test-realm", "service": "test"}}


def test_a_bundle_change_alone_needs_a_restart_and_htpasswd_alone_does_not():
    spec = spec_of(token=TOKEN)
    first = render(spec, MountedInputs(token_bundle=BUNDLE))
    second = render(spec, MountedInputs(token_bundle=BUNDLE + BUNDLE))
    assert first.config == second.config and second.restart_needed(first)
    users = Registry.model_validate({"spec": {"config": {"storage": {"inmemory": {}, "auth": {
        "htpasswd": {"secret": {"name": "u", "field": "htpasswd"}}}}}}}).spec
    line = b"alice:$2y$04$" + b"a" * 53 + b"\n"
    a, b = render(users, MountedInputs(htpasswd=line)), render(users, MountedInputs(htpasswd=line + line))
    assert HTPASSWD_FILE in b.files and not b.restart_needed(a)


def test_the_bundle_and_jwks_are_read_from_their_volumes(tmp_path):
    write_secret_dir(tmp_path / "token-bundle", {"ca.pem": BUNDLE})
    write_secret_dir(tmp_path / "token-jwks", {"jwks.json": JWKS})
    token = {**TOKEN, "jwks": {"configMap": {"name": "keys", "field": "jwks.json"}}}
    inputs = read_inputs(spec_of(token=token), tmp_path)
    assert inputs.token_bundle == BUNDLE and inputs.token_jwks == JWKS
    assert "BEGIN" not in repr(inputs)
    with pytest.raises(InputError) as caught:
        read_inputs(spec_of(token={**TOKEN, "rootCertBundle": {"configMap": {"name": "x", "field": "other.pem"}}}),
                    tmp_path)
    message = str(caught.value)
    assert "token-bundle/other.pem" in message and "ConfigMap x key other.pem" in message


def test_the_bundle_is_bounded_at_4_mib(tmp_path):
    write_secret_dir(tmp_path / "token-bundle", {"ca.pem": BUNDLE * (4 * 1024 * 1024 // len(BUNDLE) + 1)})
    with pytest.raises(InputError, match="token-bundle/ca.pem"):
        read_inputs(spec_of(token=TOKEN), tmp_path)
