"""What the operator looks up in the cluster before and after building: ClusterFacts for the builders, and
findings (Missing*/Waiting*) for the conditions. The managed kinds' own checks are their behaviours' (checks,
beside each kind's builder; builders/kinds.py gathers them): this module runs them and names no managed kind.

Referenced Secrets are checked for existence and for the key the spec names; their values are never
read into anything that is logged or reported (only key names are compared).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from berth_api import Registry
from berth_api.pod import PROXY_PASSWORD_KEY, PROXY_USERNAME_KEY

from ..builders import deployment, meta, storage
from ..builders.behaviour import Behaviour
from ..builders.checks import Problem
from ..builders.context import ClusterFacts
from ..builders.kinds import MISSING_CHECKED, NEEDED_BY, WAITING_CHECKED
from ..cluster.discovery import describe
from ..cluster.view import Cluster
from ..core.kinds import KINDS, TABLE, crd_name
from ..kube.client import Kube, KubeError
from .status import DEGRADED_REASONS, Finding

AGENT_IMAGE_ENV = "BERTH_AGENT_IMAGE"


@dataclass
class Lookup:
    facts: ClusterFacts
    findings: list[Finding] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)  # status.Observation.unchecked


def unserved(cluster: Cluster) -> frozenset[tuple[str, str]]:
    """The optional kinds (core/kinds.py) the cluster does not serve: the one place a reconcile asks, once.
    What is built, pruned, looked up and reported missing follows the answer (ClusterFacts.unserved)."""
    return frozenset(kind.key for kind in TABLE if kind.optional is not None and not cluster.serves(*kind.key))


def own_image(kube: Kube | Cluster) -> str | None:
    """The image of this operator's own container, found through the downward API (POD_NAME, POD_NAMESPACE)."""
    pod_name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not pod_name or not namespace:
        return None
    pod = kube.get("v1", "Pod", namespace, pod_name) or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    wanted = os.environ.get("BERTH_OPERATOR_CONTAINER", "operator")
    for container in containers:
        if container.get("name") == wanted:
            return container.get("image")
    return containers[0].get("image") if containers else None


def agent_image(kube: Kube | Cluster) -> str:
    image = os.environ.get(AGENT_IMAGE_ENV) or own_image(kube)
    if not image:
        raise RuntimeError(
            f"cannot tell the agent image: set {AGENT_IMAGE_ENV}, or POD_NAME and POD_NAMESPACE (downward API)"
        )
    return image


def _secret_refs(reg: Registry) -> list[tuple[str, str, tuple[str, ...]]]:
    """(Secret name, API path of the reference, keys it must hold) for every Secret the spec names."""
    spec = reg.spec
    refs = []
    auth_path, auth = spec.config.auth_in_use
    htpasswd = auth.htpasswd
    if htpasswd is not None:
        refs.append((htpasswd.secret.name, f"{auth_path}.htpasswd.secret", (htpasswd.secret.field,)))
    if spec.http.secret is not None:
        refs.append((spec.http.secret.name, "spec.http.secret", (spec.http.secret.field,)))
    if spec.redis is not None:
        refs.append((spec.redis.secret.name, "spec.redis.secret", (spec.redis.secret.field,)))
    if spec.http.tls is not None and spec.http.tls.secret_name is not None:  # an issuer's: waiting() checks it
        refs.append((spec.http.tls.secret_name, "spec.http.tls.secretName", ("tls.crt", "tls.key")))
    token = auth.token
    for name, ref in (("rootCertBundle", token.root_cert_bundle if token else None),
                       ("jwks", token.jwks if token else None)):
        if ref is not None and ref.secret is not None:
            refs.append((ref.secret.name, f"{auth_path}.token.{name}.secret", (ref.secret.field,)))
    proxy = spec.config.proxy
    if proxy is not None and proxy.credentials is not None:
        refs.append((proxy.credentials.secret_name, "spec.config.proxy.credentials.secretName",
                     (PROXY_USERNAME_KEY, PROXY_PASSWORD_KEY)))
    notifications = spec.config.notifications
    if notifications is not None and notifications.secret_name is not None:
        refs.append((notifications.secret_name, "spec.config.notifications.secretName",
                     tuple(notifications.secret_keys())))
    for backend, cloud in (("azure", spec.config.storage.azure), ("gcs", spec.config.storage.gcs)):
        if cloud is not None and cloud.credentials.secret is not None:
            ref = cloud.credentials.secret
            refs.append((ref.name, f"spec.config.storage.{backend}.credentials.secret", (ref.field,)))
    s3 = spec.config.storage.s3
    if s3 is not None and s3.credentials is not None:
        refs.append((s3.credentials.secret_name, "spec.config.storage.s3.credentials.secretName",
                     (s3.credentials.access_key_id_key, s3.credentials.secret_access_key_key)))
    if s3 is not None and s3.ca is not None and s3.ca.secret is not None:
        refs.append((s3.ca.secret.name, "spec.config.storage.s3.ca.secret", (s3.ca.secret.field,)))
    return refs


def _secret_findings(cluster: Cluster, namespace: str, name: str, where: str, keys: tuple[str, ...]) -> list[Finding]:
    secret = cluster.get("v1", "Secret", namespace, name)
    if secret is None:
        return [Finding("MissingSecret", f"Secret {name} ({where}) not found in namespace {namespace}")]
    present = set(secret.get("data") or {}) | set(secret.get("stringData") or {})
    missing = [key for key in keys if key not in present]
    if missing:
        return [Finding("MissingSecretKey", f"Secret {name} ({where}) has no key {', '.join(missing)}")]
    return []


def _config_map_refs(reg: Registry) -> list[tuple[str, str, str]]:
    """(ConfigMap name, API path of the reference, key it must hold) for every ConfigMap the spec names."""
    auth_path, auth = reg.spec.config.auth_in_use
    token = auth.token
    refs = []
    for name, ref in (("rootCertBundle", token.root_cert_bundle if token else None),
                      ("jwks", token.jwks if token else None)):
        if ref is not None and ref.config_map is not None:
            refs.append((ref.config_map.name, f"{auth_path}.token.{name}.configMap",
                         ref.config_map.field))
    s3 = reg.spec.config.storage.s3
    if s3 is not None and s3.ca is not None and s3.ca.config_map is not None:
        refs.append((s3.ca.config_map.name, "spec.config.storage.s3.ca.configMap", s3.ca.config_map.field))
    return refs


def _config_map_findings(cluster: Cluster, namespace: str, name: str, where: str, key: str) -> list[Finding]:
    """As for Secrets: the pod cannot start without the volume, so say which object and key is missing."""
    config_map = cluster.get("v1", "ConfigMap", namespace, name)
    if config_map is None:
        return [Finding("MissingConfigMap", f"ConfigMap {name} ({where}) not found in namespace {namespace}")]
    if key not in set(config_map.get("data") or {}) | set(config_map.get("binaryData") or {}):
        return [Finding("MissingConfigMapKey", f"ConfigMap {name} ({where}) has no key {key}")]
    return []


def needed_kinds(reg: Registry) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, the field that needs it) of every optional kind this spec uses (its behaviour's
    needed_by)."""
    return [(kind.api_version, kind.kind, where) for kind in NEEDED_BY for where in kind.needed_by(reg)]


def missing_apis(cluster: Cluster, reg: Registry) -> list[Finding]:
    """One finding per optional API this spec needs and the cluster does not serve, naming the kinds, their
    apiVersion, what to install and the fields that need them (its reason is the API's: kinds.OptionalApi)."""
    return _missing_apis(unserved(cluster), reg)


def _missing_apis(gone: frozenset[tuple[str, str]], reg: Registry) -> list[Finding]:
    by_api: dict = {}
    for api_version, kind, where in needed_kinds(reg):
        if (api_version, kind) in gone:
            api = KINDS[(api_version, kind)].optional
            kinds, fields = by_api.setdefault(api, ([], []))
            if (api_version, kind) not in kinds:
                kinds.append((api_version, kind))
            if where not in fields:
                fields.append(where)
    findings = []
    for api, (kinds, fields) in by_api.items():
        verb = "is" if len(kinds) == 1 else "are"
        crds = ", ".join(crd_name(*key) for key in kinds)
        findings.append(Finding(api.reason, f"{describe(kinds)} {verb} not served by this cluster: {api.install} "
                                            f"(CRD {crds}); needed by {', '.join(fields)}"))
    # In the conditions' precedence (status.DEGRADED_REASONS), whatever the table's order.
    return sorted(findings, key=lambda finding: DEGRADED_REASONS.index(finding.reason))


class ClusterReader:
    """What the kinds' checks and grow hooks read (builders/checks.Reader): the cluster's objects, and its classes as
    known."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.unchecked: list[str] = []  # the classes it could not read, said in the Ready condition

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return self.cluster.get(api_version, kind, namespace, name)

    def class_missing(self, api_version: str, kind: str, name: str) -> bool:
        """True only when the class is known to be absent; one the operator may not read (403: a namespaced install
        without deploy/namespaced/cluster-reads.yaml) is given the benefit, and noted as not checked."""
        try:
            return self.cluster.get(api_version, kind, None, name) is None
        except KubeError as exc:
            if exc.status not in (401, 403):
                raise
            self.unchecked.append(f"{kind} {name} exists (this operator may not read {kind} objects)")
            return False

    def get_class(self, api_version: str, kind: str, name: str) -> tuple[Mapping[str, Any] | None, bool]:
        try:
            return self.cluster.get(api_version, kind, None, name), True
        except KubeError as exc:
            if exc.status not in (401, 403):
                raise
            return None, False


def _findings(problems: list[Problem]) -> list[Finding]:
    return [Finding(problem.reason, problem.message) for problem in problems]


def _missing(kind: Behaviour, reader: ClusterReader, reg: Registry, found_facts: dict[str, Any]) -> list[Finding]:
    """The kind's missing check: its findings; what it found out goes into found_facts (ClusterFacts fields)."""
    found = kind.checks.missing(reader, reg)
    found_facts.update(found.facts)
    return _findings(found.problems)


def look_up(cluster: Cluster, reg: Registry, image: str) -> Lookup:
    """Facts the builders need and the references that are missing, before anything is applied: the Secrets and
    ConfigMaps the spec names, then each kind's missing check (its behaviour's): those every cluster serves, the
    APIs not served, and the served optional kinds."""
    ns = meta.namespace(reg)
    findings: list[Finding] = []
    gone = unserved(cluster)
    for name, where, keys in _secret_refs(reg):
        findings += _secret_findings(cluster, ns, name, where, keys)
    for name, where, key in _config_map_refs(reg):
        findings += _config_map_findings(cluster, ns, name, where, key)

    # Every cluster serves the kinds without an optional API: their checks first, then the APIs not served, then
    # the checks of the served optional kinds (what a served API lacks).
    reader = ClusterReader(cluster)
    found_facts: dict[str, Any] = {}
    for kind in MISSING_CHECKED:
        if kind.data.optional is None:
            findings += _missing(kind, reader, reg, found_facts)
    findings += _missing_apis(gone, reg)
    for kind in MISSING_CHECKED:
        if kind.data.optional is not None and kind.key not in gone:
            findings += _missing(kind, reader, reg, found_facts)

    # Only where a roll surges on one node (a ReadWriteOnce claim): elsewhere a stalled roll changes nothing here.
    fallback = reg.spec.rollout.recreate_after_deadline \
        and storage.surges_on_one_node(reg, ClusterFacts(image, **found_facts)) \
        and stalled_surge(cluster, reg)
    if fallback:
        findings.append(Finding(
            "RolloutFallback",
            "the new pod could not start beside the running one, on the node of its ReadWriteOnce claim, within "
            f"spec.rollout.progressDeadlineSeconds ({reg.spec.rollout.progress_deadline_seconds}s): this roll stops "
            "the old pod first (Recreate), so the registry is down until the new pod serves; the next roll surges "
            "again",
        ))
    facts = ClusterFacts(agent_image=image, rollout_fallback=fallback, unserved=gone, **found_facts)
    return Lookup(facts=facts, findings=findings, unchecked=reader.unchecked)


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}


def stalled_surge(cluster: Cluster, reg: Registry) -> bool:
    """A roll that cannot place its new pod beside the running one (the node is full, or the volume cannot be
    mounted a second time there) past spec.rollout.progressDeadlineSeconds: it goes on by Recreate, until that roll
    is done (the Deployment's annotation carries the decision across reconciles). Only a pod that cannot be placed
    or is still being created counts: an image that cannot be pulled, or a crash loop, would fail after Recreate
    too, with the old pod gone; the Registry says why instead (pod_problems), and the old pod keeps serving."""
    ns = meta.namespace(reg)
    live = cluster.get("apps/v1", "Deployment", ns, deployment.name(reg))
    if live is None:
        return False
    progressing = next((c for c in _status(live).get("conditions") or () if c.get("type") == "Progressing"), {})
    reason = progressing.get("reason")
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    if annotations.get(deployment.ROLLOUT_FALLBACK_ANNOTATION) == "true":
        return reason != "NewReplicaSetAvailable"
    if reason != "ProgressDeadlineExceeded":
        return False
    pods = cluster.list("v1", "Pod", ns, meta.selector_labels(reg))
    return any(_cannot_start_beside(pod) for pod in pods)


def _cannot_start_beside(pod: Mapping[str, Any]) -> bool:
    """Pending, and not for an image or a container config (pod_problems' words): unschedulable, or stuck being
    created (a volume mount the node cannot make)."""
    status = _status(pod)
    if (pod.get("metadata") or {}).get("deletionTimestamp") or status.get("phase") != "Pending":
        return False
    waiting = [(c.get("state") or {}).get("waiting") or {}
               for c in (*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ()))]
    return all(w.get("reason") in (None, "ContainerCreating", "PodInitializing") for w in waiting)


def waiting(cluster: Cluster, reg: Registry, gone: frozenset[tuple[str, str]]) -> list[Finding]:
    """After applying: what exists but is not usable yet (claim not Bound, access not granted, certificate not
    issued): each served kind's waiting check (its behaviour's). gone: the kinds not served (unserved; missing_apis
    said so)."""
    reader = ClusterReader(cluster)
    return [finding for kind in WAITING_CHECKED if kind.key not in gone
            for finding in _findings(kind.checks.waiting(reader, reg))]
