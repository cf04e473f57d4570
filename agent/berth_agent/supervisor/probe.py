"""Is the new registry serving? GET / on its endpoint, and a /proc look at which process answers.

The new registry answers ~20-30 ms after exec (field-notes §6); one that dies at start repeatedly is a config it
refuses, told apart without sitting out the whole bound.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .endpoint import Endpoint
from .procfs import PROC, RegistryProcess, find_registry_processes

POLL_SECONDS = 0.005  # the new registry answers ~20-30 ms after exec (field-notes §6)
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


def wait_until_serving(
    config_path: Path,
    endpoint: Endpoint,
    *,
    timeout: float,
    exclude: list[RegistryProcess] | set[RegistryProcess] = (),
    proc: Path = PROC,
    stop: threading.Event | None = None,
    nudge: Callable[[], None] | None = None,
    crashes: int = CRASHES_BEFORE_GIVING_UP,
    timing: dict[str, float] | None = None,
    fast: bool = False,
) -> tuple[RegistryProcess | None, str]:
    """Wait for a registry process not in `exclude` serving config_path that answers HTTP; (process, why not).

    `nudge` is called every NUDGE_SECONDS while no new process has appeared (to repeat a handover signal);
    `timing["listening"]` gets the monotonic time the new registry first answered. `fast` (after a handover:
    the old registry no longer listens, so whatever answers is new) tries GET / every millisecond and scans
    /proc only to confirm the answer and, every SCAN_SECONDS, to count registries that died at start.
    """
    deadline = time.monotonic() + timeout
    old = set(exclude)
    last_status: int | None = None
    current: RegistryProcess | None = None
    seen: set[RegistryProcess] = set()
    nudged = scanned = time.monotonic()
    while fast:
        last_status = answers(endpoint, timeout=min(1.0, max(0.05, deadline - time.monotonic())))
        now = time.monotonic()
        if is_up(last_status) or now - scanned >= SCAN_SECONDS:
            scanned = now
            fresh = [p for p in find_registry_processes(config_path, proc=proc) if p not in old]
            seen.update(fresh)
            if is_up(last_status) and fresh:
                current = max(fresh, key=lambda p: p.start_ticks)
                if timing is not None:
                    timing.setdefault("listening", now)
                return current, ""
            died = [p for p in seen if not p.alive(proc)]
            if len(died) >= crashes:
                return None, f"the registry exited at start {len(died)} times on {config_path} (a config it refuses?)"
        if nudge is not None and now - nudged >= NUDGE_SECONDS and last_status is None:
            nudge()
            nudged = now
        if now >= deadline:
            fast = False  # one last full look below, then the usual failure text
            break
        if stop is not None and stop.wait(LISTENER_POLL_SECONDS):
            return None, STOPPED
        if stop is None:
            time.sleep(LISTENER_POLL_SECONDS)
    while True:
        fresh = [p for p in find_registry_processes(config_path, proc=proc) if p not in old]
        seen.update(fresh)
        if fresh:
            current = fresh[0]
            last_status = answers(endpoint, timeout=min(1.0, max(0.05, deadline - time.monotonic())))
            # Only trust the answer if that process is still the one running (not one that died meanwhile).
            if is_up(last_status) and current.alive(proc):
                if timing is not None:
                    timing.setdefault("listening", time.monotonic())
                return current, ""
        elif nudge is not None and time.monotonic() - nudged >= NUDGE_SECONDS:
            nudge()
            nudged = time.monotonic()
        # Registries that died without ever answering: the config is refused at start (the supervisor keeps
        # retrying it once a second). No need to sit out the whole bound.
        died = [p for p in seen if not p.alive(proc)]
        if len(died) >= crashes:
            return None, f"the registry exited at start {len(died)} times on {config_path} (a config it refuses?)"
        if time.monotonic() >= deadline:
            break
        if stop is not None and stop.wait(POLL_SECONDS):
            return None, STOPPED
        if stop is None:
            time.sleep(POLL_SECONDS)
    if current is None:
        return None, f"no registry process serving {config_path} appeared within {timeout:g}s"
    if last_status is None:
        return None, f"the registry did not answer on {endpoint.host}:{endpoint.port} within {timeout:g}s"
    return None, f"the registry answered HTTP {last_status} on GET / instead of 200 within {timeout:g}s"


__all__ = ["CRASHES_AFTER_HANDOVER", "CRASHES_BEFORE_GIVING_UP", "LISTENER_POLL_SECONDS", "NUDGE_SECONDS",
           "POLL_SECONDS", "SCAN_SECONDS", "STOPPED", "answers", "is_up", "wait_until_serving"]
