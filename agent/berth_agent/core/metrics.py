"""The agent's Prometheus metrics (default registry, prefix berth_agent_), served on /metrics by health.py.

Names are fixed by docs/design.md §4.4. Label values are bounded sets chosen by our code
(source names, failure reasons, a config hash), never user input and never secret values.
"""

from __future__ import annotations

from prometheus_client.metrics import Counter, Gauge, Histogram
from prometheus_client.registry import REGISTRY

_P = "berth_agent_"

# prometheus_client appends "_total" to counter names itself.
reloads_total = Counter(_P + "reloads", "Registry restarts that came up healthy on the new config.")
reload_failures_total = Counter(
    _P + "reload_failures", "Reloads that failed, by reason (preflight, restart, verify, write).", ["reason"]
)
rollbacks_total = Counter(_P + "rollbacks", "Times the last good config was restored after a failed reload.")
last_reload_success_timestamp_seconds = Gauge(
    _P + "last_reload_success_timestamp_seconds", "Unix time of the last successful reload."
)
# Overlapped restart (docs/decisions/0008-overlapped-restart-for-2-8.md): from the old registry's listener closing to
# the new one listening. About one registry cold start; connections in that window are refused (a replica is out of its
# Service by then).
last_reload_no_listener_seconds = Gauge(
    _P + "last_reload_no_listener_seconds", "Time the port had no listener during the last reload."
)
reload_no_listener_seconds = Histogram(
    _P + "reload_no_listener_seconds", "Time the port had no listener during a reload.",
    buckets=(0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 5.0),
)
# Replicas reload one at a time: time spent waiting for the Registry's reload Lease.
reload_lease_wait_seconds = Histogram(
    _P + "reload_lease_wait_seconds", "Time a reload waited for its turn (the Registry's reload Lease).",
    buckets=(0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
)
# hash: Rendered.identity, over config.yml and the files beside it (status.agents.<pod>.configHash, the same value).
config_info = Gauge(_P + "config_info", "1 for the identity of the config the registry runs now (sha256 over "
                    "config.yml and the files beside it: TLS, token trust, htpasswd).", ["hash"])
# The registry watch (apply/registry_watch.py): registry exits the agent did not ask for, by reason ("crash": it ran
# a while; "signal": killed by a signal, e.g. kill -9 or the OOM killer; "start-failure": within 2 s of its
# start, a config or a port it refuses), and whether berth-supervise runs.
registry_exits_total = Counter(_P + "registry_exits", "Registry exits the agent did not ask for, by reason.",
                               ["reason"])
notifications_dropped_total = Counter(
    _P + "notifications_dropped", "Notification events dropped, by endpoint name: the outbox's size bound, still "
    "held at the pod's end, or held by an old registry at the bound of its wait after a reload.", ["endpoint"])
# The pod's notification outbox (outbox/, docs/decisions/0002-a-notification-outbox-in-the-agent.md).
notifications_stored_total = Counter(_P + "notifications_stored", "Notification events the outbox stored on disk.")
notifications_delivered_total = Counter(
    _P + "notifications_delivered", "Notification events delivered, by endpoint name.", ["endpoint"])
notifications_pending = Gauge(
    _P + "notifications_pending", "Notification events the outbox holds for an endpoint, by endpoint name.",
    ["endpoint"])
notifications_failing_since = Gauge(
    _P + "notifications_failing_since_timestamp_seconds", "Unix time of the first failure in a row to deliver to "
    "an endpoint (0 while it takes events), by endpoint name.", ["endpoint"])
outbox_bytes = Gauge(_P + "outbox_bytes", "Bytes of notification events the outbox keeps on disk.")
supervisor_up = Gauge(_P + "supervisor_up", "1 while berth-supervise (the registry container's command) runs, else 0.")
registry_serving = Gauge(_P + "registry_serving",
                         "1 while a registry started on the config the agent believes runs answers, else 0.")
renders_total = Counter(_P + "renders", "Config renders attempted.")
render_errors_total = Counter(_P + "render_errors", "Renders that failed on bad input, by source.", ["source"])
htpasswd_updates_total = Counter(_P + "htpasswd_updates", "htpasswd rewrites applied without a restart.")
watch_events_total = Counter(_P + "watch_events", "Events seen by the watch loops, by source.", ["source"])
watch_errors_total = Counter(_P + "watch_errors", "Errors in the watch loops, by source.", ["source"])
watch_restarts_total = Counter(
    _P + "watch_restarts", "Watches reopened (timeout, drop, relist), by source.", ["source"]
)
# The pvc_* series exist only once a PVC is probed (expose_pvc): a registry on object storage has no PVC, and a
# pvc_ok of 0 there would look like a broken volume to an alert.
pvc_capacity_bytes = Gauge(_P + "pvc_capacity_bytes", "Size of the filesystem holding the PVC mount path.",
                           registry=None)
pvc_free_bytes = Gauge(_P + "pvc_free_bytes", "Bytes available to the registry on the PVC mount path.", registry=None)
pvc_ok = Gauge(_P + "pvc_ok", "1 when the PVC mount path exists and is writable, else 0.", registry=None)
_pvc_exposed = False
# Not in the fixed list: failures to write status or Events (the reporter never raises, so this is where
# they show), by kind ("status", "event", "lookup").
report_errors_total = Counter(_P + "report_errors", "Failed writes of status or Events to the API, by kind.", ["kind"])
# Mounted Secrets also watched over the API (sources/api_secrets.py): which path brought each applied Secret change
# ("api" or "mount"), and how long the kubelet's volume took to show what the API already had.
secret_changes_applied_total = Counter(
    _P + "secret_changes_applied", "Secret changes applied, by the path that delivered them (api, mount).", ["path"]
)
secret_mount_lag_seconds = Histogram(
    _P + "secret_mount_lag_seconds", "Time from a Secret change seen over the API until the mount showed it.",
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 45, 60, 75, 90, 120, 180, 300, 600),
)

# Garbage collection (docs/design.md §4.5): runs by result (Succeeded, Failed, TimedOut, Interrupted) and what
# they deleted, counted by the runner; this pod's read-only window, by every agent.
gc_runs_total = Counter(_P + "gc_runs", "Garbage-collection runs this agent ran or recorded, by result.", ["result"])
gc_duration_seconds = Histogram(
    _P + "gc_duration_seconds", "Run time of registry garbage-collect (from its start to its exit).",
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 86400),
)
gc_blobs_deleted_total = Counter(_P + "gc_blobs_deleted", "Blobs deleted by garbage collection (not dry runs).")
gc_manifests_deleted_total = Counter(_P + "gc_manifests_deleted",
                                     "Manifests deleted by garbage collection (not dry runs).")
gc_bytes_freed_total = Counter(_P + "gc_bytes_freed", "Bytes freed by garbage collection (filesystem storage).")
gc_read_only_seconds = Gauge(_P + "gc_read_only_seconds",
                             "This pod's last read-only window for garbage collection, first read-only serve to "
                             "writable serve.")
gc_read_only = Gauge(_P + "gc_read_only", "1 while this pod serves read-only for garbage collection, else 0.")


# A pull-through cache's upstream refusing the credentials (apply/upstream_watch.py counts each refusal;
# the PrometheusRule in deploy/monitoring pages on it).
upstream_auth_failures_total = Counter(
    _P + "upstream_auth_failures", "Times the pull-through cache's upstream refused the credentials (or a token).")


def expose_pvc() -> None:
    """Add the pvc_* series to /metrics (idempotent)."""
    global _pvc_exposed
    if not _pvc_exposed:
        _pvc_exposed = True
        for gauge in (pvc_capacity_bytes, pvc_free_bytes, pvc_ok):
            REGISTRY.register(gauge)


def set_config_identity(identity: str) -> None:
    """Make config_info show `identity` only: an info metric with one live series."""
    config_info.clear()
    config_info.labels(hash=identity).set(1)


__all__ = [
    "config_info",
    "expose_pvc",
    "gc_blobs_deleted_total",
    "gc_bytes_freed_total",
    "gc_duration_seconds",
    "gc_manifests_deleted_total",
    "gc_read_only",
    "gc_read_only_seconds",
    "gc_runs_total",
    "htpasswd_updates_total",
    "last_reload_no_listener_seconds",
    "last_reload_success_timestamp_seconds",
    "reload_lease_wait_seconds",
    "reload_no_listener_seconds",
    "pvc_capacity_bytes",
    "pvc_free_bytes",
    "pvc_ok",
    "notifications_delivered_total",
    "notifications_dropped_total",
    "notifications_failing_since",
    "notifications_pending",
    "notifications_stored_total",
    "outbox_bytes",
    "registry_exits_total",
    "registry_serving",
    "reload_failures_total",
    "reloads_total",
    "render_errors_total",
    "renders_total",
    "report_errors_total",
    "rollbacks_total",
    "secret_changes_applied_total",
    "secret_mount_lag_seconds",
    "set_config_identity",
    "supervisor_up",
    "upstream_auth_failures_total",
    "watch_errors_total",
    "watch_events_total",
    "watch_restarts_total",
]
