"""A real Prometheus (Debian's `prometheus` 2.42 package) on 127.0.0.1, started by a test, never as a service.

    with running_prometheus(tmp_path, {"registry": ["127.0.0.1:8082"]}, interval="1s") as prom:
        prom.wait_for_scrapes("registry", 3)
        prom.query('sum(registry_http_requests_total{job="registry"})')   # the API's "result" list

Also `promtool` (same package) for the rule tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from support.common.polling import wait_for
from support.common.ports import free_port
from support.common.processes import started

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


class Prometheus:
    def __init__(self, root: Path, jobs: dict[str, list[str]], *, interval: str = "1s") -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.interval = interval  # also the scrape timeout
        self.port = free_port()
        self.config = self.root / "prometheus.yml"
        self.config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                               for job, targets in jobs.items()],
        }))
        self.log_path = self.root / "prometheus.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> Prometheus:
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.config}", f"--storage.tsdb.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        started(self, self.process, self.port, "Prometheus", timeout=60,
                log=lambda: "\n" + self.log_path.read_text(errors="replace"))
        # The port listens before the TSDB is open: queries answer 503 until /-/ready says 200.
        deadline = time.monotonic() + 60
        while not self._ready():
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"Prometheus not ready:\n{self.log_path.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.process is not None:
            self._log.close()

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def value(self, expr: str) -> float | None:
        """The single value of an instant query (None when it has no result)."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def targets(self) -> list[dict]:
        return self.api("targets")["activeTargets"]

    def scrape_report(self, job: str, window: str) -> str:
        """What a failure message needs of `job`'s scrapes over `window`: how many failed of how many, the longest
        (against the scrape timeout: a timed-out scrape lasts about that long) and the last error Prometheus kept."""
        total = self.value(f'count_over_time(up{{job="{job}"}}[{window}])') or 0
        failed = total - (self.value(f'sum_over_time(up{{job="{job}"}}[{window}])') or 0)  # up is 1 or 0
        longest = self.value(f'max_over_time(scrape_duration_seconds{{job="{job}"}}[{window}])')
        errors = [t.get("lastError") or "" for t in self.targets() if t["labels"]["job"] == job]
        return (f"{failed:.0f} of {total:.0f} scrapes of {job} failed in {window}; the longest took {longest} s "
                f"(scrape timeout {self.interval}); last error: {errors}")

    def wait_for_scrapes(self, job: str, count: int, timeout: float = 60.0) -> None:
        """Until `count` more scrapes of `job` were recorded (whatever their outcome)."""
        expr = f'count_over_time(up{{job="{job}"}}[1h])'
        start = self.value(expr) or 0
        wait_for(lambda: (self.value(expr) or 0) >= start + count,
                 lambda: f"{count} more scrapes of {job}:\n{self.log_path.read_text(errors='replace')[-2000:]}",
                 timeout, 0.2)


@contextmanager
def running_prometheus(root: Path, jobs: dict[str, list[str]], **kwargs) -> Iterator[Prometheus]:
    prometheus = Prometheus(root, jobs, **kwargs).start()
    try:
        yield prometheus
    finally:
        prometheus.stop()


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


__all__ = ["PROMETHEUS", "PROMTOOL", "Prometheus", "promtool", "running_prometheus"]
