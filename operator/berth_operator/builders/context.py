"""What the builders know about the cluster besides the Registry itself."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterFacts:
    """What the apply layer looked up in the cluster, so builders stay pure."""

    # The Berth image (the operator's own image), run by the agent container.
    agent_image: str
    # spec.credentialsSecretName of an EXISTING spec.config.storage.objectStorage.bucketAccess (None: not known yet).
    bucket_access_secret: str | None = None
    # accessModes of an EXISTING spec.config.storage.filesystem.persistentVolumeClaim (None: unknown).
    pvc_access_modes: tuple[str, ...] | None = None
    # A surge on a ReadWriteOnce claim passed the Deployment's progress deadline and that roll is not done: it goes
    # on by Recreate (storage.rollout_strategy).
    rollout_fallback: bool = False
    # Whether the prometheus-operator ServiceMonitor CRD is installed (spec.monitoring.serviceMonitor needs it).
    service_monitor_crd: bool = False
    # Whether the cluster serves the Gateway API's HTTPRoute (spec.gateway needs it) and cert-manager's Certificate
    # (an issuerRef needs it).
    gateway_api: bool = False
    cert_manager: bool = False
