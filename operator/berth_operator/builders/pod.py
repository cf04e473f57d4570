"""The registry pod template: the agent (native sidecar) and the registry container, with the volumes of the
mount contract (docs/design.md section 3).

Only what needs a new pod may shape this template: the images, which Secrets and claim are mounted, the port,
the resources, and what the user sets on the pod (spec.pod, spec.env, spec.serviceAccount:
docs/decisions/0032-pod-overrides.md). Everything
the agent applies hot stays out, so editing it never rolls the pods.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from berth_api import Registry
from berth_api.kube_types import kube_dump
from berth_api.pod import (
    AGENT_HEALTH_PORT,
    AZURE_VOLUME,
    CONFIG_DIR,
    CONFIG_NAME,
    CONFIG_VOLUME,
    COSI_VOLUME,
    DATA_DIR,
    DATA_VOLUME,
    GCS_VOLUME,
    HTPASSWD_VOLUME,
    HTTP_SECRET_VOLUME,
    MOUNT_ROOT,
    NOTIFICATIONS_VOLUME,
    PREFLIGHT_ENV_PREFIX,
    PROXY_VOLUME,
    REDIS_VOLUME,
    REGISTRY_METRICS_PORT,
    S3_CA_DIR,
    S3_CA_VOLUME,
    S3_VOLUME,
    STATE_DIR,
    SYSTEM_CERT_DIRS,
    TLS_VOLUME,
    TMP_DIR,
    TMP_VOLUME,
    TOKEN_BUNDLE_VOLUME,
    TOKEN_JWKS_VOLUME,
    TOKEN_VOLUME,
)
from berth_api.pod_template import PROXY_ENV

from . import certificate, http_secret, ports, pvc, service_account, storage
from .context import ClusterFacts
from .meta import REGISTRY_COMPONENT, labels, namespace, registry_name, selector_labels
from .ports import AGENT_METRICS_PORT_NAME, REGISTRY_METRICS_PORT_NAME

# One non-root identity for both containers: the agent signals the registry process (kill(2) needs the same
# UID, docs/upstream.md#k8s-share-process-namespace) and writes config files (mode 0600) that the registry must read.
RUN_AS = 65532

# The paths, volumes and keys both programs use are in berth_api.pod; this one the agent only finds by the
# client's in-cluster default.
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# With replicas: how long an agent stays unready before it restarts its registry (and after it is back before
# the next pod goes). Two readiness probe periods of 1 s (failureThreshold 2; a leaving agent answers 503 at
# once, so no timeout is waited), plus ~3 s for the endpoints and kube-proxy.
LEAVE_SECONDS = 5

# Fixed on purpose: spec.http.drainTimeout is applied hot, so it may not shape the pod. Long enough for any
# sensible drain; problems() warns when the drain timeout would not fit.
TERMINATION_GRACE_PERIOD_SECONDS = 300
# What the automatically injected kube-api-access volume requests. The API server knows this value
# (WarnOnlyBoundTokenExpirationSeconds): with --service-account-extend-token-expiration (the default) it
# issues a longer-lived token and only warns, so a client that never re-reads the file keeps working.
TOKEN_EXPIRATION_SECONDS = 3607
# Secret files readable by the pod's group (fsGroup) and nobody else.
SECRET_MODE = 0o440
# The registry's own metrics (docs/decisions/0022-registry-metrics-across-reloads.md): the agent serves the
# current registry process's /metrics on this stable port (container port ports.REGISTRY_METRICS_PORT_NAME), proxied
# to the loopback debug port berth-supervise gave that process, one of DEBUG_PORTS (alternating, so a successor
# never binds the port its draining predecessor still holds; the debug listener is not shut down on SIGTERM,
# docs/upstream.md#dist-debug-server). Loopback only: pprof and /debug/vars on the debug port never leave the pod.
DEBUG_PORTS = (5301, 5302, 5303)  # two are used; the third stands in when spec.http.port is one of them
# The registry container runs the Berth image (berth-supervise holds the registry's listening socket, which a shell
# cannot, docs/decisions/0006-registry-binary-copied-from-spec-image.md); the registry binary still comes from
# spec.image: an init container copies it into this emptyDir, where the supervisor runs it. Both official images keep it
# at /bin/registry.
REGISTRY_BIN_VOLUME = "registry-bin"
REGISTRY_BIN_DIR = "/opt/berth/registry"
REGISTRY_BIN = f"{REGISTRY_BIN_DIR}/registry"
IMAGE_REGISTRY_BIN = "/bin/registry"
REGISTRY_BIN_SIZE = "256Mi"  # the 3.1.1 binary is ~30 MiB, 2.8's ~25 MiB
# Ports below this need net.ipv4.ip_unprivileged_port_start (a safe, namespaced sysctl) for a non-root process.
FIRST_UNPRIVILEGED_PORT = 1024
# The agent's resources unless spec.pod.agentResources says otherwise.
AGENT_RESOURCES = {"requests": {"cpu": "10m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}}
# On the pod template: the digest of spec.serviceAccount.annotations (template_metadata).
SERVICE_ACCOUNT_ANNOTATION = "berth.dev/service-account-annotations"
# Berth's hostname spread: always present, so scaling never changes the template.
HOSTNAME_KEY = storage.HOSTNAME_KEY


def container_security_context() -> dict[str, Any]:
    """Meets the restricted Pod Security Standard on its own, whatever the pod level says."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context(reg: Registry) -> dict[str, Any]:
    context: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        # Makes the PVC writable and the Secret files (SECRET_MODE) readable by RUN_AS.
        "fsGroup": RUN_AS,
        # Skip the recursive chown of a large registry volume when its root already has the right group.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if reg.spec.http.port < FIRST_UNPRIVILEGED_PORT:
        context["sysctls"] = [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]
    return context


def secret_sources(reg: Registry, facts: ClusterFacts) -> dict[str, str]:
    """Volume name -> Secret name, for every Secret the spec needs (mount contract)."""
    spec = reg.spec
    sources: dict[str, str] = {}
    cosi = storage.cosi_secret(reg, facts)
    if cosi is not None:
        sources[COSI_VOLUME] = cosi
    htpasswd = spec.config.auth_in_use.auth.htpasswd
    if htpasswd is not None:
        sources[HTPASSWD_VOLUME] = htpasswd.secret.name
    sources[HTTP_SECRET_VOLUME] = spec.http.secret.name if spec.http.secret is not None else http_secret.name(reg)
    if spec.redis is not None:
        sources[REDIS_VOLUME] = spec.redis.secret.name
    tls_secret = certificate.tls_secret_name(reg)
    if tls_secret is not None:
        sources[TLS_VOLUME] = tls_secret
    sources.update({volume: name for volume, (kind, name) in trust_sources(reg).items() if kind == "Secret"})
    proxy = spec.config.proxy
    if proxy is not None and proxy.credentials is not None:
        sources[PROXY_VOLUME] = proxy.credentials.secret_name
    notifications = spec.config.notifications
    if notifications is not None and notifications.secret_name is not None:
        sources[NOTIFICATIONS_VOLUME] = notifications.secret_name
    for volume, backend in ((AZURE_VOLUME, spec.config.storage.azure), (GCS_VOLUME, spec.config.storage.gcs)):
        if backend is not None and backend.credentials.secret is not None:
            sources[volume] = backend.credentials.secret.name
    s3 = spec.config.storage.s3
    if s3 is not None and s3.credentials is not None:
        sources[S3_VOLUME] = s3.credentials.secret_name
    return sources


def trust_sources(reg: Registry) -> dict[str, tuple[str, str]]:
    """Volume name -> (Secret or ConfigMap, its name): token auth's root certificate bundle and JWKS, the S3
    endpoint's CA."""
    token = reg.spec.config.auth_in_use.auth.token
    s3 = reg.spec.config.storage.s3
    refs = ((TOKEN_BUNDLE_VOLUME, token.root_cert_bundle if token else None),
            (TOKEN_JWKS_VOLUME, token.jwks if token else None), (S3_CA_VOLUME, s3.ca if s3 else None))
    return {volume: (ref.kind, ref.ref.name) for volume, ref in refs if ref is not None}


def config_map_sources(reg: Registry) -> dict[str, str]:
    """Volume name -> ConfigMap name, for every ConfigMap the spec needs (trust bundles often are ConfigMaps)."""
    return {volume: name for volume, (kind, name) in trust_sources(reg).items() if kind == "ConfigMap"}


def volumes(reg: Registry, facts: ClusterFacts) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = [
        {"name": CONFIG_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}},
        {"name": REGISTRY_BIN_VOLUME, "emptyDir": {"sizeLimit": REGISTRY_BIN_SIZE}},
        {
            "name": TOKEN_VOLUME,
            "projected": {
                "defaultMode": 0o444,
                "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_EXPIRATION_SECONDS}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ],
            },
        },
    ]
    # Whole Secrets: no items, and the mounts below use no subPath, so the kubelet keeps them current.
    for volume, secret in secret_sources(reg, facts).items():
        result.append({"name": volume, "secret": {"secretName": secret, "defaultMode": SECRET_MODE}})
    for volume, config_map in config_map_sources(reg).items():  # swapped by the kubelet like a Secret
        result.append({"name": volume, "configMap": {"name": config_map, "defaultMode": SECRET_MODE}})
    claim = pvc.claim_name(reg)
    if claim is not None:
        result.append({"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
    return result


def agent_container(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    mounts = [
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR},
        {"name": TMP_VOLUME, "mountPath": TMP_DIR},
        {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
    ]
    for volume in [*secret_sources(reg, facts), *config_map_sources(reg)]:
        mounts.append({"name": volume, "mountPath": f"{MOUNT_ROOT}/{volume}", "readOnly": True})
    if pvc.claim_name(reg) is not None:
        mounts.append({"name": DATA_VOLUME, "mountPath": DATA_DIR})

    def probe(path: str, **timing: int) -> dict[str, Any]:
        return {"httpGet": {"path": path, "port": "agent-health"}, "timeoutSeconds": 2, **timing}

    return {
        "name": "agent",
        "image": facts.agent_image,
        # A native sidecar: starts before the registry container, whose start waits for the startupProbe,
        # i.e. for the first rendered config (docs/upstream.md#k8s-native-sidecars).
        "restartPolicy": "Always",
        "command": ["berth-agent"],
        "args": [
            "run",
            "--registry", f"{namespace(reg)}/{registry_name(reg)}",
            "--mounts", MOUNT_ROOT,
            "--config-dir", CONFIG_DIR,
            "--data-dir", DATA_DIR,
            "--health-addr", f"0.0.0.0:{AGENT_HEALTH_PORT}",
            "--leave-seconds", str(LEAVE_SECONDS),
            "--state-dir", STATE_DIR,
            "--registry-metrics-addr", f"0.0.0.0:{REGISTRY_METRICS_PORT}",
            # The same Secrets as the volumes (so no other edit reaches the template through here), watched
            # over the API as well: a rotation applies without the kubelet's 60-90 s
            # (docs/upstream.md#k8s-secret-refresh).
            *(arg for volume, secret in secret_sources(reg, facts).items()
              for arg in ("--api-secret", f"{volume}={secret}")),
            *(arg for volume, config_map in config_map_sources(reg).items()
              for arg in ("--api-configmap", f"{volume}={config_map}")),
        ],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                # Docstrings and asserts dropped: 2.9 MiB less in every pod; the image ships the .opt-2.pyc it
                # reads (Containerfile; docs/benchmarks.md, the agent's memory).
                {"name": "PYTHONOPTIMIZE", "value": "2"},
                *preflight_env(reg)],
        "ports": [
            {"name": AGENT_METRICS_PORT_NAME, "containerPort": AGENT_HEALTH_PORT, "protocol": "TCP"},
            {"name": REGISTRY_METRICS_PORT_NAME, "containerPort": REGISTRY_METRICS_PORT, "protocol": "TCP"},
        ],
        # Generous: the first render may wait for a Secret or the API server.
        "startupProbe": probe("/startupz", periodSeconds=2, failureThreshold=150),
        # The pod leaves its Service through this probe before its registry restarts (a native sidecar's
        # readiness counts for the pod's Ready condition): the agent waits LEAVE_SECONDS after turning /readyz
        # false, which covers two periods and the endpoints following
        # (docs/decisions/0016-probes-tell-the-truth.md). Two failures, not
        # one: on the real node under load a single 503 (one registry-watch look that found no registry
        # answering) took the only replica out of its Service for a second, 140 connections refused.
        "readinessProbe": probe("/readyz", periodSeconds=1, failureThreshold=2, timeoutSeconds=1),
        "livenessProbe": probe("/livez", periodSeconds=10, failureThreshold=6),
        "resources": agent_resources(reg),
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }


def agent_resources(reg: Registry) -> dict[str, Any]:
    wanted = reg.spec.pod.agent_resources
    return wanted.kube() if wanted is not None else {key: dict(value) for key, value in AGENT_RESOURCES.items()}


def user_env(reg: Registry) -> list[dict[str, Any]]:
    """spec.env as the registry container's env (values, Secret and ConfigMap key references)."""
    return [kube_dump(var) for var in reg.spec.env]


def preflight_env(reg: Registry) -> list[dict[str, Any]]:
    """The egress proxy variables of spec.env, renamed BERTH_PREFLIGHT_<name> for the agent (its pre-flights read
    them, agent/berth_agent/apply/preflight_http.py); the same values or references as the registry's."""
    return [{**kube_dump(var), "name": PREFLIGHT_ENV_PREFIX + var.name}
            for var in reg.spec.env if var.name in PROXY_ENV]


def s3_ca_env(reg: Registry) -> list[dict[str, Any]]:
    """storage.s3.ca: Go's SSL_CERT_DIR, the agent's copy of the CA before the system's directories (additive, so
    public endpoints keep working; docs/decisions/0035-s3-credentials-and-ca.md). Whether a CA is given shapes the
    template; the CA itself is applied hot (the agent writes it and restarts the registry)."""
    s3 = reg.spec.config.storage.s3
    if s3 is None or s3.ca is None:
        return []
    return [{"name": "SSL_CERT_DIR", "value": ":".join((S3_CA_DIR, *SYSTEM_CERT_DIRS))}]


def debug_ports(reg: Registry) -> list[int]:
    """The two loopback debug ports berth-supervise gives its registries, never the registry's own port."""
    return [port for port in DEBUG_PORTS if port != reg.spec.http.port][:2]


def registry_binary_container(reg: Registry) -> dict[str, Any]:
    """Copies the registry binary out of spec.image for berth-supervise. After the agent sidecar (whose startup
    waits for the first config), so the agent runs, and reports, even when spec.image has no binary there: then
    this container fails with cp's own words as its termination message."""
    return {
        "name": "registry-binary",
        "image": reg.spec.image,
        "command": ["cp", IMAGE_REGISTRY_BIN, REGISTRY_BIN],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": REGISTRY_BIN_VOLUME, "mountPath": REGISTRY_BIN_DIR}],
    }


def registry_container(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    port_name = ports.port_name(reg)
    mounts = [
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": TMP_VOLUME, "mountPath": TMP_DIR},
        {"name": REGISTRY_BIN_VOLUME, "mountPath": REGISTRY_BIN_DIR, "readOnly": True},
    ]
    if pvc.claim_name(reg) is not None:
        mounts.append({"name": DATA_VOLUME, "mountPath": DATA_DIR})
    resources = reg.spec.resources.kube()
    return {
        "name": "registry",
        "image": facts.agent_image,
        "command": ["berth-supervise"],
        "env": [
            {"name": "BERTH_CONFIG", "value": f"{CONFIG_DIR}/{CONFIG_NAME}"},
            {"name": "BERTH_REGISTRY_BIN", "value": REGISTRY_BIN},
            # Distribution 3 serves on a socket it is handed (docs/upstream.md#dist-socket-activation): berth-supervise
            # holds this one for the container's life, so no reload leaves the port without a listener. It asks the
            # binary its version (spec.distribution is hot, so the template cannot say): 2.8 binds its own, overlapped.
            {"name": "BERTH_LISTEN_ADDR", "value": f":{reg.spec.http.port}"},
            # The supervisor's pid, last exit and the registry's output, for the agent (the config volume is
            # read-only here; both containers mount the pod's tmp volume).
            {"name": "BERTH_STATE_DIR", "value": STATE_DIR},
            # Metrics on by default, through REGISTRY_HTTP_DEBUG_* overrides per process (config.yml is unchanged).
            {"name": "BERTH_DEBUG_PORTS", "value": " ".join(str(port) for port in debug_ports(reg))},
            # Distribution 3 otherwise exports traces to localhost:4318 (docs/upstream.md#dist-otel).
            {"name": "OTEL_TRACES_EXPORTER", "value": "none"},
            *s3_ca_env(reg),
            # The user's (an egress proxy...): never REGISTRY_*, BERTH_* or the above (refused at admission).
            *user_env(reg),
        ],
        "ports": [{"name": port_name, "containerPort": reg.spec.http.port, "protocol": "TCP"}],
        # GET / answers 200 without auth, 503 while a configured health check fails (docs/upstream.md#dist-health):
        # such a replica leaves the Service.
        "readinessProbe": {
            "httpGet": {"path": "/", "port": port_name, "scheme": port_name.upper()},
            "periodSeconds": 5,
            "timeoutSeconds": 2,
            "failureThreshold": 2,
        },
        # TCP, not GET /: a failing storage health check (or the agent's health file before a restart) must
        # take the replica out of rotation, not get the container killed and restarted with back-off.
        "livenessProbe": {
            "tcpSocket": {"port": port_name},
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 6,
        },
        # A deleted pod leaves its Service's endpoints at once (terminating endpoints are not ready), but kube-proxy
        # and ingress controllers apply that a moment later: the registry keeps accepting meanwhile, then drains.
        # The kubelet runs the sleep itself (no binary in the image); TERMINATION_GRACE_PERIOD_SECONDS covers it.
        "lifecycle": {"preStop": {"sleep": {"seconds": LEAVE_SECONDS}}},
        "resources": resources,
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }


def topology_spread(reg: Registry) -> list[dict[str, Any]]:
    """Berth's hostname spread (ScheduleAnyway), then the user's constraints. A user's constraint on the hostname
    replaces Berth's (the API server refuses two with the same topologyKey and whenUnsatisfiable, and the user's
    says what they want); one without labelSelector counts this Registry's pods (without it, it would count none)."""
    selector = {"matchLabels": selector_labels(reg)}
    users = [{"labelSelector": selector, **kube_dump(constraint)}
             for constraint in reg.spec.pod.topology_spread_constraints]
    berths = [{"maxSkew": 1, "topologyKey": HOSTNAME_KEY, "whenUnsatisfiable": "ScheduleAnyway",
               "labelSelector": selector}]
    if any(constraint["topologyKey"] == HOSTNAME_KEY for constraint in users):
        berths = []
    return [*berths, *users]


def affinity(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    """The user's affinity, and on a ReadWriteOnce claim Berth's required pod affinity to the Registry's own pods
    on one node: a roll's new pod goes where the running pod has the volume attached (ReadWriteOnce is per node).
    The scheduler lets the first pod of a series that matches its own term go anywhere (interpodaffinity
    filtering.go, satisfyPodAffinity), so a first start, or one after every pod is gone, is not held."""
    merged = kube_dump(reg.spec.pod.affinity) if reg.spec.pod.affinity is not None else {}
    if storage.surges_on_one_node(reg, facts):
        pod_affinity = merged.setdefault("podAffinity", {})
        terms = pod_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
        terms.append({"labelSelector": {"matchLabels": selector_labels(reg)}, "topologyKey": HOSTNAME_KEY})
    return merged or None


def placement(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    """spec.pod's scheduling and image pull fields, as pod spec fields; unset ones left out."""
    pod = reg.spec.pod
    fields: dict[str, Any] = {
        "nodeSelector": dict(pod.node_selector) or None,
        "tolerations": [kube_dump(t) for t in pod.tolerations] or None,
        "affinity": affinity(reg, facts),
        "priorityClassName": pod.priority_class_name,
        # Pod level: the kubelet uses them for every image of the pod (spec.image and the Berth image).
        "imagePullSecrets": [kube_dump(ref) for ref in pod.image_pull_secrets] or None,
    }
    return {key: value for key, value in fields.items() if value is not None}


def template_metadata(reg: Registry) -> dict[str, Any]:
    """The user's pod labels and annotations under Berth's labels (a collision is refused at admission, and
    Berth's would win), and the digest of the ServiceAccount's annotations: the EKS and AKS webhooks inject the
    identity into a pod when it is created, so a pod made before an edit of them would keep the old identity."""
    pod = reg.spec.pod
    metadata: dict[str, Any] = {"labels": {**pod.labels, **labels(reg, REGISTRY_COMPONENT)}}
    annotations = dict(pod.annotations)
    identity = reg.spec.service_account.annotations
    if identity:
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
        annotations[SERVICE_ACCOUNT_ANNOTATION] = digest
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def pod_template(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    return {
        "metadata": template_metadata(reg),
        "spec": {
            "serviceAccountName": service_account.name(reg),
            # The token goes to the agent container only, through the agent-token volume.
            "automountServiceAccountToken": False,
            # The agent restarts the registry process in place (docs/upstream.md#k8s-share-process-namespace).
            "shareProcessNamespace": True,
            # Service link variables can collide with REGISTRY_* overrides (docs/upstream.md#dist-env-overrides).
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": TERMINATION_GRACE_PERIOD_SECONDS,
            "securityContext": pod_security_context(reg),
            # Always present (not only when replicas > 1), so scaling never changes the template.
            "topologySpreadConstraints": topology_spread(reg),
            **placement(reg, facts),
            "initContainers": [agent_container(reg, facts), registry_binary_container(reg)],
            "containers": [registry_container(reg, facts)],
            "volumes": volumes(reg, facts),
        },
    }
