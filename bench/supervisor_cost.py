"""What berth-supervise costs every registry pod, and what its held socket buys
(docs/decisions/0005-berth-supervise-in-the-standard-library.md, docs/decisions/0007-held-socket-handover.md).

Prints, for the real 2.8 (Debian) and, when BERTH_REGISTRY3_BIN is set, 3.1.1:
- cold start: the bare binary (exec to the first answer on GET /) next to the same through berth-supervise
  (config.yml appearing to the first answer), median and range over --starts runs;
- the supervisor's RSS (VmRSS) and its CPU over --idle seconds with a registry running and nothing happening;
- 3.1.1 on the held socket: --reloads handovers (SIGHUP, the agent's own restart code) under --clients clients
  that open a new connection for every GET /v2/: answered, refused, closed without a response, failed.

    python bench/supervisor_cost.py [--starts 10] [--idle 10] [--reloads 20] [--clients 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from berth_agent.core.write import write_atomic  # noqa: E402
from berth_agent.restart.endpoint import Endpoint  # noqa: E402
from berth_agent.restart.probe import answers  # noqa: E402
from berth_agent.restart.restarter import SupervisorRestarter  # noqa: E402
from support.common.ports import free_port  # noqa: E402
from support.registries.supervisor import REGISTRY_BIN, SUPERVISE_ARGV, minimal_config, registry_env  # noqa: E402
from support.traffic.new_connections import NewConnectionLoop  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _wait_answer(endpoint: Endpoint, began: float, timeout: float = 20.0) -> float:
    while answers(endpoint, timeout=1.0) != 200:
        if time.monotonic() - began > timeout:
            raise SystemExit(f"nothing answered on {endpoint.host}:{endpoint.port}")
        time.sleep(0.0005)
    return time.monotonic() - began


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _supervisor(directory: Path, binary: str, port: int, *, held: bool) -> subprocess.Popen:
    env = registry_env()
    env.update(BERTH_CONFIG=str(directory / "config.yml"), BERTH_REGISTRY_BIN=binary)
    if held:
        env["BERTH_LISTEN_ADDR"] = f"127.0.0.1:{port}"
    return subprocess.Popen(SUPERVISE_ARGV, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def cold_starts(binary: str, starts: int, root: Path) -> tuple[list[float], list[float]]:
    bare, supervised = [], []
    for index in range(starts):
        port = free_port()
        directory = root / f"cold-{index}"
        directory.mkdir()
        config = minimal_config(directory / "data", port, drain="1s")
        write_atomic(directory / "config.yml", config)
        began = time.monotonic()
        process = subprocess.Popen([binary, "serve", str(directory / "config.yml")], env=registry_env(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bare.append(_wait_answer(Endpoint("127.0.0.1", port), began))
        process.terminate()
        process.wait(10)
        (directory / "config.yml").unlink()
        supervisor = _supervisor(directory, binary, port, held="v3" in binary or binary.endswith("3.1.1"))
        time.sleep(0.3)  # the supervisor is up and waiting for its config, as in a pod
        began = time.monotonic()
        write_atomic(directory / "config.yml", config)
        supervised.append(_wait_answer(Endpoint("127.0.0.1", port), began))
        _stop(supervisor)
    return bare, supervised


def idle_cost(binary: str, seconds: float, root: Path) -> tuple[int, float]:
    port = free_port()
    directory = root / "idle"
    directory.mkdir()
    write_atomic(directory / "config.yml", minimal_config(directory / "data", port, drain="1s"))
    supervisor = _supervisor(directory, binary, port, held=binary != REGISTRY_BIN)
    _wait_answer(Endpoint("127.0.0.1", port), time.monotonic())
    time.sleep(1.0)
    before = _cpu_seconds(supervisor.pid)
    time.sleep(seconds)
    cpu = _cpu_seconds(supervisor.pid) - before
    rss = _rss_kib(supervisor.pid)
    _stop(supervisor)
    return rss, cpu


def held_reloads(binary: str, reloads: int, clients: int, root: Path) -> None:
    port = free_port()
    directory = root / "held"
    directory.mkdir()
    config = minimal_config(directory / "data", port, drain="5s")
    write_atomic(directory / "config.yml", config)
    supervisor = _supervisor(directory, binary, port, held=True)
    endpoint = Endpoint("127.0.0.1", port)
    _wait_answer(endpoint, time.monotonic())
    restarter = SupervisorRestarter(directory / "config.yml", directory)
    loops = [NewConnectionLoop("127.0.0.1", port) for _ in range(clients)]
    for loop in loops:
        loop.start()
    seconds = []
    draining: set = set()
    try:
        for index in range(reloads):
            level = b"level: warn" if index % 2 else b"level: error"
            write_atomic(directory / "config.yml", config.replace(b"level: error", level))
            result = restarter.restart(endpoint, timeout=20, draining=draining)
            if not result.ok:
                raise SystemExit(f"reload {index} failed: {result.detail}")
            seconds.append(result.seconds)
            time.sleep(0.1)
    finally:
        counts = [loop.stop() for loop in loops]
        _stop(supervisor)
    total = counts[0]
    for other in counts[1:]:
        total = total.add(other)
    print(f"  held socket, {reloads} reloads under {clients} new-connection clients: {total.answered} answered, "
          f"{total.refused} refused, {total.closed_without_response} closed without a response, "
          f"{total.failed} failed; reload (SIGHUP to the successor serving) median "
          f"{statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--clients", type=int, default=3)
    args = parser.parse_args()
    binaries = [("2.8.2", REGISTRY_BIN)]
    if os.environ.get("BERTH_REGISTRY3_BIN"):
        binaries.append(("3.1.1", os.environ["BERTH_REGISTRY3_BIN"]))
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        for name, binary in binaries:
            work = root / name
            work.mkdir()
            bare, supervised = cold_starts(binary, args.starts, work)
            rss, cpu = idle_cost(binary, args.idle, work)
            held = " (holding the socket)" if name.startswith("3") else ""
            print(f"Distribution {name}:")
            print(f"  cold start, bare binary: median {statistics.median(bare) * 1000:.1f} ms "
                  f"({min(bare) * 1000:.1f} to {max(bare) * 1000:.1f}); through berth-supervise{held}: median "
                  f"{statistics.median(supervised) * 1000:.1f} ms ({min(supervised) * 1000:.1f} to "
                  f"{max(supervised) * 1000:.1f}), {args.starts} runs")
            print(f"  berth-supervise: RSS {rss / 1024:.1f} MiB; CPU {cpu:.2f} s over {args.idle:g} s idle")
            if name.startswith("3"):
                held_reloads(binary, args.reloads, args.clients, work)


if __name__ == "__main__":
    main()
