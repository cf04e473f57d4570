"""The metric names are an interface (docs/design.md §4.4): check the exposition names."""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest

from berth_agent.core import metrics

EXPOSED = {
    "reloads_total": "berth_agent_reloads_total",
    "reload_failures_total": "berth_agent_reload_failures_total",
    "rollbacks_total": "berth_agent_rollbacks_total",
    "last_reload_success_timestamp_seconds": "berth_agent_last_reload_success_timestamp_seconds",
    "config_info": "berth_agent_config_info",
    "renders_total": "berth_agent_renders_total",
    "render_errors_total": "berth_agent_render_errors_total",
    "htpasswd_updates_total": "berth_agent_htpasswd_updates_total",
    "watch_events_total": "berth_agent_watch_events_total",
    "watch_errors_total": "berth_agent_watch_errors_total",
    "watch_restarts_total": "berth_agent_watch_restarts_total",
    "pvc_capacity_bytes": "berth_agent_pvc_capacity_bytes",
    "pvc_free_bytes": "berth_agent_pvc_free_bytes",
    "pvc_ok": "berth_agent_pvc_ok",
    "report_errors_total": "berth_agent_report_errors_total",
    "gc_runs_total": "berth_agent_gc_runs_total",
    "gc_duration_seconds": "berth_agent_gc_duration_seconds",
    "gc_blobs_deleted_total": "berth_agent_gc_blobs_deleted_total",
    "gc_manifests_deleted_total": "berth_agent_gc_manifests_deleted_total",
    "gc_bytes_freed_total": "berth_agent_gc_bytes_freed_total",
    "gc_read_only_seconds": "berth_agent_gc_read_only_seconds",
    "gc_read_only": "berth_agent_gc_read_only",
}


def test_every_metric_is_exposed_under_its_name():
    metrics.reload_failures_total.labels(reason="verify").inc()
    metrics.render_errors_total.labels(source="cosi").inc()
    for label in ("mounts", "registry-api"):
        metrics.watch_events_total.labels(source=label).inc()
        metrics.watch_errors_total.labels(source=label).inc()
        metrics.watch_restarts_total.labels(source=label).inc()
    metrics.report_errors_total.labels(kind="status").inc()
    metrics.set_config_identity("h")
    metrics.gc_runs_total.labels(result="Succeeded").inc()
    metrics.expose_pvc()
    text = generate_latest(REGISTRY).decode()
    for attribute, exposed in EXPOSED.items():
        assert hasattr(metrics, attribute), attribute
        assert f"\n{exposed}" in text or f"\n{exposed}{{" in text, exposed
    assert 'berth_agent_reload_failures_total{reason="verify"}' in text
    assert 'berth_agent_watch_errors_total{source="registry-api"}' in text


def test_pvc_series_appear_only_once_a_pvc_is_probed(tmp_path):
    """A fresh process (this one has probed already): nothing pvc_* until PvcProbe.check runs."""
    import subprocess
    import sys

    script = (
        "from prometheus_client import REGISTRY, generate_latest\n"
        "from berth_agent.core.health import Health\n"
        "from berth_agent.sources.pvc import PvcProbe\n"
        "print('pvc_ok' in generate_latest(REGISTRY).decode())\n"
        f"PvcProbe({str(tmp_path)!r}, Health()).check()\n"
        "print('berth_agent_pvc_ok 1.0' in generate_latest(REGISTRY).decode())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "True"]
