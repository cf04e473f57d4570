"""TLS certificate rotation: restart in place onto the new certificate; a certificate that does not match its key
is a config the registry refuses at start (the renderer cannot tell), so the agent rolls back."""

from __future__ import annotations

import datetime
import ipaddress
import ssl

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from support.pod import filesystem_spec, registry_object
from support.secretdir import swap_secret_dir, write_secret_dir
from support.supervisor import wait_for


def self_signed(common_name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


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

    cert_b, key_b = self_signed("cert-b")
    swap_secret_dir(pod.mounts / "tls", {"tls.crt": cert_b, "tls.key": key_b})
    wait_for(lambda: served_name(pod) == "cert-b", what="the new certificate to be served")
    wait_for(lambda: pod.actions("restarted"), what="the agent to record the restart")
    assert pod.metric("reloads_total") == 1
    assert (pod.config_dir / "tls" / "tls.key").read_bytes() == key_b

    # Certificate of one pair, key of another: PEM-valid, so it renders; the registry refuses it at start.
    cert_c, _ = self_signed("cert-c")
    _, key_d = self_signed("cert-d")
    swap_secret_dir(pod.mounts / "tls", {"tls.crt": cert_c, "tls.key": key_d})
    wait_for(lambda: pod.actions("rolled back"), timeout=40, what=f"a rollback\n{pod.agent_log_text()}")
    wait_for(lambda: served_name(pod) == "cert-b", what="the last good certificate to be served again")
    assert (pod.config_dir / "tls" / "tls.key").read_bytes() == key_b
    assert pod.metric("rollbacks_total") == 1

    cert_e, key_e = self_signed("cert-e")
    swap_secret_dir(pod.mounts / "tls", {"tls.crt": cert_e, "tls.key": key_e})
    wait_for(lambda: served_name(pod) == "cert-e", what="recovery with a matching pair")
    wait_for(lambda: len(pod.actions("restarted")) == 2, what="the agent to record the second restart")
    assert supervisor.alive() and pod.supervisor.pid == supervisor.pid
    log = pod.agent_log_text()
    for key in (key_a, key_b, key_d, key_e):
        assert key.decode().splitlines()[1] not in log
