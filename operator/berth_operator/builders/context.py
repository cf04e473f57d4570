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
    # (apiVersion, kind) of the optional kinds the cluster does not serve (engine/facts.unserved): build_all
    # makes none of them (engine/facts.py reports the missing API instead).
    unserved: frozenset[tuple[str, str]] = frozenset()
