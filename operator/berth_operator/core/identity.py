"""Who this operator process is, without asking the passwd database.

The image runs as UID 65532, which has no /etc/passwd entry; kopf's default identity calls getpass.getuser() and crashes
there (docs/decisions/0026-one-leader-through-a-lease.md). The pod name (downward API: POD_NAME) names the process in
the cluster; outside a pod, the hostname.

The leader Lease needs an identity no other candidate has: outside a pod, two processes on one machine
share a hostname, so the process id is added.
"""

from __future__ import annotations

import os
import socket


def own_identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def lease_identity() -> str:
    pod = os.environ.get("POD_NAME")
    return pod if pod else f"{socket.gethostname()}/{os.getpid()}"
