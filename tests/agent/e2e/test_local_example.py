"""docs/guide/local-run.md (and README.md's copy of its first steps), as a new user follows it, offline.

`bash examples/local/run` starts (on a free port and a temporary state dir: the only changes), then the guide's
push/pull block runs line by line exactly as written, with 127.0.0.1:5000 and /tmp/ pointed at this test's port
and directory. The read-only edit makes the guide's push fail with 405 while its pull works, and undoing it
makes the push work again. The log says what the guide says: one line per action, `msg` equal to `action`.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tarfile
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from support.common.doc_commands import block, commands
from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.registry import REGISTRY3_BINARY, http_get, read_oci_image, requires_registry3
from support.traffic.new_connections import NewConnectionLoop

REPO = Path(__file__).resolve().parents[3]
GUIDE_ADDR = "127.0.0.1:5000"

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def test_the_readme_names_the_local_run_and_an_offline_push():
    start, client = block("local-run-start"), block("local-run-push-pull")
    assert start.strip() == "bash examples/local/run"
    assert "docker.io" not in client and "oci_image.py" in client  # no registry on the internet needed
    assert yaml.safe_load((REPO / "examples/local/registry.yaml").read_text())["spec"]["http"]["addr"] == GUIDE_ADDR


def set_readonly(registry_file: Path, enabled: bool) -> None:
    """The guide's edit: storage.maintenance.readonly.enabled, saved the way an editor saves."""
    document = yaml.safe_load(registry_file.read_text())
    document["spec"]["config"]["storage"]["maintenance"]["readonly"]["enabled"] = enabled
    temp = registry_file.with_suffix(".swp")
    temp.write_text(yaml.safe_dump(document, sort_keys=False))
    os.replace(temp, registry_file)


@pytest.fixture
def local_run(tmp_path):
    """bash examples/local/run on a free port; yields (addr, registry file, state dir, output file)."""
    with running_local(tmp_path) as run:
        yield run


@contextmanager
def running_local(tmp_path, *, binary: str | None = None):
    """examples/local/run, with Debian's 2.8 or (`binary`, a Distribution 3 registry) BERTH_REGISTRY_BIN."""
    addr = f"127.0.0.1:{free_port()}"
    registry_file = tmp_path / "registry.yaml"
    text = (REPO / "examples/local/registry.yaml").read_text().replace(GUIDE_ADDR, addr)
    if binary is not None:
        text = text.replace('image: docker.io/library/registry:2', 'image: docker.io/library/registry:3') \
            .replace('distribution: "2"', 'distribution: "3"')
    registry_file.write_text(text)
    state, output = tmp_path / "state", tmp_path / "run.out"
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    if binary is not None:
        env["BERTH_REGISTRY_BIN"] = binary
    # berth-agent from the interpreter running the tests (the script would otherwise install into .venv).
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(BERTH_REGISTRY_FILE=str(registry_file), BERTH_LOCAL_STATE=str(state),
               BERTH_HEALTH_ADDR=f"127.0.0.1:{free_port()}", BERTH_OUTBOX_ADDR=f"127.0.0.1:{free_port()}")
    with output.open("wb") as out:
        process = subprocess.Popen(["bash", "examples/local/run"], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def serving() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"examples/local/run exited:\n{output.read_text(errors='replace')}")
            return _listening(addr) and http_get(f"http://{addr}/v2/", timeout=2).status == 200

        wait_for(serving, timeout=60, what="examples/local/run to serve")
        yield addr, registry_file, state, output
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # what Ctrl-C does: the script stops the agent and supervisor
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(process.pid, signal.SIGKILL)  # its session: anything left over is ours to end
        except ProcessLookupError:
            pass
        process.wait(10)


def _listening(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    with socket.socket() as probe:
        return probe.connect_ex((host, int(port))) == 0


def readme_commands(addr: str, tmp_path: Path) -> list[str]:
    """The guide's client block, one command per line, on this test's port and directory."""
    return [line.replace(GUIDE_ADDR, addr).replace("/tmp/", f"{tmp_path}/")
            for line in commands("local-run-push-pull")]


def sh(command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    return subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_run_it_push_pull_and_read_only_work_offline_as_written(local_run, tmp_path):
    addr, registry_file, state, output = local_run
    make, push, pull, inspect = readme_commands(addr, tmp_path)

    for command in (make, push, pull, inspect):
        result = sh(command)
        assert result.returncode == 0, f"{command}\n{result.stderr}"
    assert json.loads(sh(inspect).stdout)["RepoTags"] == ["1"]
    pulled = read_oci_image(Path(shlex.split(pull)[-1].removeprefix("oci:").rsplit(":", 1)[0]))
    [layer] = [pulled.blobs[d] for d in pulled.layer_digests]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:  # skopeo may have compressed it: tarfile reads both
        assert tar.extractfile("hello.txt").read() == b"hello from Berth\n"

    set_readonly(registry_file, True)
    # skopeo's words for the refusal, not a bare "405": the test's port may hold those digits, and a push refused
    # a connection by 2.8's restart gap (127.0.0.1:41405) once passed for it (the clean-clone CI at 429f72b).
    wait_for(lambda: "StatusCode: 405" in sh(push).stderr, timeout=30, what="pushes to be refused with 405")
    assert sh(pull).returncode == 0  # pulls keep working

    set_readonly(registry_file, False)
    wait_for(lambda: sh(push).returncode == 0, timeout=30, what="pushes to work again")

    # What the guide says of the log: one line per action, msg and action the same word; the local start's
    # plain data directory is an info line, not a warning.
    # The new registry answers before the agent has verified it and logged `restarted` (the overlapped restart):
    # wait for the line, then hold the whole log to the promise.
    def log_lines() -> list[dict]:
        return [json.loads(line) for line in (state / "agent.log").read_text().splitlines()]

    wait_for(lambda: len([line for line in log_lines() if "action" in line]) >= 3, timeout=30,
             what="the second restart's log line")
    lines = log_lines()
    actions = [line["msg"] for line in lines if "action" in line]
    assert actions == ["written", "restarted", "restarted"]
    assert all(line["action"] == line["msg"] for line in lines if "action" in line)
    assert [line for line in lines if line["level"] in ("warning", "error")] == []
    assert any(line["msg"].startswith("data path is a plain directory") for line in lines)
    printed = output.read_text()
    assert "starting the agent" in printed and "starting the registry" in printed


@requires_registry3
def test_a_distribution_3_binary_runs_on_the_held_socket_and_reloads_refuse_nothing(tmp_path):
    """The guide's Distribution 3 variant: the same supervisor as the registry container's, started
    with the variables the guide names (running_local sets them as the guide's command does)."""
    (command,) = commands("local-run-distribution-3")
    assignments = [word.split("=", 1)[0] for word in shlex.split(command) if "=" in word]
    assert assignments == ["BERTH_REGISTRY_BIN", "BERTH_REGISTRY_FILE"], command
    assert command.endswith(" bash examples/local/run"), command
    with running_local(tmp_path, binary=REGISTRY3_BINARY) as (addr, registry_file, state, _output):
        assert "holding the registry's listening socket" in (state / "registry.log").read_text()
        host, port = addr.rsplit(":", 1)
        with NewConnectionLoop(host, int(port)) as loop:
            for level in ("warn", "info", "warn"):
                document = yaml.safe_load(registry_file.read_text())
                document["spec"]["config"]["log"]["level"] = level
                temp = registry_file.with_suffix(".swp")
                temp.write_text(yaml.safe_dump(document, sort_keys=False))
                os.replace(temp, registry_file)
                before = (state / "agent.log").read_text().count('"restarted"')
                wait_for(lambda before=before: (state / "agent.log").read_text().count('"restarted"') > before,
                         timeout=30, what=f"the log.level {level} edit to be applied")
        counts = loop.counts
        assert counts.refused == 0 and counts.failed == 0 and counts.answered > 0, counts
