"""Where the agent's memory goes, with a Registry's features off and on; and the operator's at N Registries
(docs/decisions/0037-agent-memory.md).

The agent runs as a registry pod runs it: `berth-agent run --registry NS/NAME` against a test API server (kmock),
the http secret mounted and watched over the API (`--api-secret`), the registry's metrics proxied
(`--registry-metrics-addr`), beside berth-supervise with two debug ports and the real registry (3.1.1 when
`BERTH_REGISTRY3_BIN` is set, else Debian's 2.8); the config volume on /dev/shm. Two Registries:

- features off: filesystem storage, nothing else (what every pod pays);
- features on: everything one Registry can turn on at once: htpasswd auth, TLS, a notification endpoint (a
  receiver here; one push delivered through the outbox), scheduled garbage collection, and the registry's metrics
  and the agent's scraped once (the pull-through cache excludes garbage collection; `--proxy` measures it instead
  of garbage collection).

For each, once the agent is ready and SECONDS after: the agent's RSS (VmRSS: anonymous and file-backed), median of
one sample a second, from a run without any probe. Then a second run with `bench/agent_memory_probe/` on the
agent's PYTHONPATH: what each imported package costs in resident memory (each module's import less the imports
inside it), the threads, and with tracemalloc (a third run: it inflates the RSS) the heap's top allocation sites.

`--bytecode` adds two runs with features off: at -OO (docstrings and asserts stripped; the .opt-2.pyc files compiled
into a cache prefix first), and without bytecode for the standard library (as python:3.11-slim ships it: every start
compiles the stdlib from source). A minute or two more.

The operator (`--operator-count N`, default 1000; 0 skips it): `bench/operator_reconcile.py`'s run at N Registries
on the real control plane (kube-apiserver, etcd, controller manager, scheduler): its peak RSS (VmHWM) while
converging and its RSS idle after. 5 to 20 minutes at 1000.

    python bench/agent_memory.py [--seconds 10] [--proxy] [--bytecode] [--operator-count 1000]
                                 [--operator-idle 30] [--operator-only]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from agent_common import REPO, shm_dir, workdir
from support.clusters.kube import KubeApi
from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import RegistryPod, filesystem_spec, on_distribution, registry_object
from support.registries.registry import REGISTRY3_BINARY, REGISTRY_BINARY
from support.registries.secretdir import write_secret_dir

PROBE_DIR = REPO / "bench" / "agent_memory_probe"
MIB = 2**20


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile (bytes) and Threads of a process."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
        elif key == "Threads":
            found[key] = int(value)
    return found


def _secret(api: KubeApi, name: str, data: dict[str, bytes]) -> None:
    import base64

    api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})


def _scrape(url: str) -> None:
    import ssl

    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=10,
                                                              context=ssl._create_unverified_context()) as response:
        response.read()


@contextlib.contextmanager
def _pod(features: bool, proxy: bool, env: dict[str, str]):
    """A registry pod on this machine as the operator's pod template runs it; yields (pod, after_ready)."""
    binary = REGISTRY3_BINARY or REGISTRY_BINARY
    major = "3" if REGISTRY3_BINARY else "2"
    with workdir("memory") as tmp, shm_dir() as shm, contextlib.ExitStack() as stack:
        pod = RegistryPod(Path(tmp) / "pod", config_dir=shm / "config", binary=binary)
        api = stack.enter_context(KubeApi())
        stack.callback(pod.stop)
        write_secret_dir(pod.mounts / "http-secret", {"secret": "memory"})
        _secret(api, "http", {"secret": b"memory"})
        spec = on_distribution(filesystem_spec(pod.port, http={
            "addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s", "secret": {"name": "http", "field": "secret"}}),
            major)
        api_secrets = ["--api-secret", "http-secret=http"]
        after: list[Any] = []
        if features:
            from support.registries.upstream import htpasswd
            from support.services.certs import self_signed
            from support.services.notifications import Receiver

            users = htpasswd({"alice": "alice-pw"})
            write_secret_dir(pod.mounts / "htpasswd", {"users": users})
            spec["config"]["storage"]["auth"] = {"htpasswd": {"secret": {"name": "users", "field": "users"}}}
            cert, key = self_signed("registry")
            write_secret_dir(pod.mounts / "tls", {"tls.crt": cert, "tls.key": key})
            spec["http"]["tls"] = {"secretName": "registry-tls"}
            pod.tls = True
            receiver = Receiver().start()
            stack.callback(receiver.stop)
            write_secret_dir(pod.mounts / "notifications", {"token": "Bearer memory\n"})
            spec["config"]["notifications"] = {"secretName": "hooks", "endpoints": [{
                "name": "receiver", "url": receiver.url, "timeout": "2s", "threshold": 3, "backoff": "1s",
                "headers": [{"name": "Authorization", "secretKey": "token"}]}]}
            if proxy:
                from support.registries.registry import running_registry

                upstream_port = free_port()
                config = (f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: "
                          f"{Path(tmp) / 'upstream-data'}\nhttp:\n  addr: 127.0.0.1:{upstream_port}\n").encode()
                upstream = stack.enter_context(running_registry(config, Path(tmp) / "upstream", binary=binary))
                spec["config"]["proxy"] = {"remoteURL": upstream.url}
            else:
                spec["garbageCollection"] = {"schedule": "0 3 * * sun"}
            # Secrets over the API as the operator's pod names them: every mounted one is also watched.
            for volume, name, data in (("htpasswd", "users", {"users": users}),
                                       ("tls", "registry-tls", {"tls.crt": cert, "tls.key": key}),
                                       ("notifications", "hooks", {"token": b"Bearer memory\n"})):
                _secret(api, name, data)
                api_secrets += ["--api-secret", f"{volume}={name}"]
            after.append(lambda: _push_one(pod, receiver))
        api.create(registry_object(spec))
        metrics_port = free_port()
        saved = dict(os.environ)
        os.environ.update(env)
        try:
            pod.start_agent(registry="default/reg", kube_host=api.url,
                            extra=[*api_secrets, "--registry-metrics-addr", f"127.0.0.1:{metrics_port}"])
        finally:
            os.environ.clear()
            os.environ.update(saved)
        pod.start_supervisor(env={"BERTH_DEBUG_PORTS": f"{free_port()} {free_port()}"})
        pod.wait_serving(60)
        wait_for(lambda: pod.health("/readyz") == 200, timeout=60, what="the agent to be ready")
        if features:
            after.append(lambda: _scrape(f"http://127.0.0.1:{metrics_port}/metrics"))
            after.append(lambda: _scrape(f"http://127.0.0.1:{pod.health_port}/metrics"))
        for step in after:
            step()
        yield pod


def _push_one(pod: RegistryPod, receiver: Any) -> None:
    """One blob pushed with the user's password (auth, TLS): the registry posts its event to the outbox, which
    delivers it to the receiver (the outbox's HTTP client in use)."""
    import base64
    import hashlib
    import ssl

    context = ssl._create_unverified_context()
    auth = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-pw").decode()}
    blob = os.urandom(1024)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    start = urllib.request.Request(f"{pod.url}/v2/demo/memory/blobs/uploads/", method="POST", headers=auth)
    with urllib.request.urlopen(start, context=context, timeout=10) as response:
        location = response.headers["Location"]
    location = location if "://" in location else pod.url + location
    put = urllib.request.Request(f"{location}{'&' if '?' in location else '?'}digest={digest}", data=blob,
                                 method="PUT", headers={**auth, "Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(put, context=context, timeout=10) as response:
        response.read()
    wait_for(lambda: receiver.events(), timeout=30, what="the pushed blob's event at the receiver")


def measure_rss(features: bool, proxy: bool, seconds: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    with _pod(features, proxy, env or {}) as pod:
        time.sleep(2.0)  # past the start's work
        samples = []
        deadline = time.monotonic() + seconds
        while True:
            samples.append(proc_status(pod.agent.pid))
            if time.monotonic() >= deadline:
                break
            time.sleep(1.0)
    middle = sorted(samples, key=lambda s: s["VmRSS"])[len(samples) // 2]
    return {**middle, "peak": max(s["VmRSS"] for s in samples), "samples": len(samples)}


def bytecode(root: Path, optimize: bool, stdlib: bool) -> dict[str, str]:
    """The agent's environment to run on bytecode compiled here into a cache prefix of its own (PYTHONPYCACHEPREFIX:
    nothing beside the sources is read or written): at -OO (docstrings and asserts stripped) and with the .opt-2.pyc
    files compiled, or at -O0 without the standard library's (python:3.11-slim ships none: its stdlib is compiled from
    source at every start on the image's read-only root). The venv, the project and, with `stdlib`, the stdlib."""
    import site
    import subprocess
    import sysconfig

    prefix = root / f"pyc-{'opt2' if optimize else 'opt0'}-{'stdlib' if stdlib else 'no-stdlib'}"
    dirs = [*site.getsitepackages(), str(REPO / "agent"), *([sysconfig.get_path("stdlib")] if stdlib else [])]
    # A few files there do not compile (test data in other syntaxes): compileall says so and goes on.
    subprocess.run([sys.executable, *(["-OO"] if optimize else []), "-m", "compileall", "-q", "-j", "0", *dirs],
                   env={**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return {"PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": "1",
            **({"PYTHONOPTIMIZE": "2"} if optimize else {})}


def bytecode_figures(proxy: bool, seconds: float, base: dict[str, Any]) -> None:
    """--bytecode: the agent's RSS with features off at -OO, and without the stdlib's bytecode, beside `base`."""
    with workdir("memory-bytecode") as tmp:
        for label, optimize, stdlib in (("-OO, every .opt-2.pyc compiled", True, True),
                                        ("-O0, no bytecode for the standard library", False, False)):
            rss = measure_rss(False, proxy, seconds, bytecode(Path(tmp), optimize, stdlib))
            print(f"agent, features off, {label}: RSS {mib(rss['VmRSS'])} ({(rss['VmRSS'] - base['VmRSS']) / MIB:+.1f} "
                  f"MiB against the plain run; median of {rss['samples']} samples); {rss['Threads']} threads")


def probe(features: bool, proxy: bool, trace: bool) -> dict[str, Any]:
    with workdir("memory-probe") as tmp:
        report = Path(tmp) / "report.json"
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(PROBE_DIR), os.environ.get("PYTHONPATH")])),
               "BERTH_MEMORY_PROBE": str(report), **({"BERTH_MEMORY_TRACE": "1"} if trace else {})}
        with _pod(features, proxy, env):
            time.sleep(2.0)
            Path(f"{report}.request").touch()
            wait_for(report.exists, timeout=60, what="the probe's report")
            return json.loads(report.read_text())


def mib(value: float) -> str:
    return f"{value / MIB:.1f} MiB"


def print_agent(label: str, rss: dict[str, Any], found: dict[str, Any], traced: dict[str, Any] | None,
                top: int) -> None:
    print(f"agent, {label}: RSS {mib(rss['VmRSS'])} (median of {rss['samples']} samples; peak {mib(rss['peak'])}; "
          f"anonymous {mib(rss['RssAnon'])}, file-backed {mib(rss['RssFile'])}); {rss['Threads']} threads")
    imports = found["imports_by_package"]
    print(f"  imports: {mib(sum(cost for _, cost in imports))} in {len(found['modules'])} modules; by package "
          "(resident memory each import added, less the imports inside it):")
    for name, cost in imports[:top]:
        print(f"    {cost / MIB:6.2f} MiB  {name}")
    print(f"  threads ({found['tasks']}): {', '.join(found['threads'])}")
    if traced is not None:
        print(f"  heap (tracemalloc, one frame; a run of its own): {mib(traced['traced'])} traced; top sites:")
        for site, size, count in traced["top_sites"][:top]:
            print(f"    {size / MIB:6.2f} MiB  {count:7d} blocks  {site}")


def operator_figure(count: int, idle: float, timeout: float) -> None:
    if count <= 0:
        print("operator: skipped (--operator-count 0)")
        return
    from support.clusters.control_plane import skip_reason

    reason = skip_reason()
    if reason:
        print(f"operator: skipped ({reason})")
        return
    import operator_reconcile

    result = operator_reconcile.measure(count, idle, timeout=timeout)
    print(f"operator at {count} Registries (real control plane, bench/operator_reconcile.py): peak RSS "
          f"{result['peak_mib']:.0f} MiB while converging ({result['converge_s']:.0f} s), "
          f"{result['idle_rss_mib']:.0f} MiB idle after")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="RSS sampled this long, once a second")
    parser.add_argument("--proxy", action="store_true", help="features on: a pull-through cache, not GC")
    parser.add_argument("--top", type=int, default=15, help="rows of each breakdown")
    parser.add_argument("--no-trace", action="store_true", help="skip the tracemalloc runs")
    parser.add_argument("--operator-only", action="store_true", help="only the operator's figure")
    parser.add_argument("--bytecode", action="store_true",
                        help="also features off at -OO (.opt-2.pyc compiled) and without the stdlib's bytecode")
    parser.add_argument("--operator-count", type=int, default=1000)
    parser.add_argument("--operator-idle", type=float, default=30.0)
    parser.add_argument("--operator-timeout", type=float, default=1800.0)
    args = parser.parse_args()
    if args.operator_only:
        operator_figure(args.operator_count, args.operator_idle, args.operator_timeout)
        return
    print(f"registry binary: {REGISTRY3_BINARY or REGISTRY_BINARY}; python {sys.version.split()[0]}")
    figures = {}
    for features in (False, True):
        label = "features on" + (" (pull-through cache)" if args.proxy else "") if features else "features off"
        rss = measure_rss(features, args.proxy, args.seconds)
        found = probe(features, args.proxy, trace=False)
        traced = None if args.no_trace else probe(features, args.proxy, trace=True)
        print_agent(label, rss, found, traced, args.top)
        figures[features] = (rss, found)
    (off, off_found), (on, on_found) = figures[False], figures[True]
    extra = sorted({m.partition(".")[0] for m in set(on_found["modules"]) - set(off_found["modules"])})
    print(f"agent, features on against off: {(on['VmRSS'] - off['VmRSS']) / MIB:+.1f} MiB RSS, "
          f"{len(on_found['modules']) - len(off_found['modules']):+d} modules (of packages: {', '.join(extra)})")
    print(f"agent RSS summary: off {mib(off['VmRSS'])}, on {mib(on['VmRSS'])}")
    if args.bytecode:
        bytecode_figures(args.proxy, args.seconds, off)
    operator_figure(args.operator_count, args.operator_idle, args.operator_timeout)


if __name__ == "__main__":
    main()
