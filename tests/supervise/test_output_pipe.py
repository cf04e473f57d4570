"""The registry's output pipe: berth-supervise reads each registry's pipe itself, so a registry that logs far more
than a pipe holds never blocks on its log (supervise.sh's awk and tee, killed, once made it stop serving)."""

from __future__ import annotations

import http.client

from berth_agent.core.write import write_atomic
from berth_agent.restart.endpoint import Endpoint
from berth_agent.restart.probe import answers
from support.common.polling import wait_for
from support.registries.supervisor import minimal_config


def _noisy_requests(port: int, count: int) -> None:
    """Requests the registry logs a long line for each (an unknown repository): far more than a pipe's 64 KiB."""
    name = "a" * 200
    for index in range(count):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", f"/v2/{name}/{index}/manifests/latest")
            assert connection.getresponse().status == 404
        finally:
            connection.close()


def test_a_registry_that_logs_several_pipes_full_never_blocks_and_every_line_arrives(
        supervisor_factory, registry_port, tmp_path):
    supervisor = supervisor_factory()
    config = minimal_config(tmp_path / "data", registry_port).replace(b"level: error", b"level: info")
    write_atomic(supervisor.config_path, config)
    registry = supervisor.registry()
    wait_for(lambda: answers(Endpoint("127.0.0.1", registry_port)) == 200, what="the registry to answer")
    # 600 logged requests, several times a pipe's 64 KiB of output: each gets its answer within the client's 10 s.
    _noisy_requests(registry_port, 600)
    assert supervisor.registries() == [registry]  # the same registry served it all
    output = supervisor.config_dir / "registry-output"
    last = f"/v2/{'a' * 200}/599/manifests/latest"
    wait_for(lambda: last in output.read_text(errors="replace") and last in supervisor.log(),
             what="the last request's line in registry-output and the container log")
    for text in (output.read_text(errors="replace"), supervisor.log()):
        assert all(f"/v2/{'a' * 200}/{index}/manifests" in text for index in range(600))
