"""Pre-flight of token auth's trust: a bundle of PEM certificates (at least one, none expired, a warning
within 7 days) and a JWKS with a key the allowed algorithms verify; errors name where the file came from."""

from __future__ import annotations

import datetime
import json

import pytest

from berth_agent.apply.preflight import check_render
from berth_agent.apply.preflight_token import check_bundle, check_jwks
from berth_agent.core.errors import PreflightError
from berth_agent.mounted.mounts import MountedInputs
from berth_agent.render.config import render
from berth_agent.render.paths import TOKEN_BUNDLE_FILE
from berth_api import Registry
from support.services.certs import self_signed
from support.services.token_issuer import TestCA, jwks

WHERE = "spec.config.auth.token.rootCertBundle (ConfigMap trust key ca.pem)"
NOW = datetime.datetime.now(datetime.UTC)


def test_a_good_bundle_of_two_passes_silently():
    assert check_bundle(TestCA().cert_pem + TestCA(kind="ec").cert_pem, WHERE) == []


@pytest.mark.parametrize(("data", "problem"), [
    (b"not a certificate at all", "holds no PEM certificate"),
    (b"", "holds no PEM certificate"),
    (b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n", "certificate 1 cannot be read"),
    (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "certificate 1 cannot be read"),
])
def test_a_bundle_that_is_not_pem_certificates_is_refused(data, problem):
    with pytest.raises(PreflightError) as caught:
        check_bundle(data, WHERE)
    assert str(caught.value) == f"{WHERE}: {problem}"


def test_a_private_key_in_the_bundle_is_refused_without_quoting_it():
    _, key = self_signed("oops")
    with pytest.raises(PreflightError) as caught:
        check_bundle(TestCA().cert_pem + key, WHERE)
    assert "PEM block 2 is not a CERTIFICATE" in str(caught.value)
    assert key.decode().splitlines()[1] not in str(caught.value)


def test_an_expired_certificate_is_refused_and_one_ending_soon_warned():
    expired = TestCA(not_before=NOW - datetime.timedelta(days=40))
    with pytest.raises(PreflightError, match="certificate 2 expired at"):
        check_bundle(TestCA().cert_pem + expired.cert_pem, WHERE)
    soon = TestCA(valid_for=datetime.timedelta(days=3))
    (warning,) = check_bundle(soon.cert_pem, WHERE)
    assert warning.startswith(f"{WHERE}: certificate 1 expires at") and "days" in warning


def test_a_jwks_needs_a_key_the_algorithms_allow():
    ca = TestCA()
    rsa, ec = ca.issue("RS256"), ca.issue("ES256")
    check_jwks(jwks(rsa, ec), WHERE)
    check_jwks(jwks(ec), WHERE, ["ES256"])
    with pytest.raises(PreflightError, match="no signing key that the allowed algorithms"):
        check_jwks(jwks(ec), WHERE, ["RS256", "PS256"])
    encryption = {**rsa.jwk(), "use": "enc"}
    no_alg = {k: v for k, v in rsa.jwk().items() if k != "alg"}
    check_jwks(json.dumps({"keys": [no_alg]}).encode(), WHERE, ["PS256"])  # RSA without alg: PS256 verifies it
    for document, problem in [
        (b"{", "is not JSON"),
        (b'{"keys": []}', "no \"keys\" list"),
        (b"[1, 2]", "no \"keys\" list"),
        (json.dumps({"keys": [encryption]}).encode(), "no signing key"),
        (json.dumps({"keys": [{"kty": "RSA", "alg": "RS256"}]}).encode(), "no signing key"),
        (b"[" * 100 + b"]" * 100, "nested deeper"),
    ]:
        with pytest.raises(PreflightError) as caught:
            check_jwks(document, WHERE)
        assert problem in str(caught.value) and str(caught.value).startswith(WHERE)


def test_check_render_checks_the_trust_only_when_it_changed():
    spec = Registry.model_validate({"spec": {"config": {"storage": {"inmemory": {}}, "auth": {"token": {
        "realm": "https://a.example/token", "service": "s", "issuer": "i",
        "rootCertBundle": {"configMap": {"name": "trust", "field": "ca.pem"}}}}}}}).spec
    good = render(spec, MountedInputs(token_bundle=TestCA().cert_pem))
    assert check_render(good, None) == []
    bad = render(spec, MountedInputs(token_bundle=b"garbage"))
    with pytest.raises(PreflightError) as caught:
        check_render(bad, good)
    assert str(caught.value) == f"{WHERE}: holds no PEM certificate"
    soon = render(spec, MountedInputs(token_bundle=TestCA(valid_for=datetime.timedelta(days=2)).cert_pem))
    (warning,) = check_render(soon, good)
    assert warning.reason == "CertificateExpiresSoon" and WHERE in warning.message
    assert check_render(soon, soon) == []  # unchanged: not checked again (and not warned again)
    assert TOKEN_BUNDLE_FILE in soon.files


def test_silly_is_warned_when_it_comes_into_use():
    silly = render(Registry.model_validate({"spec": {"config": {"storage": {"inmemory": {}, "auth": {
        "silly": {"realm": "r", "service": "s"}}}}}}).spec, MountedInputs())
    plain = render(Registry.model_validate({"spec": {"config": {"storage": {"inmemory": {}}}}}).spec, MountedInputs())
    (warning,) = check_render(silly, None)
    assert warning.reason == "SillyAuthInUse" and "for tests only" in warning.message
    assert [w.reason for w in check_render(silly, plain)] == ["SillyAuthInUse"]
    assert check_render(plain, silly) == []
