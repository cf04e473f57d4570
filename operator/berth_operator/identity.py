"""Who this operator process is, without asking the passwd database.

The image runs as UID 65532, which has no /etc/passwd entry; kopf's default identity calls
getpass.getuser() and crashes there (issue 7). The pod name (downward API: POD_NAME) names the process
in the cluster; outside a pod, the hostname.
"""

from __future__ import annotations

import os
import socket


def own_identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()
