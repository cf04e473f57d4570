"""What the operator looks up in the cluster before and after building: ClusterFacts for the builders, and
findings (Missing*/Waiting*) for the conditions.

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

from ..builders import names, storage
from ..builders.context import ClusterFacts
from ..builders.kinds import CERT_MANAGER, COSI, KINDS, TABLE, crd_name
from ..cluster.discovery import describe
from ..cluster.view import Cluster
from ..kube.client import Kube, KubeError
from .status import DEGRADED_REASONS, Finding

AGENT_IMAGE_ENV = "BERTH_AGENT_IMAGE"
SECRET_NOT_YET = "does not exist yet"  # the COSI driver's Secret: no label of Berth's, watched by name (named.py)


@dataclass
class Lookup:
    facts: ClusterFacts
    findings: list[Finding] = field(default_factory=list)


def unserved(cluster: Cluster) -> frozenset[tuple[str, str]]:
    """The optional kinds (builders/kinds.py) the cluster does not serve: the one place a reconcile asks, once.
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


def _class_missing(cluster: Cluster, api_version: str, kind: str, name: str) -> bool:
    """True only when the class is known to be absent; a class we may not read (403) is given the benefit."""
    try:
        return cluster.get(api_version, kind, None, name) is None
    except KubeError as exc:
        if exc.status in (401, 403):
            return False
        raise


def needed_kinds(reg: Registry) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, the field that needs it) of every optional kind this spec uses (the table's needed_by)."""
    return [(kind.api_version, kind.kind, where) for kind in TABLE if kind.needed_by is not None
            for where in kind.needed_by(reg)]


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


def look_up(cluster: Cluster, reg: Registry, image: str) -> Lookup:
    """Facts the builders need and the references that are missing, before anything is applied."""
    namespace = names.namespace(reg)
    findings: list[Finding] = []
    gone = unserved(cluster)
    bucket_access_secret = None
    pvc_access_modes = None
    for name, where, keys in _secret_refs(reg):
        findings += _secret_findings(cluster, namespace, name, where, keys)
    for name, where, key in _config_map_refs(reg):
        findings += _config_map_findings(cluster, namespace, name, where, key)

    fs = reg.spec.config.storage.filesystem
    if fs is not None and fs.persistent_volume_claim:
        claim = cluster.get("v1", "PersistentVolumeClaim", namespace, fs.persistent_volume_claim)
        if claim is None:
            findings.append(Finding(
                "MissingPVC",
                f"PersistentVolumeClaim {fs.persistent_volume_claim} "
                f"(spec.config.storage.filesystem.persistentVolumeClaim) not found in namespace {namespace}",
            ))
        else:
            modes = (claim.get("spec") or {}).get("accessModes")
            pvc_access_modes = tuple(modes) if modes else None
    elif fs is not None and fs.storage_class:
        if _class_missing(cluster, "storage.k8s.io/v1", "StorageClass", fs.storage_class):
            findings.append(Finding(
                "MissingStorageClass",
                f"StorageClass {fs.storage_class} (spec.config.storage.filesystem.storageClass) not found",
            ))

    findings += _missing_apis(gone, reg)
    obj = reg.spec.config.storage.object_storage
    if obj is not None and (COSI, "BucketClaim") not in gone:  # not served: _missing_apis said so
        if obj.bucket_claim and cluster.get(COSI, "BucketClaim", namespace, obj.bucket_claim) is None:
            findings.append(Finding(
                "MissingBucketClaim",
                f"BucketClaim {obj.bucket_claim} (spec.config.storage.objectStorage.bucketClaim) not found "
                f"in namespace {namespace}",
            ))
        if obj.bucket_class and _class_missing(cluster, COSI, "BucketClass", obj.bucket_class):
            findings.append(Finding(
                "MissingBucketClass",
                f"BucketClass {obj.bucket_class} (spec.config.storage.objectStorage.bucketClass) not found",
            ))
        if obj.bucket_access:
            access = cluster.get(COSI, "BucketAccess", namespace, obj.bucket_access)
            if access is None:
                findings.append(Finding(
                    "MissingBucketAccess",
                    f"BucketAccess {obj.bucket_access} (spec.config.storage.objectStorage.bucketAccess) not found "
                    f"in namespace {namespace}",
                ))
            else:
                bucket_access_secret = (access.get("spec") or {}).get("credentialsSecretName") or None
        if obj.bucket_access_class and _class_missing(cluster, COSI, "BucketAccessClass", obj.bucket_access_class):
            findings.append(Finding(
                "MissingBucketAccessClass",
                f"BucketAccessClass {obj.bucket_access_class} "
                "(spec.config.storage.objectStorage.bucketAccessClass) not found",
            ))

    # Only where a roll surges on one node (a ReadWriteOnce claim): elsewhere a stalled roll changes nothing here.
    fallback = reg.spec.rollout.recreate_after_deadline \
        and storage.surges_on_one_node(reg, ClusterFacts(image, pvc_access_modes=pvc_access_modes)) \
        and stalled_surge(cluster, reg)
    if fallback:
        findings.append(Finding(
            "RolloutFallback",
            "the new pod could not start beside the running one, on the node of its ReadWriteOnce claim, within "
            f"spec.rollout.progressDeadlineSeconds ({reg.spec.rollout.progress_deadline_seconds}s): this roll stops "
            "the old pod first (Recreate), so the registry is down until the new pod serves; the next roll surges "
            "again",
        ))
    facts = ClusterFacts(agent_image=image, bucket_access_secret=bucket_access_secret,
                         pvc_access_modes=pvc_access_modes, rollout_fallback=fallback, unserved=gone)
    return Lookup(facts=facts, findings=findings)


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}


def stalled_surge(cluster: Cluster, reg: Registry) -> bool:
    """A roll that cannot place its new pod beside the running one (the node is full, or the volume cannot be
    mounted a second time there) past spec.rollout.progressDeadlineSeconds: it goes on by Recreate, until that roll
    is done (the Deployment's annotation carries the decision across reconciles). Only a pod that cannot be placed
    or is still being created counts: an image that cannot be pulled, or a crash loop, would fail after Recreate
    too, with the old pod gone; the Registry says why instead (pod_problems), and the old pod keeps serving."""
    namespace = names.namespace(reg)
    deployment = cluster.get("apps/v1", "Deployment", namespace, names.deployment_name(reg))
    if deployment is None:
        return False
    progressing = next((c for c in _status(deployment).get("conditions") or () if c.get("type") == "Progressing"), {})
    reason = progressing.get("reason")
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    if annotations.get(names.ROLLOUT_FALLBACK_ANNOTATION) == "true":
        return reason != "NewReplicaSetAvailable"
    if reason != "ProgressDeadlineExceeded":
        return False
    pods = cluster.list("v1", "Pod", namespace, names.selector_labels(reg))
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
    """After applying: storage that exists but is not usable yet (claim not Bound, access not granted). gone: the
    kinds not served (unserved; missing_apis said so)."""
    namespace = names.namespace(reg)
    found: list[Finding] = []
    fs = reg.spec.config.storage.filesystem
    if fs is not None:
        claim_name = fs.persistent_volume_claim or names.pvc_name(reg)
        claim = cluster.get("v1", "PersistentVolumeClaim", namespace, claim_name)
        phase = _status(claim).get("phase")
        if claim is not None and phase != "Bound":
            found.append(Finding("WaitingForPVC", f"PersistentVolumeClaim {claim_name} is {phase or 'Pending'}"))
    if (CERT_MANAGER, "Certificate") not in gone:
        found += _certificates_waiting(cluster, reg)
    obj = reg.spec.config.storage.object_storage
    if obj is not None and (COSI, "BucketClaim") not in gone:
        claim_name = obj.bucket_claim or names.bucket_claim_name(reg)
        claim = cluster.get(COSI, "BucketClaim", namespace, claim_name)
        # v1alpha1 says bucketReady; v1alpha2 readyToUse (field-notes §2)
        if claim is not None and not (_status(claim).get("bucketReady") or _status(claim).get("readyToUse")):
            found.append(Finding("WaitingForBucket", f"BucketClaim {claim_name} is not ready yet"))
        access_name = obj.bucket_access or names.bucket_access_name(reg)
        access = cluster.get(COSI, "BucketAccess", namespace, access_name)
        if access is not None:
            granted = _status(access).get("accessGranted") or _status(access).get("readyToUse")
            secret_name = (access.get("spec") or {}).get("credentialsSecretName")
            if not granted:
                found.append(
                    Finding("WaitingForBucketAccess", f"BucketAccess {access_name} has not granted access yet")
                )
            elif secret_name and cluster.get("v1", "Secret", namespace, secret_name) is None:
                found.append(Finding(
                    "WaitingForBucketAccess",
                    f"BucketAccess {access_name} granted access but its Secret {secret_name} {SECRET_NOT_YET}",
                ))
    return found


def _certificates_waiting(cluster: Cluster, reg: Registry) -> list[Finding]:
    """A Certificate Berth made whose Secret cert-manager has not written yet (the pod cannot mount it before)."""
    namespace = names.namespace(reg)
    found = []
    tls, ingress = reg.spec.http.tls, reg.spec.ingress
    for where, wanted, name in (
            ("spec.http.tls.issuerRef", tls is not None and tls.issuer_ref is not None, names.certificate_name(reg)),
            ("spec.ingress.tls.issuerRef", ingress is not None and ingress.tls is not None
             and ingress.tls.issuer_ref is not None, names.ingress_certificate_name(reg))):
        if wanted and cluster.get("v1", "Secret", namespace, name) is None:
            found.append(Finding("WaitingForCertificate",
                                 f"Certificate {name} ({where}): cert-manager has not written Secret {name} yet"))
    return found
