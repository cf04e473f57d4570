"""Specs that are valid but cannot be carried out as written. The controller reports them (Degraded); the
builders still build, capped to what can run."""

from __future__ import annotations

import re

from berth_api import Registry
from berth_api.types import duration_seconds

from . import storage
from .checks import Problem
from .context import ClusterFacts
from .meta import registry_name
from .pod import LEAVE_SECONDS, TERMINATION_GRACE_PERIOD_SECONDS

# A Service name (and the instance label value) must be an RFC 1035 label.
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_MAX_LABEL_LENGTH = 63
# Seconds the registry needs after its drain to exit, and the agent after it.
_STOP_MARGIN_SECONDS = 10
# Hosts in spec.http.addr that listen on every interface of the pod.
_WILDCARD_HOSTS = {"", "0.0.0.0", "[::]", "[0:0:0:0:0:0:0:0]"}


def problems(reg: Registry, facts: ClusterFacts) -> list[Problem]:
    found: list[Problem] = []
    name = registry_name(reg)
    if len(name) > _MAX_LABEL_LENGTH or not _DNS_1035_LABEL.match(name):
        found.append(Problem(
            "Unsatisfiable",
            f"metadata.name: {name!r} cannot name the registry's Service: it must be at most 63 characters of "
            "lower-case letters, digits and '-', starting with a letter"
        ))

    replicas = reg.spec.replicas
    filesystem = reg.spec.config.storage.filesystem
    if replicas > 1 and storage.single_writer(reg, facts):
        if filesystem is not None and filesystem.persistent_volume_claim is not None:
            modes = facts.pvc_access_modes
            claim = (
                f"claim {filesystem.persistent_volume_claim!r} "
                + (f"(accessModes {', '.join(modes)})" if modes is not None else "(accessModes not known yet)")
            )
        else:
            claim = f"the ReadWriteOnce claim created from storageClass {filesystem.storage_class!r}"
        found.append(Problem(
            "ReplicasCapped",
            f"spec.replicas: {replicas} needs ReadWriteMany storage; filesystem storage on {claim} "
            "is capped at 1 replica"
        ))
    if replicas > 1 and storage.pod_local_data(reg):
        found.append(Problem(
            "ReplicasCapped",
            f"spec.replicas: {replicas} with spec.config.storage.inmemory gives every pod its own data, so pulls "
            "fail on pods that did not receive the push; capped at 1 replica"
        ))

    object_storage = reg.spec.config.storage.object_storage
    if storage.waiting_for_credentials(reg, facts) and object_storage is not None:
        found.append(Problem(
            "WaitingForBucketAccess",
            f"spec.config.storage.objectStorage.bucketAccess: waiting for BucketAccess "
            f"{object_storage.bucket_access!r} to name its credentials Secret (spec.credentialsSecretName); "
            "the Deployment is not built until then"
        ))

    addr = reg.spec.http.addr
    host = addr.rsplit(":", 1)[0]
    if host not in _WILDCARD_HOSTS:
        found.append(Problem(
            "Unsatisfiable",
            f"spec.http.addr: {addr!r} listens on {host} only, where neither the Service nor the kubelet's probes "
            f"reach it (they use the pod IP); use ':{reg.spec.http.port}' or '0.0.0.0:{reg.spec.http.port}'"
        ))

    apart = storage.placement_keeps_pods_apart(reg)
    if apart is not None and storage.claim_mode(reg, facts) == "node":
        found.append(Problem(
            "Unsatisfiable",
            f"{apart} keeps two of this Registry's pods off one node, but its ReadWriteOnce claim can be mounted on "
            "one node only: a roll cannot start the new pod beside the running one, so it stops the old pod first "
            "(Recreate: the registry is down until the new pod serves)"
        ))

    # A stopping pod: the preStop sleep (LEAVE_SECONDS, its endpoints leave every proxy), then the drain.
    drain = duration_seconds(reg.spec.http.drain_timeout)
    if LEAVE_SECONDS + drain + _STOP_MARGIN_SECONDS > TERMINATION_GRACE_PERIOD_SECONDS:
        found.append(Problem(
            "Unsatisfiable",
            f"spec.http.drainTimeout: {reg.spec.http.drain_timeout} does not fit the pod's termination grace period "
            f"of {TERMINATION_GRACE_PERIOD_SECONDS}s; a stopping pod is killed after "
            f"{TERMINATION_GRACE_PERIOD_SECONDS - LEAVE_SECONDS - _STOP_MARGIN_SECONDS}s of draining"
        ))
    return found
