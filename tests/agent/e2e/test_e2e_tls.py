"""TLS certificate rotation: restart in place onto the new certificate. A certificate that does not match its
key (PEM-valid, so it renders) is refused by the pre-flight before any restart: the registry, which
would refuse it at start, keeps serving the last good pair without a failed request."""

from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from support.common.polling import wait_for
from support.registries.pod import filesystem_spec, registry_object
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.services.certs import key_body_line, self_signed
from support.traffic.request_loop import RequestLoop

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run


def served_name(pod) -> str | None:
    try:
        pem = ssl.get_server_certificate(("127.0.0.1", pod.port), timeout=5)
    except OSError:
        return None
    cert = x509.load_pem_x509_certificate(pem.encode())
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def test_certificate_rotation_and_a_mismatched_pair(pod):
    cert_a, key_a = self_signed("cert-a")
    write_secret_dir(pod.mounts / "tls", {"tls.crt": cert_a, "tls.key": key_a})
    pod.tls = True
    pod.write_registry_file(registry_object(filesystem_spec(pod.port, http={
        "addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s", "tls": {"secretName": "registry-tls"}})))
    pod.start_agent()
    supervisor = pod.start_supervisor()
    pod.wait_serving()
    assert served_name(pod) == "cert-a"
    (first,) = wait_for(pod.config_info, what="config_info")
    assert first == pod.disk_identity()

    cert_b, key_b = self_signed("cert-b")
    swap_secret_dir(pod.mounts / "tls", {"tls.crt": cert_b, "tls.key": key_b})
    wait_for(lambda: served_name(pod) == "cert-b", what="the new certificate to be served")
    wait_for(lambda: pod.actions("restarted"), what="the agent to record the restart")
    assert pod.metric("reloads_total") == 1
    assert (pod.config_dir / "tls" / "tls.key").read_bytes() == key_b
    # config.yml is as it was; the state is not: the metric and the log line name the new pair's.
    second = pod.disk_identity()
    assert second != first and pod.config_info() == [second]
    assert pod.actions("restarted")[-1]["config_hash"] == second

    # Certificate of one pair, key of another: PEM-valid, so it renders; the registry would refuse it at start.
    pid, starts = pod.registry_pid(), pod.registry_starts()
    cert_c, _ = self_signed("cert-c")
    _, key_d = self_signed("cert-d")
    with RequestLoop("127.0.0.1", pod.port, tls=True) as loop:
        wait_for(lambda: loop.stats.requests > 5, what="the client to be asking")
        swap_secret_dir(pod.mounts / "tls", {"tls.crt": cert_c, "tls.key": key_d})
        error = wait_for(lambda: next((line["error"] for line in pod.actions("failed")
                                       if "spec.http.tls.secretName" in line.get("error", "")), None),
                         timeout=30, what=lambda: f"the pre-flight refusal\n{pod.agent_log_text()}")
        assert "does not match the certificate" in error
        # The refused state is named, not the one that keeps serving (and keeps config_info).
        assert error.startswith("config ") and second[:12] not in error, error
        assert pod.config_info() == [second]
        seen = loop.stats.requests
        wait_for(lambda: loop.stats.requests > seen + 5, what="more requests after the refusal")
    assert loop.stats.failures == [], loop.stats.failures
    assert pod.registry_pid() == pid and pod.registry_starts() == starts, "the registry was restarted"
    assert served_name(pod) == "cert-b"
    assert (pod.config_dir / "tls" / "tls.key").read_bytes() == key_b
    assert pod.metric("reload_failures_total", 'reason="preflight"') >= 1
    assert pod.metric("rollbacks_total") == 0 and not pod.actions("rolled back")

    # A matching pair that ends within 7 days: applied, with a warning Event.
    cert_e, key_e = self_signed("cert-e", valid_for=datetime.timedelta(days=3))
    swap_secret_dir(pod.mounts / "tls", {"tls.crt": cert_e, "tls.key": key_e})
    wait_for(lambda: served_name(pod) == "cert-e", what="recovery with a matching pair")
    wait_for(lambda: len(pod.actions("restarted")) == 2, what="the agent to record the second restart")
    warnings = [line for line in pod.actions("pre-flight warning") if line.get("reason") == "CertificateExpiresSoon"]
    assert warnings and warnings[0]["level"] == "warning" and "spec.http.tls.secretName" in warnings[0]["warning"]
    assert "expires at" in warnings[0]["warning"]
    assert supervisor.alive() and pod.supervisor.pid == supervisor.pid
    log = pod.agent_log_text()
    for key in (key_a, key_b, key_d, key_e):
        assert key_body_line(key) not in log
