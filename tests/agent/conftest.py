"""Shared fixtures of the agent tests (pipeline and sources engineers both add here; never delete)."""

from __future__ import annotations

import socket

import pytest

from support.supervisor import Supervisor, available_shells


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def registry_port() -> int:
    return free_port()


@pytest.fixture(params=available_shells())
def shell(request) -> str:
    """Each supervisor test runs under every POSIX shell present (dash; busybox sh as in the registry image)."""
    return request.param


@pytest.fixture
def supervisor_factory(tmp_path):
    """Start supervise.sh (config in tmp_path/config) and stop it, and whatever it started, afterwards."""
    started: list[Supervisor] = []

    def start(shell: str = "dash", config_dir=None) -> Supervisor:
        directory = config_dir or tmp_path / "config"
        directory.mkdir(exist_ok=True)
        supervisor = Supervisor(directory, shell=shell).start()
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        supervisor.stop()
