"""Smoke tests of the shared test parts others build on: ports, Secret volumes, the registry, moto."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from support.clouds.s3 import AccessKey
from support.common.ports import free_port
from support.common.processes import started, stop_process
from support.registries.registry import http_get, push_and_pull_back, running_registry
from support.registries.secretdir import DATA_LINK, current_data, swap_secret_dir, write_secret_dir


def test_free_port_can_be_bound_on_loopback():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        assert sock.getsockname() == ("127.0.0.1", port)


class Service:
    def __init__(self, process: subprocess.Popen):
        self.process, self.stops = process, 0

    def stop(self) -> None:
        self.stops += 1
        stop_process(self.process, None)


def python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_started_service_listens_and_a_failed_start_stops_it_and_says_why():
    port = free_port()
    listening = python(f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
                       "time.sleep(60)")
    service = Service(listening)
    assert started(service, listening, port, "listener", timeout=20, log=str) is service and service.stops == 0
    service.stop()
    # Exits before it listens: stopped, and the end of its log in the error.
    exits = Service(python("raise SystemExit(3)"))
    with pytest.raises(RuntimeError, match=r"exiter exited with 3 before it listened .*: the log's end$"):
        started(exits, exits.process, free_port(), "exiter", timeout=20, log=lambda: "the log's end")
    assert exits.stops == 1
    # Never listens: stopped at the deadline, not left running.
    hangs = Service(python("import time; time.sleep(60)"))
    with pytest.raises(TimeoutError, match="hanger does not listen"):
        started(hangs, hangs.process, free_port(), "hanger", timeout=0.5, log=str)
    assert hangs.stops == 1 and hangs.process.poll() is not None


def test_secret_dir_has_the_atomic_writer_layout_and_swaps(tmp_path):
    volume = write_secret_dir(tmp_path / "s", {"a": b"1", "b": "2"})
    first = os.readlink(volume / DATA_LINK)
    assert first.startswith("..") and (volume / first).is_dir()
    assert os.readlink(volume / "a") == f"{DATA_LINK}/a"
    assert current_data(volume) == {"a": b"1", "b": b"2"}

    assert swap_secret_dir(volume, {"a": b"3", "c": b"4"}) is True
    second = os.readlink(volume / DATA_LINK)
    assert second != first and not (volume / first).exists()
    assert current_data(volume) == {"a": b"3", "c": b"4"}
    assert not (volume / "b").is_symlink()
    assert not (volume / "..data_tmp").exists()
    assert swap_secret_dir(volume, {"a": b"3", "c": b"4"}) is False  # unchanged payload: not rewritten
    assert os.readlink(volume / DATA_LINK) == second


def test_registry_starts_on_loopback_and_round_trips_an_image(tmp_path):
    config = f"""version: 0.1
storage:
  filesystem:
    rootdirectory: {tmp_path / 'data'}
http:
  addr: :5000
""".encode()
    with running_registry(config, tmp_path / "registry") as registry:
        assert registry.addr.startswith("127.0.0.1:")
        assert http_get(registry.url + "/v2/").status == 200
        pushed, pulled = push_and_pull_back(registry, tmp_path / "image")
        assert pulled.blobs == pushed.blobs
    assert not registry.alive()


def test_moto_enforces_iam_and_deleted_keys_stop_working(moto_server):
    key = moto_server.create_s3_user("reg", bucket="smoke")
    moto_server.enforce_iam()
    assert moto_server.list_objects("smoke", key) == []
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError):
        moto_server.list_objects("smoke", AccessKey("x", "AKIANOTAKEY000000000", "wrong"))
    second = moto_server.create_access_key("reg")
    moto_server.delete_access_key("reg", key.access_key_id)
    with pytest.raises(ClientError):
        moto_server.list_objects("smoke", key)
    assert moto_server.list_objects("smoke", second) == []
    assert "hidden" in repr(second) and second.secret_access_key not in repr(second)


def test_registry_factory_fixture_starts_on_a_free_port_and_stops_at_teardown(registry_factory, tmp_path):
    registry = registry_factory(b"version: 0.1\nstorage: {inmemory: {}}\nhttp: {addr: ':5000', draintimeout: 1s}\n")
    other = registry_factory(b"version: 0.1\nstorage: {inmemory: {}}\nhttp: {addr: ':5000'}\n")
    assert registry.port != other.port
    assert http_get(registry.url + "/v2/").status == 200 and http_get(other.url + "/v2/").status == 200
    assert registry.stop() == 0  # draintimeout set: SIGTERM drains and exits 0


def test_redis_server_needs_its_password(redis_server):
    assert redis_server.command("SET", "k", "v") == "OK"
    assert redis_server.command("GET", "k") == b"v"
    with socket.create_connection(("127.0.0.1", redis_server.port), timeout=5) as sock:
        sock.sendall(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        assert sock.recv(100).startswith(b"-NOAUTH")
    assert redis_server.password not in repr(redis_server)
