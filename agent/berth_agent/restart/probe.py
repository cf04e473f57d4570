"""Is the new registry serving? GET / on its endpoint, and a /proc look at which process answers.

The new registry answers ~20-30 ms after exec (docs/upstream.md#measured-registry-start); one that dies at start
repeatedly is a config it refuses, told apart without sitting out the whole bound.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .endpoint import Endpoint
from .procfs import PROC, RegistryProcess, find_registry_processes

POLL_SECONDS = 0.005  # the new registry answers ~20-30 ms after exec (docs/upstream.md#measured-registry-start)
LISTENER_POLL_SECONDS = 0.001  # the old process's fd list, or a GET / refused at once: cheap to repeat
SCAN_SECONDS = 0.1  # a /proc scan costs milliseconds: not on every GET / try after a handover
NUDGE_SECONDS = 0.05  # SIGUSR1 again if no successor appeared (a signal can land while the script is busy)
# berth-supervise retries a start that lost the bind race up to 5 times within milliseconds; two more deaths
# after that are a config the registry refuses.
CRASHES_BEFORE_GIVING_UP = 2
CRASHES_AFTER_HANDOVER = 7
STOPPED = "the agent is stopping"


def answers(endpoint: Endpoint, *, timeout: float = 1.0) -> int | None:
    """HTTP status of GET / (200 when up, 503 when a health check fails), or None when nothing answers."""
    if endpoint.tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # liveness only: the certificate is the registry's business
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            endpoint.host, endpoint.port, timeout=timeout, context=context
        )
    else:
        conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    try:
        conn.request("GET", "/", headers={"Connection": "close"})
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def is_up(status: int | None) -> bool:
    return status in (200, 401)


@dataclass(frozen=True)
class ServingWait:
    """What a wait for a new registry looks for: a process serving config_path, not in `exclude`, that answers
    GET / on `endpoint` within `timeout` seconds. `crashes` registries that die at start are a config it refuses.
    One value for both waits (wait_until_serving, wait_for_successor), so their signatures cannot drift apart."""

    config_path: Path
    endpoint: Endpoint
    timeout: float
    exclude: frozenset[RegistryProcess] | set[RegistryProcess] = frozenset()
    proc: Path = PROC
    crashes: int = CRASHES_BEFORE_GIVING_UP

    def __post_init__(self) -> None:
        # A snapshot: the caller's set of draining registries changes while the wait runs.
        object.__setattr__(self, "exclude", frozenset(self.exclude))


class _Watch:
    """What a wait has seen so far: the processes that appeared (not in `exclude`), which of them died at start,
    the last answer to GET /, and the failure text at the end."""

    def __init__(self, wait: ServingWait, timing: dict[str, float] | None) -> None:
        self.wait, self.timing = wait, timing
        self.config_path, self.endpoint, self.proc = wait.config_path, wait.endpoint, wait.proc
        self.deadline = time.monotonic() + wait.timeout
        self.seen: set[RegistryProcess] = set()
        self.current: RegistryProcess | None = None
        self.last_status: int | None = None

    def fresh(self) -> list[RegistryProcess]:
        found = [p for p in find_registry_processes(self.config_path, proc=self.proc) if p not in self.wait.exclude]
        self.seen.update(found)
        return found

    def ask(self) -> int | None:
        self.last_status = answers(self.endpoint, timeout=min(1.0, max(0.05, self.deadline - time.monotonic())))
        return self.last_status

    def found(self, process: RegistryProcess, now: float) -> tuple[RegistryProcess, str]:
        if self.timing is not None:
            self.timing.setdefault("listening", now)
        return process, ""

    def refused(self) -> str | None:
        """Registries that died without ever answering: the config is refused at start (the supervisor keeps
        retrying it once a second). No need to sit out the whole bound."""
        died = [p for p in self.seen if not p.alive(self.proc)]
        if len(died) >= self.wait.crashes:
            return f"the registry exited at start {len(died)} times on {self.config_path} (a config it refuses?)"
        return None

    def failure(self) -> tuple[None, str]:
        timeout = self.wait.timeout
        if self.current is None:
            return None, f"no registry process serving {self.config_path} appeared within {timeout:g}s"
        if self.last_status is None:
            return None, (f"the registry did not answer on {self.endpoint.host}:{self.endpoint.port} within "
                          f"{timeout:g}s")
        return None, f"the registry answered HTTP {self.last_status} on GET / instead of 200 within {timeout:g}s"


def _pause(stop: threading.Event | None, seconds: float) -> bool:
    """Sleep `seconds`; True when `stop` was set meanwhile."""
    if stop is not None:
        return stop.wait(seconds)
    time.sleep(seconds)
    return False


def wait_until_serving(
    wait: ServingWait,
    *,
    stop: threading.Event | None = None,
    nudge: Callable[[], None] | None = None,
    timing: dict[str, float] | None = None,
) -> tuple[RegistryProcess | None, str]:
    """Wait for the registry `wait` describes; (process, why not).

    Looks in /proc first, then asks GET / (the old registry may still listen: only an answer while a new process
    runs counts). `nudge` is called every NUDGE_SECONDS while no new process has appeared (to repeat a handover
    signal); `timing["listening"]` gets the monotonic time the new registry first answered.
    """
    return _look_until_serving(_Watch(wait, timing), stop, nudge, time.monotonic())


def _look_until_serving(watch: _Watch, stop: threading.Event | None, nudge: Callable[[], None] | None,
                        nudged: float) -> tuple[RegistryProcess | None, str]:
    while True:
        fresh = watch.fresh()
        if fresh:
            watch.current = fresh[0]
            # Only trust the answer if that process is still the one running (not one that died meanwhile).
            if is_up(watch.ask()) and watch.current.alive(watch.proc):
                return watch.found(watch.current, time.monotonic())
        elif nudge is not None and time.monotonic() - nudged >= NUDGE_SECONDS:
            nudge()
            nudged = time.monotonic()
        refused = watch.refused()
        if refused is not None:
            return None, refused
        if time.monotonic() >= watch.deadline:
            return watch.failure()
        if _pause(stop, POLL_SECONDS):
            return None, STOPPED


def wait_for_successor(
    wait: ServingWait,
    *,
    stop: threading.Event | None = None,
    nudge: Callable[[], None] | None = None,
    timing: dict[str, float] | None = None,
) -> tuple[RegistryProcess | None, str]:
    """wait_until_serving after a 2.8 handover: the old registry no longer listens, so whatever answers is new.
    Tries GET / every millisecond and scans /proc only to confirm an answer and, every SCAN_SECONDS, to count
    registries that died at start; at the deadline one last full look (wait_until_serving's), then its failure
    text."""
    watch = _Watch(wait, timing)
    nudged = scanned = time.monotonic()
    while True:
        status = watch.ask()
        now = time.monotonic()
        if is_up(status) or now - scanned >= SCAN_SECONDS:
            scanned = now
            fresh = watch.fresh()
            if is_up(status) and fresh:
                watch.current = max(fresh, key=lambda p: p.start_ticks)
                return watch.found(watch.current, now)
            refused = watch.refused()
            if refused is not None:
                return None, refused
        if nudge is not None and now - nudged >= NUDGE_SECONDS and status is None:
            nudge()
            nudged = now
        if now >= watch.deadline:
            return _look_until_serving(watch, stop, nudge, nudged)
        if _pause(stop, LISTENER_POLL_SECONDS):
            return None, STOPPED


__all__ = ["CRASHES_AFTER_HANDOVER", "CRASHES_BEFORE_GIVING_UP", "LISTENER_POLL_SECONDS", "NUDGE_SECONDS",
           "POLL_SECONDS", "SCAN_SECONDS", "STOPPED", "ServingWait", "answers", "is_up", "wait_for_successor",
           "wait_until_serving"]
