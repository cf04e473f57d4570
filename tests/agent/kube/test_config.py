"""kube/config.py: which API server and credentials `berth-agent run` uses: `--kube-host`, `--kubeconfig`, the pod's
ServiceAccount, else $KUBECONFIG; what of a kubeconfig is read, and what is refused. Against the real kube-apiserver's
TLS and credentials: test_client_apiserver.py."""

from __future__ import annotations

import base64
import ssl
import tempfile

import pytest
import yaml

from berth_agent.kube.config import ConfigError, StaticToken, TokenFile, from_kubeconfig, in_cluster, load
from support.services.certs import private_ca_and_leaf


@pytest.fixture
def service_account(tmp_path):
    """A pod's /var/run/secrets/kubernetes.io/serviceaccount: token, ca.crt."""
    root = tmp_path / "serviceaccount"
    root.mkdir()
    (root / "token").write_text("pod-token\n")
    (root / "ca.crt").write_bytes(private_ca_and_leaf()[0])
    return root


def kubeconfig(path, *, cluster=None, user=None, name="test", current=True):
    document = {"apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": name, "cluster": {"server": "https://127.0.0.1:6443", **(cluster or {})}}],
                "users": [{"name": name, "user": user or {}}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": name}}]}
    if current:
        document["current-context"] = name
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_plain_host_has_no_credentials():
    config = load("http://127.0.0.1:8001")
    assert (config.scheme, config.host, config.port, config.prefix) == ("http", "127.0.0.1", 8001, "")
    assert config.ssl_context is None and config.token is None
    with pytest.raises(ConfigError, match="not an http"):
        load("127.0.0.1:8001")


def test_in_cluster_reads_the_service_account(service_account):
    config = in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, service_account)
    assert config.server == "https://10.96.0.1:443" and config.token() == "pod-token"
    assert config.ssl_context.verify_mode == ssl.CERT_REQUIRED and config.ssl_context.check_hostname
    assert len(config.ssl_context.get_ca_certs()) == 1  # the mounted CA, not the system's trust store
    ipv6 = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, service_account)
    assert (ipv6.server, ipv6.host) == ("https://[fd00::1]:443", "fd00::1")


def test_not_in_a_pod_is_a_config_error(service_account):
    with pytest.raises(ConfigError, match="not in a pod"):
        in_cluster({}, service_account)
    (service_account / "token").write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, service_account)


def test_without_a_pod_the_kubeconfig_files_are_merged(tmp_path):
    first = kubeconfig(tmp_path / "a", user={"token": "from-a"}, current=False)
    second = kubeconfig(tmp_path / "b", user={"token": "from-b"}, cluster={"insecure-skip-tls-verify": True})
    config = load(environ={"KUBECONFIG": f"{first}:{tmp_path / 'missing'}:{second}"})
    # The first file to name an entry wins it (kubectl's rule); the current context comes from the second.
    assert config.token() == "from-a" and config.ssl_context.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ConfigError, match="no kubeconfig at"):
        load(environ={"KUBECONFIG": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="no current-context"):
        load(environ={"KUBECONFIG": str(first)})


def test_relative_paths_are_relative_to_the_kubeconfig(tmp_path):
    ca, _, _ = private_ca_and_leaf()
    (tmp_path / "ca.pem").write_bytes(ca)
    (tmp_path / "token").write_text("file-token")
    config = from_kubeconfig([kubeconfig(tmp_path / "config", cluster={"certificate-authority": "ca.pem"},
                                         user={"tokenFile": "token"})])
    assert isinstance(config.token, TokenFile) and config.token() == "file-token"
    assert len(config.ssl_context.get_ca_certs()) == 1
    inline = from_kubeconfig([kubeconfig(tmp_path / "inline", user={"token": "t"}, cluster={
        "certificate-authority-data": base64.b64encode(ca).decode(), "server": "https://proxy:8443/k8s/c1/"})])
    assert isinstance(inline.token, StaticToken) and inline.prefix == "/k8s/c1"
    assert len(inline.ssl_context.get_ca_certs()) == 1


@pytest.mark.parametrize(("where", "field"), [("user", "exec"), ("user", "auth-provider"), ("user", "password"),
                                              ("cluster", "proxy-url")])
def test_other_kinds_of_credentials_are_refused_naming_the_field(tmp_path, where, field):
    entries = {where: {field: {"command": "x"} if field == "exec" else "x"}}
    with pytest.raises(ConfigError, match=f"the {where}'s {field} is not supported"):
        from_kubeconfig([kubeconfig(tmp_path / "config", **entries)])


def test_client_key_data_goes_through_a_private_file_removed_at_once(tmp_path, monkeypatch):
    ca, cert, key = private_ca_and_leaf()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    user = {"client-certificate-data": base64.b64encode(cert).decode(),
            "client-key-data": base64.b64encode(key).decode()}
    config = from_kubeconfig([kubeconfig(tmp_path / "config", user=user)])
    assert config.ssl_context is not None
    assert list((tmp_path / "tmp").iterdir()) == []  # loaded, and gone
    with pytest.raises(ConfigError, match="without its client key"):
        from_kubeconfig([kubeconfig(tmp_path / "nokey", user={"client-certificate-data": user[
            "client-certificate-data"]})])
    with pytest.raises(ConfigError, match="cannot load the client certificate"):
        from_kubeconfig([kubeconfig(tmp_path / "wrong", user={**user, "client-key-data": base64.b64encode(
            private_ca_and_leaf()[2]).decode()})])  # a key of another certificate
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_token_file_that_vanishes_for_a_moment_keeps_the_last_token(tmp_path):
    path = tmp_path / "token"
    path.write_text("one")
    token = TokenFile(path)
    assert token() == "one"
    path.unlink()
    assert token() == "one"
    path.write_text("two")
    assert token() == "two"
    with pytest.raises(OSError):
        TokenFile(tmp_path / "never")()
