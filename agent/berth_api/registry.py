"""The Registry custom resource: spec, status and the object itself."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from .auth import (
    AUTH_PATH,
    BOTH_PLACES_MESSAGE,
    STORAGE_AUTH_PATH,
    TOKEN_V3_FIELDS,
    AuthInUse,
    ConfigAuth,
    auth_in_use,
    token_v3_message,
)
from .cloud_storage import AZURE_PATH, GCS_PATH
from .exposure import Gateway, Ingress, Service
from .gc import GC_STORAGE_MESSAGE, GarbageCollection, GarbageCollectionStatus
from .monitoring import Monitoring
from .network_policy import NetworkPolicy
from .notifications import Notifications, notifications_v3_message
from .pod_template import EnvVar, PodOverrides, Resources, ServiceAccountSettings, env_names
from .proxy import GC_PROXY_MESSAGE, PROXY_V3_FIELDS, Proxy, proxy_v3_message
from .s3 import OBJECT_STORAGE_PATH, S3_PATH, v3_options_rules
from .server import Health, Http, Redis, Validation
from .storage import Storage
from .types import INT32_MAX, ApiModel, v3_only_message

GROUP = "berth.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Registry"
PLURAL = "registries"
SINGULAR = "registry"
SHORT_NAMES = ["reg"]
DEFAULT_IMAGE = "docker.io/library/registry:3"
# CEL: the spec runs Distribution 2 (the same answer as RegistrySpec.distribution_major): spec.distribution, else
# a tag whose major is 2 on the image's last path component (before any digest).
_RUNS_2 = ("(has(self.distribution) ? self.distribution == '2' : "
           "self.image.matches('^([^@]*/)?[^/@:]+:v?2([.-][^/@]*)?(@.*)?$'))")

ConditionType = Literal["Ready", "Progressing", "Degraded"]


class Log(ApiModel):
    level: Literal["error", "warn", "info", "debug"] = Field("info", description="Registry log level.")


# CEL: an Auth object at `path` (relative to self) names a provider.
def _names_provider(path: str) -> str:
    return f"(has({path}.htpasswd) || has({path}.token) || has({path}.silly))"


class Config(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": f"!(has(self.auth) && {_names_provider('self.auth')} && has(self.storage.auth) && "
                            f"{_names_provider('self.storage.auth')})",
                    "message": BOTH_PLACES_MESSAGE,
                },
            ]
        }
    }

    log: Log = Field(default_factory=Log, description="Registry logging.")
    storage: Storage = Field(description="Storage backend and storage options.")
    auth: ConfigAuth | None = Field(
        None, description="Authentication: exactly one of htpasswd, token and silly (as in Distribution's "
        "config.yml); leave it out for a registry without authentication. spec.config.storage.auth is the same "
        "field where the architecture document puts it: set one of the two.")
    proxy: Proxy | None = Field(
        None, description="Run as a pull-through cache of one upstream registry (pushes are refused). Pull "
        "with the upstream's repository names (library/alpine for Docker Hub's alpine), or point containerd "
        "and Docker at it as a mirror (docs/guide/pull-through-cache.md).")
    notifications: Notifications | None = Field(
        None, description="Webhook notifications of pushes, pulls and deletes (Distribution's notifications). "
        "On Distribution 3 a reload waits, bounded, for the old process's queues; on 2.8 events still queued at a "
        "reload are lost (docs/guide/monitoring.md, Notifications).")

    @model_validator(mode="after")
    def _auth_in_one_place(self) -> Config:
        if self.auth is not None and self.auth.provider is not None and self.storage.auth.provider is not None:
            raise ValueError(BOTH_PLACES_MESSAGE)
        return self

    @property
    def auth_in_use(self) -> AuthInUse:
        """The auth this config uses and the path it is written at: every reader goes through this."""
        return auth_in_use(self.auth, self.storage.auth)


class Rollout(ApiModel):
    progress_deadline_seconds: int = Field(
        600, alias="progressDeadlineSeconds", ge=30, le=INT32_MAX,
        description="The Deployment's progressDeadlineSeconds: how long a roll's new pod may take to serve before "
        "the roll counts as stalled.")
    recreate_after_deadline: bool = Field(
        False, alias="recreateAfterDeadline",
        description="On a ReadWriteOnce claim a roll starts the new pod beside the running one, on its node. When "
        "it cannot start there (the node is full), the old pod keeps serving and the Registry says why; the roll "
        "waits (false, the default: nothing that serves is stopped for a pod that may never fit), or, true, once "
        "past progressDeadlineSeconds it stops the old pod first (Recreate: the registry is down until the new "
        "pod serves, said by Degraded and an Event), and the next roll surges again.")


class RegistrySpec(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.config.storage.cache) || self.config.storage.cache.blobdescriptor != 'redis'"
                    " || has(self.redis)",
                    "message": "config.storage.cache.blobdescriptor redis needs spec.redis",
                },
                {
                    "rule": "!has(self.garbageCollection) || !has(self.config.storage.inmemory)",
                    "message": GC_STORAGE_MESSAGE,
                },
                *({
                    "rule": f"!has({where}) || !has({where}.token) || !has({where}.token.{field}) || !{_RUNS_2}",
                    "message": token_v3_message(field, path),
                } for path in (AUTH_PATH, STORAGE_AUTH_PATH) for field in TOKEN_V3_FIELDS
                  for where in ["self." + path.removeprefix("spec.")]),
                {
                    "rule": "!has(self.garbageCollection) || !has(self.config.proxy)",
                    "message": GC_PROXY_MESSAGE,
                },
                *({
                    "rule": f"!has(self.config.proxy) || !has(self.config.proxy.{field}) || !{_RUNS_2}",
                    "message": proxy_v3_message(field),
                } for field in PROXY_V3_FIELDS),
                {
                    "rule": "!has(self.config.notifications) || "
                            f"self.config.notifications.endpoints.all(e, !has(e.ignore)) || !{_RUNS_2}",
                    "message": notifications_v3_message("endpoints[].ignore"),
                },
                *({
                    "rule": f"!has(self.config.storage.{path.rsplit('.', 1)[1]}) || !{_RUNS_2}",
                    "message": v3_only_message(path.removeprefix("spec.")),
                } for path in (AZURE_PATH, GCS_PATH)),
                *({
                    "rule": f"!({condition}) || !{_RUNS_2}",
                    "message": v3_only_message(f"{path.removeprefix('spec.')}.{field}"),
                } for path in (OBJECT_STORAGE_PATH, S3_PATH) for condition, field in v3_options_rules(path)),
                {
                    "rule": f"!has(self.config.notifications) || !has(self.config.notifications.events) || !{_RUNS_2}",
                    "message": notifications_v3_message("events.includeReferences"),
                },
            ]
        }
    }

    # max_length: bounds the cost of the CEL rule that reads the tag (an image reference is at most ~600 bytes).
    image: str = Field(DEFAULT_IMAGE, min_length=1, max_length=1024, description="Registry container image.")
    replicas: int = Field(1, ge=0, le=INT32_MAX, description="Number of registry pods.")
    distribution: Literal["2", "3"] | None = Field(
        None, description="Major version of Distribution in the image; derived from the image tag when absent."
    )
    resources: Resources = Field(default_factory=Resources, description="Resources of the registry container.")
    env: list[EnvVar] = Field(
        default_factory=list, max_length=64,
        description="Environment of the registry container: values, or keys of Secrets and ConfigMaps (e.g. "
        "HTTP_PROXY, HTTPS_PROXY and NO_PROXY for an egress proxy; the agent's pre-flights use the same proxy). "
        "REGISTRY_*, BERTH_* and OTEL_TRACES_EXPORTER are refused. An edit rolls the pods.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    pod: PodOverrides = Field(
        default_factory=PodOverrides, description="The registry pod: placement (nodeSelector, tolerations, "
        "affinity, topologySpreadConstraints, priorityClassName), labels, annotations, imagePullSecrets and the "
        "agent's resources. An edit rolls the pods.")
    rollout: Rollout = Field(
        default_factory=lambda: Rollout(), description="How a change of the pod template replaces the pods "
        "(docs/decisions/0030-rolls-on-read-write-once.md). Changes only the Deployment's rollout settings, never "
        "the pods.")
    service_account: ServiceAccountSettings = Field(
        default_factory=ServiceAccountSettings, alias="serviceAccount",
        description="The registry pods' ServiceAccount (<registry>-agent): annotations for workload identity.")
    config: Config = Field(description="Registry configuration applied by the agent without restarting pods.")
    http: Http = Field(default_factory=Http, description="HTTP server options.")
    redis: Redis | None = Field(None, description="Redis connection, for the blob descriptor cache.")
    service: Service = Field(
        default_factory=Service, description="The registry's Service: its type (ClusterIP, NodePort, "
        "LoadBalancer), node port, annotations and labels. Changes only the Service.")
    ingress: Ingress | None = Field(
        None, description="An Ingress (networking.k8s.io/v1) for the registry, with TLS from a Secret or cert-manager.")
    gateway: Gateway | None = Field(
        None, description="A Gateway API HTTPRoute (gateway.networking.k8s.io/v1) for the registry. Needs the "
        "Gateway API CRDs: without them the Registry is Degraded with reason MissingGatewayAPI.")
    network_policy: NetworkPolicy | None = Field(
        None, alias="networkPolicy",
        description="A NetworkPolicy (networking.k8s.io/v1) admitting the registry's port only from these peers "
        "and the metrics ports only from metricsFrom. Absent: none (every source reaches the pods). Ingress only: "
        "egress (storage, notifications, the proxy's upstream) is not restricted; needs a CNI that enforces it.")
    health: Health = Field(default_factory=Health, description="Registry health checks.")
    validation: Validation = Field(default_factory=Validation, description="Manifest validation.")
    monitoring: Monitoring = Field(
        default_factory=Monitoring, description="Prometheus Operator objects for this Registry (made by the operator "
        "only when asked and when the monitoring.coreos.com CRDs exist).")
    garbage_collection: GarbageCollection | None = Field(
        None,
        alias="garbageCollection",
        description="Scheduled garbage collection of the storage, run inside the pods with every replica "
        "read-only meanwhile. Absent: runs only when the berth.dev/gc-requested-at annotation asks, with the "
        "defaults.",
    )

    @field_validator("env")
    @classmethod
    def _env_names_unique(cls, env: list[EnvVar]) -> list[EnvVar]:
        return env_names(env)

    @model_validator(mode="after")
    def _redis_cache_needs_redis(self) -> RegistrySpec:
        cache = self.config.storage.cache
        if cache is not None and cache.blobdescriptor == "redis" and self.redis is None:
            raise ValueError("config.storage.cache.blobdescriptor redis needs spec.redis")
        return self

    @model_validator(mode="after")
    def _gc_needs_persistent_storage(self) -> RegistrySpec:
        if self.garbage_collection is not None and self.config.storage.inmemory is not None:
            raise ValueError(GC_STORAGE_MESSAGE)
        return self

    @model_validator(mode="after")
    def _gc_not_on_a_proxy(self) -> RegistrySpec:
        if self.garbage_collection is not None and self.config.proxy is not None:
            raise ValueError(GC_PROXY_MESSAGE)
        return self

    @model_validator(mode="after")
    def _v3_fields_need_distribution_3(self) -> RegistrySpec:
        if self.distribution_major == "2":
            for message in self._v3_field_messages():
                raise ValueError(message)
        return self

    def _v3_field_messages(self) -> Iterator[str]:
        """A refusal for each Distribution-3-only field the spec sets (the CEL rules above say the same)."""
        storage = self.config.storage
        # Debian's 2.8.2 has neither driver, so neither can be tested on 2: refused there.
        for path, backend in ((AZURE_PATH, storage.azure), (GCS_PATH, storage.gcs)):
            if backend is not None:
                yield v3_only_message(path.removeprefix("spec."))
        for path, s3 in ((OBJECT_STORAGE_PATH, storage.object_storage), (S3_PATH, storage.s3)):
            if s3 is not None:
                yield from (v3_only_message(f"{path.removeprefix('spec.')}.{field}") for field in s3.v3_fields_set())
        if self.config.proxy is not None:
            yield from (proxy_v3_message(field) for field in self.config.proxy.v3_fields_set())
        if self.config.notifications is not None:
            yield from (notifications_v3_message(field) for field in self.config.notifications.v3_fields_set())
        path, auth = self.config.auth_in_use
        if auth.token is not None:
            yield from (token_v3_message(field, path) for field in auth.token.v3_fields_set())

    @property
    def distribution_major(self) -> Literal["2", "3"]:
        """The explicit distribution, else the major version in the image tag, else 3."""
        if self.distribution is not None:
            return self.distribution
        return distribution_from_image(self.image)


def distribution_from_image(image: str) -> Literal["2", "3"]:
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    match = re.match(r"^v?([0-9]+)(\.|-|$)", tag)
    if match and match.group(1) == "2":
        return "2"
    return "3"


class Condition(ApiModel):
    type: ConditionType = Field(description="Ready, Progressing or Degraded.")
    status: Literal["True", "False", "Unknown"] = Field(description="Whether the condition holds.")
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", description="CamelCase reason.")
    message: str = Field("", max_length=32768, description="Human-readable detail.")
    last_transition_time: str = Field(alias="lastTransitionTime", description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        None, alias="observedGeneration", ge=0, description="metadata.generation the condition was set for."
    )


class DataPathRecord(ApiModel):
    """The registry's data path (the PVC, filesystem storage only) as the pod's agent last saw it."""

    mounted: bool = Field(description="Whether the data path is a mount point (false outside Kubernetes).")
    capacity_bytes: int | None = Field(None, alias="capacityBytes", ge=0, description="Size of the volume in bytes.")
    free_bytes: int | None = Field(
        None, alias="freeBytes", ge=0, description="Bytes the registry can still write (what non-root may use)."
    )
    checked_at: str = Field(alias="checkedAt", description="When the agent looked (RFC 3339).")


class TrustRecord(ApiModel):
    """sha256 (hex) of the token auth trust files a registry runs."""

    root_cert_bundle: str | None = Field(None, alias="rootCertBundle", description="Of the root certificate bundle.")
    jwks: str | None = Field(None, description="Of the JWKS.")


class UpstreamAuthFailure(ApiModel):
    """The last time the upstream refused the credentials (or an anonymous token): its answer, never a secret."""

    status: int = Field(ge=0, le=999, description="The upstream's HTTP status (401, 403...).")
    reason: str = Field(max_length=256, description="The upstream's short reason (its error code and message).")
    at: str = Field(description="When the agent saw it (RFC 3339).")


class UpstreamRecord(ApiModel):
    """A pull-through cache's upstream as this pod's agent last checked it (before each restart of the registry,
    and every few minutes)."""

    url: str = Field(description="spec.config.proxy.remoteURL as checked.")
    reachable: bool = Field(description="Whether the upstream's /v2/ answered (the registry cannot start while it "
                            "does not; a running one keeps serving what it has cached).")
    auth: Literal["none", "basic", "bearer"] | None = Field(
        None, description="What the upstream asks for on /v2/: none (anonymous), basic or bearer (a token realm).")
    checked_at: str = Field(alias="checkedAt", description="When the agent checked (RFC 3339).")
    last_auth_failure: UpstreamAuthFailure | None = Field(
        None, alias="lastAuthFailure",
        description="The last refusal of the credentials by the upstream; kept after a later success, with its "
        "time.")


class NotificationEndpointRecord(ApiModel):
    """One notification endpoint as this pod's outbox last saw it: counts since the agent started."""

    pending: int = Field(ge=0, description="Events the outbox holds for the endpoint.")
    delivered: int = Field(ge=0, description="Events delivered since the agent started.")
    dropped: int = Field(ge=0, description="Events dropped since the agent started: the outbox's size bound, or "
                         "still held when the pod stopped.")
    failing_since: str | None = Field(
        None, alias="failingSince", description="When the first of the failures in a row began (RFC 3339); absent "
        "while the endpoint takes events.")
    checked_at: str = Field(alias="checkedAt", description="When the outbox counted (RFC 3339).")


class AgentRecord(ApiModel):
    """What one pod's agent last applied, written by that agent."""

    config_hash: str = Field(
        "", alias="configHash", description="Identity of the config the registry now runs: sha256 over config.yml "
        "and every file the agent writes beside it for the registry (TLS pair, token trust bundle and JWKS, htpasswd), "
        "each by name and sha256; the sha256 of config.yml alone when there is no such file. A TLS or trust rotation "
        "changes it; it shows no secret.")
    applied_at: str | None = Field(None, alias="appliedAt", description="When that config was applied (RFC 3339).")
    observed_generation: int | None = Field(
        None, alias="observedGeneration", description="metadata.generation the agent rendered from."
    )
    error: str | None = Field(None, description="Why the latest input was not applied; empty when it was.")
    trust: TrustRecord | None = Field(
        None, description="With token auth: sha256 (hex) of each trust file the registry now runs, by field "
        "(the sha256sum of the ConfigMap or Secret key). During a key rotation, wait until every pod shows the "
        "new bundle's.")
    upstream: UpstreamRecord | None = Field(
        None, description="With spec.config.proxy: the upstream's reachability and the last refusal of the "
        "credentials.")
    notifications: dict[str, NotificationEndpointRecord] | None = Field(
        None, description="With spec.config.notifications: each endpoint as this pod's outbox last counted it, by "
        "name; written when an endpoint starts or stops failing, drops events, or empties, once its counts have "
        "been still for a second, and at most every 30 s while they keep moving.")
    waiting: str | None = Field(
        None, description="Set while this pod waits for its turn to restart its registry (another pod holds the "
        "Registry's reload Lease); removed when its turn comes."
    )
    data_path: DataPathRecord | None = Field(
        None,
        alias="dataPath",
        description="The data path's capacity and free space (filesystem storage); refreshed when it moves by 1% "
        "of capacity, or every 10 minutes.",
    )
    read_only_for: str | None = Field(
        None,
        alias="readOnlyFor",
        description="Id of the garbage-collection request this pod's registry now serves read-only for "
        "(status.garbageCollection.request.id); the runner starts only when every pod says so.",
    )


class RegistryStatus(ApiModel):
    observed_generation: int | None = Field(
        None, alias="observedGeneration", description="metadata.generation last reconciled by the operator."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing and Degraded.",
        # One entry per type, merged by type under server-side apply (the Kubernetes convention for conditions).
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replicas: int | None = Field(None, ge=0, description="Registry pods that exist.")
    ready_replicas: int | None = Field(None, alias="readyReplicas", ge=0, description="Registry pods that are ready.")
    selector: str | None = Field(None, description="Label selector of the registry pods (for the scale subresource).")
    url: str | None = Field(None, description="In-cluster URL of the registry.")
    external_address: str | None = Field(
        None, alias="externalAddress",
        description="Where the registry is reached from outside the cluster, as seen by the operator: the "
        "Ingress's or HTTPRoute's first host (https:// or http://), the LoadBalancer's address and port, or "
        "NODE:<nodePort> (any node's address). Absent: only in the cluster.")
    storage: Literal["filesystem", "objectStorage", "s3", "azure", "gcs", "inmemory"] | None = Field(
        None,
        # A printer column is a JSONPath, which cannot print which key of spec.config.storage is set.
        description="Storage backend in use (the key set in spec.config.storage), shown by kubectl get; written "
        "by the operator.",
    )
    agents: dict[str, AgentRecord] = Field(
        default_factory=dict, description="Per pod, the config its agent has applied, keyed by pod name."
    )
    garbage_collection: GarbageCollectionStatus | None = Field(
        None,
        alias="garbageCollection",
        description="Garbage collection: next scheduled run, the run requested or in progress, the last outcome.",
    )

    @field_validator("conditions")
    @classmethod
    def _one_condition_per_type(cls, conditions: list[Condition]) -> list[Condition]:
        # The CRD's list-map keyed by type makes the API server refuse duplicates; so does the model.
        types = [condition.type for condition in conditions]
        if len(types) != len(set(types)):
            raise ValueError("one entry per condition type")
        return conditions


class Registry(ApiModel):
    """A CNCF Distribution registry managed by Berth."""

    api_version: Literal["berth.dev/v1alpha1"] = Field(
        API_VERSION, alias="apiVersion", description="Versioned schema of this object: berth.dev/v1alpha1."
    )
    kind: Literal["Registry"] = Field(KIND, description="Kind of this object: Registry.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: RegistrySpec = Field(description="The registry wanted: image, replicas and configuration.")
    status: RegistryStatus | None = Field(
        None, description="The registry observed, written by the operator and by each pod's agent."
    )


def type_meta_problem(document: dict[str, Any]) -> str | None:
    """What is wrong with a manifest's apiVersion and kind, or None. The API server routes by them, so a file
    that names another group, version or kind is not a Registry at all (the value is not echoed)."""
    problems = []
    for field, wanted in (("apiVersion", API_VERSION), ("kind", KIND)):
        if field not in document:
            problems.append(f"{field}: is missing (expected {wanted})")
        elif document[field] != wanted:
            problems.append(f"{field}: must be {wanted}")
    return "; ".join(problems) or None


def describe_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line per problem, each naming the field by its API path (e.g. spec.config.storage.filesystem)."""
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        path = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
        message = err["msg"].removeprefix("Value error, ")
        lines.append(f"{path or '(root)'}: {message}")
    return "; ".join(lines)
