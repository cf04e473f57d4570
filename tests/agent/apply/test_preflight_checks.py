"""Pre-flight checks of what the registry reads or reaches at start: the HTTPS pair, a new
listen port, the redis it will use; each refused with a message that names the field and holds no secret."""

from __future__ import annotations

import datetime
import re
import socket
import ssl
import threading

import pytest

from berth_agent.apply.preflight import check_render
from berth_agent.apply.preflight_net import check_bindable, check_redis
from berth_agent.apply.preflight_tls import check_pair, leaf_not_after
from berth_agent.core.errors import PreflightError
from berth_agent.render.config import TLS_CERT_FILE, TLS_KEY_FILE, Rendered
from berth_agent.render.targets import RedisTarget, redis_target
from support.common.ports import free_port
from support.services.certs import key_body_line, self_signed
from support.services.redisserver import running_redis

DAY = datetime.timedelta(days=1)


# ---- the HTTPS pair ---------------------------------------------------------------------------------------------


def test_a_matching_pair_passes_without_warning(tmp_path):
    cert, key = self_signed("good", valid_for=30 * DAY)
    assert check_pair(cert, key, scratch_dir=tmp_path) == []
    assert list(tmp_path.iterdir()) == [], "the key must not stay on disk"


def test_a_certificate_with_another_pairs_key_is_refused(tmp_path):
    cert, _ = self_signed("c")
    _, key = self_signed("d")
    with pytest.raises(PreflightError) as caught:
        check_pair(cert, key, scratch_dir=tmp_path)
    message = str(caught.value)
    assert message.startswith("spec.http.tls.secretName: ")
    assert "does not match the certificate" in message
    assert key_body_line(key) not in message and "PRIVATE KEY" not in message
    assert list(tmp_path.iterdir()) == []


def test_an_expired_certificate_is_refused(tmp_path):
    cert, key = self_signed("old", valid_for=-DAY)
    with pytest.raises(PreflightError, match="spec.http.tls.secretName: the certificate in tls.crt expired at"):
        check_pair(cert, key, scratch_dir=tmp_path)


def test_a_certificate_ending_within_7_days_passes_with_a_warning(tmp_path):
    cert, key = self_signed("soon", valid_for=3 * DAY)
    warnings = check_pair(cert, key, scratch_dir=tmp_path)
    assert len(warnings) == 1 and "expires at" in warnings[0] and "spec.http.tls.secretName" in warnings[0]
    assert check_pair(*self_signed("later", valid_for=8 * DAY), scratch_dir=tmp_path) == []


def test_an_encrypted_key_is_refused_without_prompting(tmp_path):
    cert, key = self_signed("enc", password=b"PLANTED-key-passphrase")
    with pytest.raises(PreflightError, match="encrypted") as caught:
        check_pair(cert, key, scratch_dir=tmp_path)
    assert "PLANTED" not in str(caught.value)


def test_not_after_is_read_from_the_first_certificate_of_a_bundle():
    # Years from 2050 are GeneralizedTime in DER, earlier ones UTCTime: both forms are read.
    for days in (2, 365 * 40):
        leaf, _ = self_signed("leaf", valid_for=days * DAY)
        other, _ = self_signed("ca", valid_for=DAY)
        expected = datetime.datetime.now(datetime.UTC) + days * DAY
        assert abs(leaf_not_after(leaf + other) - expected) < datetime.timedelta(minutes=5)


# ---- the listen address -----------------------------------------------------------------------------------------


def test_a_port_another_process_listens_on_is_refused():
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        for addr in (f"127.0.0.1:{port}", f":{port}"):  # the wildcard conflicts with it too
            with pytest.raises(PreflightError, match=r"spec.http.addr: cannot listen on .*already in use"):
                check_bindable(addr)


def _bind_plainly(port: int) -> None:
    """Bind 127.0.0.1:port without SO_REUSEADDR, and close."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_free_port_and_a_port_in_time_wait_pass():
    port = free_port()
    check_bindable(f"127.0.0.1:{port}")
    _bind_plainly(port)  # the check's socket is closed: the port is the registry's to take
    # A connection closed by the listening side leaves the port in TIME_WAIT. Go's listener binds it (it sets
    # SO_REUSEADDR), so the check must not refuse it; without SO_REUSEADDR the bind would fail.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()
    client.close()
    listener.close()
    with pytest.raises(OSError):
        _bind_plainly(port)  # the port is in TIME_WAIT indeed
    check_bindable(f"127.0.0.1:{port}")


def test_an_address_that_is_not_the_pods_is_refused():
    # TEST-NET-1 (RFC 5737): not assigned here. bind() sends nothing on the network.
    with pytest.raises(PreflightError, match="not an address of this pod"):
        check_bindable("192.0.2.1:5000")


# ---- redis ------------------------------------------------------------------------------------------------------


def _target(server, **changes) -> RedisTarget:
    values = dict(host="127.0.0.1", port=server.port, username=None, password=server.password, db=0, tls=False)
    values.update(changes)
    return RedisTarget(**values)


def _command_calls(server, command: str) -> int:
    """How many times the server ran `command` (INFO commandstats)."""
    stats = server.command("INFO", "commandstats")
    match = re.search(rb"^cmdstat_%s:calls=(\d+)," % command.encode(), stats, re.M)
    return int(match.group(1)) if match else 0


def test_redis_with_the_right_password_answers(redis_server):
    pings = _command_calls(redis_server, "ping")
    check_redis(_target(redis_server))
    check_redis(_target(redis_server, db=3))
    check_redis(_target(redis_server, username="default"))
    assert _command_calls(redis_server, "ping") == pings + 3  # each check reached the PING, past AUTH and SELECT


def test_a_wrong_redis_password_is_refused_without_the_password(redis_server):
    wrong = "PLANTED-wrong-redis-password"
    with pytest.raises(PreflightError) as caught:
        check_redis(_target(redis_server, password=wrong))
    message = str(caught.value)
    assert message.startswith(f"spec.redis (redis at 127.0.0.1:{redis_server.port}): ")
    assert "password in the redis URL is refused" in message
    assert wrong not in message and redis_server.password not in message


def test_redis_without_a_password_and_a_missing_database_are_refused(redis_server):
    with pytest.raises(PreflightError, match="NOAUTH"):
        check_redis(_target(redis_server, password=None))
    with pytest.raises(PreflightError, match="database number"):
        check_redis(_target(redis_server, db=99))


def test_a_dead_redis_host_is_refused():
    with pytest.raises(PreflightError, match=r"cannot reach redis \(ECONNREFUSED\)"):
        check_redis(RedisTarget("127.0.0.1", free_port(), None, "p", 0, False))


def test_a_redis_that_never_answers_is_refused_within_the_timeout():
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog) and never replies
    try:
        with pytest.raises(PreflightError, match="did not answer within 0.5s"):
            check_redis(RedisTarget("127.0.0.1", silent.getsockname()[1], None, "p", 0, False), timeout=0.5)
    finally:
        silent.close()


def test_redis_over_tls(tmp_path):
    with running_redis(tmp_path / "redis", tls=True) as server:
        # The rendered rootcas are what the registry (3.1) trusts, and so does the check.
        check_redis(_target(server, tls=True, rootcas=(str(server.ca_file),)))
        check_redis(_target(server, tls=True), context=ssl.create_default_context(cafile=str(server.ca_file)))
        # Not trusted by the system roots, as the registry's client would see it too.
        with pytest.raises(PreflightError, match="TLS to redis failed"):
            check_redis(_target(server, tls=True))
        # Plain text to a TLS port: no PONG.
        with pytest.raises(PreflightError):
            check_redis(_target(server), timeout=1.0)


def test_the_redis_target_is_read_from_both_config_shapes():
    two = redis_target({"redis": {"addr": "cache:6380", "password": "x", "db": 2}})
    three = redis_target({"redis": {"addrs": ["[::1]:6379"], "username": "u", "password": "x",
                                    "tls": {"rootcas": ["/etc/ssl/certs/ca-certificates.crt"]}}})
    assert (two.host, two.port, two.db, two.tls) == ("cache", 6380, 2, False)
    assert (three.host, three.port, three.username, three.tls, three.addr) == ("::1", 6379, "u", True, "[::1]:6379")
    assert three.rootcas == ("/etc/ssl/certs/ca-certificates.crt",)
    assert redis_target({"redis": {"addrs": ["r:1"], "tls": {"enabled": True}}}).tls
    assert "x" not in repr(two)
    assert redis_target({}) is None


# ---- check_render: each check only when its input changes --------------------------------------------------------


def _rendered(addr: str, redis: str | None = None, tls: tuple[bytes, bytes] | None = None) -> Rendered:
    config = f"version: 0.1\nhttp:\n  addr: {addr}\n"
    files = {}
    if tls:
        config += "  tls:\n    certificate: /c/tls/tls.crt\n    key: /c/tls/tls.key\n"
        files = {TLS_CERT_FILE: tls[0], TLS_KEY_FILE: tls[1]}
    if redis:
        config += f"redis:\n  addr: {redis}\n  password: pw\n  db: 0\n"
    return Rendered(config=config.encode(), files=files)


def test_render_checks_run_only_for_what_changed(tmp_path):
    dead_redis = f"127.0.0.1:{free_port()}"
    expired = self_signed("old", valid_for=-DAY)
    with socket.socket() as registry_socket:  # the running registry holds its own port
        registry_socket.bind(("127.0.0.1", 0))
        registry_socket.listen()
        port = registry_socket.getsockname()[1]
        running = _rendered(f"127.0.0.1:{port}", redis=dead_redis, tls=expired)
        # Same port, same redis, same pair: an edit elsewhere depends on none of them.
        edited = Rendered(config=running.config + b"log:\n  level: debug\n", files=running.files)
        assert check_render(edited, running, scratch_dir=tmp_path) == []
        with pytest.raises(PreflightError, match="spec.http.addr"):
            check_render(_rendered(f"127.0.0.1:{port}"), None, scratch_dir=tmp_path)  # nothing runs yet
    with pytest.raises(PreflightError, match="spec.redis"):
        check_render(_rendered(f"127.0.0.1:{port}", redis=f"127.0.0.1:{free_port()}", tls=expired), running,
                     scratch_dir=tmp_path, redis_timeout=1.0)
    with pytest.raises(PreflightError, match="expired"):
        check_render(_rendered(f"127.0.0.1:{port}", redis=dead_redis, tls=self_signed("x", valid_for=-DAY)),
                     running, scratch_dir=tmp_path)
    soon = self_signed("soon", valid_for=2 * DAY)
    warnings = check_render(_rendered(f"127.0.0.1:{free_port()}", tls=soon), None, scratch_dir=tmp_path)
    assert [w.reason for w in warnings] == ["CertificateExpiresSoon"]


def test_a_dead_redis_on_the_first_config_is_a_warning_not_a_refusal(tmp_path):
    """Nothing runs yet: the registry connects to redis lazily and serves without its cache, so start it."""
    dead = f"127.0.0.1:{free_port()}"
    warnings = check_render(_rendered(f"127.0.0.1:{free_port()}", redis=dead), None, scratch_dir=tmp_path)
    assert [w.reason for w in warnings] == ["RedisUnavailable"]
    assert "cannot reach redis" in warnings[0].message and "pw" not in warnings[0].message


def test_a_redis_answering_slowly_still_passes_within_the_timeout():
    """A server that answers after a pause (not a timing claim: the pause is far inside the bound)."""
    server = socket.create_server(("127.0.0.1", 0))
    asked: list[bytes] = []

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            asked.append(conn.recv(4096))
            threading.Event().wait(0.2)
            conn.sendall(b"+OK\r\n+PONG\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        check_redis(RedisTarget("127.0.0.1", server.getsockname()[1], None, "p", 0, False), timeout=3.0)
    finally:
        thread.join(5)
        server.close()
    assert asked == [b"*2\r\n$4\r\nAUTH\r\n$1\r\np\r\n*1\r\n$4\r\nPING\r\n"]  # both answers were awaited
