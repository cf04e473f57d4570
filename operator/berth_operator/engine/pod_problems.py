"""Why a registry pod cannot run, as its status says it: an image that cannot be pulled, a pod the
scheduler cannot place, a container in a crash loop or killed for memory, a container whose env names a missing
Secret or ConfigMap key. Pure: pods in (as the caches keep them, cluster.caches.strip), findings out, each naming
the pod, the container, the image and the kubelet's or the scheduler's own words, so that nobody needs
`kubectl describe pod` to learn why a Registry is not Ready.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .status import BINARY_CONTAINER, Finding

PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable",
                "SignatureValidationFailed")
CONFIG_REASONS = ("CreateContainerConfigError", "CreateContainerError")
MAX_WORDS = 400  # of one kubelet or scheduler message (they quote whole image references and node lists)
# ImagePullBackOff's message wraps the pull's error: `Back-off pulling image "X": ErrImagePull: <error>`.
_BACK_OFF = re.compile(r'^Back-off pulling image "[^"]*":\s*(ErrImagePull:\s*)?')


def _said(text: Any) -> str:
    return " ".join(str(text or "").split())[:MAX_WORDS]


def _exit(terminated: Mapping[str, Any]) -> str:
    words = f"{terminated.get('reason') or 'exited'}, exit code {terminated.get('exitCode', '?')}"
    message = _said(terminated.get("message"))
    return f"{words}: {message}" if message else words


def _container_findings(pod: str, status: Mapping[str, Any]) -> Iterable[Finding]:
    name, image = status.get("name", "?"), status.get("image", "?")
    waiting = (status.get("state") or {}).get("waiting") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    terminated = (status.get("state") or {}).get("terminated") or {}
    reason = waiting.get("reason")
    where = f"pod {pod}: container {name}"
    if reason in PULL_REASONS:
        error = _BACK_OFF.sub("", _said(waiting.get("message")))
        yield Finding("ImagePullFailed", f"{where} cannot pull image {image}: {reason}" + (f": {error}" if error
                                                                                            else ""))
    elif reason in CONFIG_REASONS:
        yield Finding("ContainerConfigError", f"{where} cannot be created: {reason}: {_said(waiting.get('message'))}")
    elif name == BINARY_CONTAINER:
        return  # its failure is RegistryBinaryMissing (status.binary_findings), with cp's own words
    elif reason == "CrashLoopBackOff":
        kind = "OOMKilled" if last.get("reason") == "OOMKilled" else "CrashLoopBackOff"
        yield Finding(kind, f"{where} is in a crash loop ({status.get('restartCount', 0)} restarts), last exit: "
                            f"{_exit(last) if last else 'unknown'}")
    elif terminated.get("reason") == "OOMKilled":
        yield Finding("OOMKilled", f"{where} was killed for memory (OOMKilled): {_exit(terminated)}")


def findings(pods: Iterable[Mapping[str, Any]]) -> list[Finding]:
    """Every problem of every pod not being deleted, in pod order."""
    found: list[Finding] = []
    pods = list(pods)
    running = [(p.get("metadata") or {}).get("name", "?") for p in pods
               if (p.get("status") or {}).get("phase") == "Running"]
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            continue
        name = meta.get("name", "?")
        for condition in status.get("conditions") or ():
            if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                    and condition.get("reason") == "Unschedulable"):
                serving = f"; pod {', '.join(running)} keeps serving" if running else ""
                found.append(Finding("Unschedulable", f"pod {name} cannot be scheduled: "
                                                      f"{_said(condition.get('message'))}{serving}"))
        for container in (*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())):
            found += _container_findings(name, container)
    return found
