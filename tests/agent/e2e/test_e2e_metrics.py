"""The registry's own metrics across reloads, on 2.8 and 3.1.1: `berth-agent run` with its stable
registry-metrics endpoint, the real berth-supervise alternating two loopback debug ports, the real registry, and a
real Prometheus (Debian's 2.42) scraping through the agent.

- 20 reloads with metrics on under a pull load: 0 rollbacks, every successor serves its metrics.
- 10 reloads with Prometheus scraping every second: every scrape succeeds, and the test's pulls made after each
  reload show in registry_http_requests_total, scraped from the new process.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

from berth_agent.restart.metrics_proxy import read_target
from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import RegistryPod, filesystem_spec, on_distribution, registry_object
from support.registries.registry import http_get, make_oci_image, push_image, registry_binaries
from support.services.prometheus import running_prometheus
from support.traffic.pull_loop import PullLoop

pytestmark = pytest.mark.e2e  # real agents, supervisors, registries and Prometheus: not in the quick run

LEVELS = ("info", "warn")  # alternating log levels: each edit is a new config, so a restart


def _spec(pod: RegistryPod, major: str, level: str) -> dict:
    spec = on_distribution(filesystem_spec(pod.port, http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "10s"}),
                           major)
    spec["config"]["log"]["level"] = level
    return registry_object(spec)


@pytest.fixture(params=registry_binaries(), ids=lambda p: f"v{p[0]}")
def metrics_pod(request, tmp_path):
    major, binary = request.param
    pod = RegistryPod(tmp_path / "pod", binary=binary)
    pod.major = major
    pod.metrics_port = free_port()
    pod.debug_ports = [free_port(), free_port()]
    pod.write_registry_file(_spec(pod, major, "info"))
    pod.start_agent(extra=["--registry-metrics-addr", f"127.0.0.1:{pod.metrics_port}"])
    pod.start_supervisor(env={"BERTH_DEBUG_PORTS": " ".join(map(str, pod.debug_ports))})
    pod.wait_serving()
    yield pod
    pod.stop()


def _scrape(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def _reload(pod: RegistryPod, index: int) -> None:
    """Edit the Registry and wait for restart number `index` (1-based)."""
    pod.write_registry_file(_spec(pod, pod.major, LEVELS[index % 2]))
    wait_for(lambda: len(pod.actions("restarted")) >= index, timeout=60,
             what=lambda: f"restart {index}\n{pod.agent_log_text()[-3000:]}")


def _push(pod: RegistryPod, tmp_path) -> tuple[str, bytes]:
    image = make_oci_image(tmp_path / "image", layer_size=32 * 1024)
    push_image(image, pod.host, "demo/app:1")
    layer = image.layer_digests[0]
    return f"{pod.url}/v2/demo/app/blobs/{layer}", image.blobs[layer]


def test_20_reloads_with_metrics_on_under_a_pull_load_never_roll_back(metrics_pod, tmp_path):
    pod = metrics_pod
    url, blob = _push(pod, tmp_path)
    loop = PullLoop(url, blob)
    loop.start()
    ports_used = []
    try:
        wait_for(lambda: loop.stats.successes >= 5, what="the pull loop to get going")
        for index in range(1, 21):
            _reload(pod, index)
            pid = pod.registry_pid()
            # The successor names its own debug port; the stable endpoint serves its metrics.
            target = wait_for(lambda pid=pid: (t := read_target(pod.config_dir)) is not None and t.pid == pid and t,
                              what=lambda pid=pid: f"the metrics file to name registry {pid}\n"
                                                   f"{pod.supervisor.log()[-2000:]}")
            assert target.port in pod.debug_ports, pod.supervisor.log()[-2000:]
            ports_used.append(target.port)
            # Its request counter appears with its first request: on 2.8 the agent's GET / was one, on the held
            # socket (3.x) the old process may have answered that, and the pull loop's next pulls reach the new one.
            status, text = wait_for(
                lambda: (s := _scrape(pod.metrics_port))[0] == 200 and "registry_http_requests_total" in s[1] and s,
                what="the registry's metrics, its requests counted, through the agent")
            # The next reload once this one's predecessor has drained: with two registries still holding both
            # ports, a successor on the held socket (3.x) takes a free third port, as it should.
            wait_for(lambda pid=pid: [p.pid for p in pod.supervisor.registries()] == [pid],
                     what=lambda: f"the old registry to have drained\n{pod.supervisor.log()[-2000:]}")
    finally:
        stats = loop.stop()
    assert not pod.actions("rolled back"), [line for line in pod.agent_lines() if line.get("msg") == "rolled back"]
    assert pod.metric("rollbacks_total") == 0
    assert pod.metric("reloads_total") == 20
    assert "could not listen on debug port" not in pod.supervisor.log()
    assert stats.failures == [], stats.failures[:5]
    assert len(set(ports_used)) == 2  # both ports took turns
    print(f"v{pod.major}: 20 reloads, 0 rollbacks; {stats.successes} pulls, {stats.refused_retries} refused and "
          f"{stats.reset_retries} reset retries, 0 failed")


def test_prometheus_scrapes_the_registry_through_the_agent_across_10_reloads(metrics_pod, tmp_path):
    pod = metrics_pod
    url, blob = _push(pod, tmp_path)
    jobs = {"registry": [f"127.0.0.1:{pod.metrics_port}"], "agent": [f"127.0.0.1:{pod.health_port}"]}
    expr = 'sum(registry_http_requests_total{job="registry",handler="blob",method="get",code="200"})'
    started = time.time()
    with running_prometheus(tmp_path / "prometheus", jobs, interval="1s") as prom:
        prom.wait_for_scrapes("registry", 2)
        for index in range(1, 11):
            _reload(pod, index)
            pid = pod.registry_pid()
            wait_for(lambda pid=pid: (t := read_target(pod.config_dir)) is not None and t.pid == pid,
                     what="the metrics file to name the new registry")
            # On the held socket (3.x) the old process accepts from the same queue until its SIGTERM is handled,
            # which can be after the agent saw the new one answer: a pull it takes counts on the old process. So
            # the old one is gone first (nothing in flight: it stops at once).
            wait_for(lambda pid=pid: [p.pid for p in pod.supervisor.registries()] == [pid],
                     what=lambda: f"the old registry to have exited\n{pod.supervisor.log()[-2000:]}")
            # Pulls made on the new process only, then Prometheus must show exactly them: the counter of the
            # new process (it started from zero), scraped through the agent's stable endpoint. One fewer each
            # time, so no other process's count can pass for it, and each reload shows as a counter reset.
            pulls = 13 - index
            for _ in range(pulls):
                answer = http_get(url, timeout=10)
                assert answer.status == 200 and answer.body == blob
            wait_for(lambda pulls=pulls: prom.value(expr) == pulls, timeout=60,
                     what=f"reload {index}: {pulls} pulls in Prometheus (now {prom.value(expr)})")
        prom.wait_for_scrapes("registry", 2)
        window = f"{int(time.time() - started) + 5}s"
        scrapes = prom.value(f'count_over_time(up{{job="registry"}}[{window}])')
        assert prom.value(f'min_over_time(up{{job="registry"}}[{window}])') == 1.0, \
            f"a scrape failed: {prom.scrape_report('registry', window)}\n{pod.agent_log_text()[-2000:]}"
        # A 200 with nothing in it would count as up: every scrape brought the registry's series.
        assert prom.value(f'min_over_time(scrape_samples_scraped{{job="registry"}}[{window}])') > 20
        assert prom.value(f'min_over_time(up{{job="agent"}}[{window}])') == 1.0
        assert prom.value('berth_agent_reloads_total{job="agent"}') == 10
        [target] = [t for t in prom.targets() if t["labels"]["job"] == "registry"]
        assert target["health"] == "up" and target["lastError"] == ""
        # What a user sees of the resets: the raw counter restarts at each reload, increase() stays right.
        resets = prom.value(f'resets(registry_http_requests_total{{job="registry",handler="blob",method="get",'
                            f'code="200"}}[{window}])')
    assert not pod.actions("rolled back")
    print(f"v{pod.major}: {int(scrapes)} scrapes over 10 reloads, all up; {int(resets)} counter resets seen")
    assert scrapes >= 12 and resets == 9  # the first reload's counter rose from nothing


def test_a_pull_through_cache_s_registry_proxy_metrics_pass_through_the_same_endpoint(tmp_path):
    """A pull-through cache on Distribution 3.1.1 (2.8 keeps these counters in expvar only): the misses of a
    first pull and the hits of a second show in registry_proxy_* on the agent's stable endpoint, nothing to add."""
    import re

    from support.registries.registry import REGISTRY3_BINARY, pull_image, running_registry

    if not REGISTRY3_BINARY:
        pytest.skip("BERTH_REGISTRY3_BIN is not set")
    upstream_port = free_port()
    upstream_config = (f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: "
                       f"{tmp_path / 'upstream-data'}\nhttp:\n  addr: 127.0.0.1:{upstream_port}\n").encode()
    with running_registry(upstream_config, tmp_path / "upstream", binary=REGISTRY3_BINARY) as upstream:
        image = make_oci_image(tmp_path / "image", layer_size=32 * 1024)
        push_image(image, upstream.host, "library/app:1")
        pod = RegistryPod(tmp_path / "pod", binary=REGISTRY3_BINARY)
        metrics_port = free_port()
        try:
            spec = on_distribution(filesystem_spec(pod.port), "3")
            spec["config"]["proxy"] = {"remoteURL": upstream.url}
            pod.write_registry_file(registry_object(spec))
            pod.start_agent(extra=["--registry-metrics-addr", f"127.0.0.1:{metrics_port}"])
            pod.start_supervisor(env={"BERTH_DEBUG_PORTS": f"{free_port()} {free_port()}"})
            pod.wait_serving()
            pull_image(pod.host, "library/app:1", tmp_path / "first")
            pull_image(pod.host, "library/app:1", tmp_path / "second")

            def total(name: str, text: str) -> float:
                return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))

            text = wait_for(lambda: (s := _scrape(metrics_port))[0] == 200
                            and total("registry_proxy_hits_total", s[1]) > 0 and s[1],
                            what="proxy hits through the agent's endpoint")
        finally:
            pod.stop()
    assert total("registry_proxy_misses_total", text) >= 1
    assert total("registry_proxy_requests_total", text) >= 2
    requests, misses = total("registry_proxy_requests_total", text), total("registry_proxy_misses_total", text)
    print(f"registry_proxy_* through the agent: {requests:.0f} requests, {misses:.0f} misses, "
          f"{total('registry_proxy_hits_total', text):.0f} hits")
