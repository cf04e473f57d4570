"""The agent's messages about the HTTPS pair name the field the user wrote: spec.http.tls.secretName
with the user's Secret, or spec.http.tls.issuerRef with its issuer and the Certificate and Secret Berth made for
it (named once, berth_api.server.certificate_name, which the operator's builder uses too). Never secretName for
a pair that comes from an issuer."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from berth_agent.apply.preflight import check_render
from berth_agent.apply.preflight_tls import check_pair
from berth_agent.core.errors import InputError, PreflightError
from berth_agent.core.health import Health
from berth_agent.mounted.mounts import MountedInputs, read_inputs
from berth_agent.pipeline.coordinator import Pipeline, PipelineSettings
from berth_agent.pipeline.report import LogReporter
from berth_agent.render.config import TLS_CERT_FILE, TLS_KEY_FILE, render
from berth_api import Registry
from berth_api.server import certificate_name
from berth_operator.builders import ClusterFacts, certificate
from support.registries.secretdir import write_secret_dir
from support.services.certs import self_signed

ISSUED = {"http": {"tls": {"issuerRef": {"name": "ca", "kind": "ClusterIssuer"}}}}
OWN = {"http": {"tls": {"secretName": "edge-tls"}}}
ISSUED_ORIGIN = ("spec.http.tls.issuerRef, ClusterIssuer ca: the Secret <registry>-tls of the Certificate "
                 "<registry>-tls Berth made")


def registry(spec: dict) -> Registry:
    return Registry.model_validate({"metadata": {"name": "edge", "namespace": "ns", "uid": "u"},
                                    "spec": {"config": {"storage": {"inmemory": {}}}, **spec}})


def test_the_origin_names_the_field_and_the_objects():
    own, issued = registry(OWN).spec.http.tls, registry(ISSUED).spec.http.tls
    assert own.origin() == "spec.http.tls.secretName, Secret edge-tls"
    assert issued.field == "spec.http.tls.issuerRef"
    assert issued.origin() == ISSUED_ORIGIN
    assert issued.origin("edge") == ("spec.http.tls.issuerRef, ClusterIssuer ca: the Secret edge-tls of the "
                                     "Certificate edge-tls Berth made")


def test_the_certificate_the_operator_makes_is_the_one_the_agent_names():
    reg = registry(ISSUED)
    made = certificate.build(reg, ClusterFacts("img"))
    assert made["metadata"]["name"] == made["spec"]["secretName"] == certificate_name("edge")
    assert certificate.tls_secret_name(reg) == certificate_name("edge")


@pytest.mark.parametrize(("spec", "origin"), [(OWN, "spec.http.tls.secretName, Secret edge-tls"),
                                              (ISSUED, ISSUED_ORIGIN)])
def test_a_pair_not_mounted_names_where_it_was_asked_for(spec, origin, tmp_path):
    with pytest.raises(InputError) as caught:
        read_inputs(registry(spec).spec, tmp_path)
    assert caught.value.source == "tls/tls.crt"
    assert caught.value.message == f"the Secret volume tls/ is not mounted (asked for by {origin})"
    if spec is ISSUED:
        assert "secretName" not in str(caught.value)


def test_a_key_missing_from_the_certificates_secret_names_the_issuer(tmp_path):
    cert, _ = self_signed("edge")
    write_secret_dir(tmp_path / "tls", {"tls.crt": cert, "ca.crt": cert})  # as cert-manager lays it out, no key
    with pytest.raises(InputError) as caught:
        read_inputs(registry(ISSUED).spec, tmp_path)
    assert caught.value.source == "tls/tls.key" and ISSUED_ORIGIN in caught.value.message


def test_render_without_the_pair_names_the_field_and_records_the_origin():
    with pytest.raises(InputError) as caught:
        render(registry(ISSUED).spec, MountedInputs())
    assert caught.value.source == "spec.http.tls.issuerRef"
    assert "the Certificate <registry>-tls Berth made" in caught.value.message
    with pytest.raises(InputError) as caught:
        render(registry(OWN).spec, MountedInputs())
    assert str(caught.value) == ("spec.http.tls.secretName: is set but no certificate and key were read "
                                 "(Secret edge-tls)")
    rendered = render(registry(ISSUED).spec, MountedInputs(tls_cert=b"C", tls_key=b"K"))
    assert rendered.origins[TLS_CERT_FILE] == rendered.origins[TLS_KEY_FILE] == ISSUED_ORIGIN


def test_the_pre_flight_of_an_issued_pair_names_its_origin(tmp_path):
    cert, key = self_signed("edge", valid_for=-datetime.timedelta(days=1))  # a renewal that came too late
    rendered = render(registry(ISSUED).spec, MountedInputs(tls_cert=cert, tls_key=key))
    with pytest.raises(PreflightError) as caught:
        check_pair(cert, key, scratch_dir=tmp_path, where=rendered.origins[TLS_CERT_FILE])
    assert str(caught.value).startswith(f"{ISSUED_ORIGIN}: the certificate in tls.crt expired at")
    _, other = self_signed("other")
    with pytest.raises(PreflightError) as caught:
        check_pair(cert, other, scratch_dir=tmp_path, where=rendered.origins[TLS_CERT_FILE])
    assert str(caught.value) == f"{ISSUED_ORIGIN}: the private key in tls.key does not match the certificate in tls.crt"


def test_check_render_names_the_issuer_of_an_issued_pair(tmp_path):
    cert, key = self_signed("edge", valid_for=-datetime.timedelta(days=1))
    rendered = render(registry(ISSUED).spec, MountedInputs(tls_cert=cert, tls_key=key))
    with pytest.raises(PreflightError) as caught:
        check_render(rendered, None, scratch_dir=tmp_path)
    assert str(caught.value).startswith(f"{ISSUED_ORIGIN}: the certificate in tls.crt expired at")


def test_given_the_registrys_name_the_messages_name_the_certificate(tmp_path):
    named = "spec.http.tls.issuerRef, ClusterIssuer ca: the Secret edge-tls of the Certificate edge-tls Berth made"
    with pytest.raises(InputError) as caught:
        read_inputs(registry(ISSUED).spec, tmp_path, registry="edge")
    assert named in caught.value.message and "<registry>" not in caught.value.message
    with pytest.raises(InputError) as caught:
        render(registry(ISSUED).spec, MountedInputs(), registry="edge")
    assert "the Secret edge-tls of the Certificate edge-tls" in str(caught.value)
    rendered = render(registry(ISSUED).spec, MountedInputs(tls_cert=b"C", tls_key=b"K"), registry="edge")
    assert rendered.origins[TLS_CERT_FILE] == named


def test_the_agent_names_the_certificate_of_its_own_registry(tmp_path):
    settings = PipelineSettings(config_dir=tmp_path / "config", data_dir=tmp_path / "data",
                                mount_root=tmp_path / "mounts")
    pipeline = Pipeline(settings, LogReporter("test"), Health())
    pipeline.registry = {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
                         "metadata": {"name": "edge", "namespace": "ns"},
                         "spec": {"config": {"storage": {"inmemory": {}}}, **ISSUED}}
    result = asyncio.run(pipeline.renderer.current(pipeline.registry, None))
    assert result.rendered is None
    assert "the Secret edge-tls of the Certificate edge-tls Berth made" in result.error, result.error
