"""Every reason the operator and the agent put on a Registry (condition reasons, Event reasons): what it means and
what to do. docs/guide/troubleshooting.md is rendered from here (`berth-crd --troubleshooting`), and
tests/api/test_troubleshooting.py fails when the operator or the agent can set a reason this module does not hold.

The reasons themselves are defined where they are set (the operator's engine.status tuples, the agent's Events);
they live here as documentation only, so neither program imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass

REGENERATE_COMMAND = "berth-crd --troubleshooting > docs/guide/troubleshooting.md"


@dataclass(frozen=True)
class Reason:
    """One reason: where it shows (a condition type, or an Event type), who sets it, its meaning and the remedy."""

    name: str
    shows_on: str  # Degraded, Progressing, Ready, or "Warning Event", "Normal Event"
    set_by: str  # operator or agent
    meaning: str
    remedy: str


def _reasons(shows_on: str, set_by: str, *rows: tuple[str, str, str]) -> tuple[Reason, ...]:
    return tuple(Reason(name, shows_on, set_by, meaning, remedy) for name, meaning, remedy in rows)


DEGRADED = _reasons(
    "Degraded", "operator",
    ("InvalidSpec", "The spec breaks a rule the operator checks; the message names each field "
     "(`spec.config.storage: ...`). Nothing is changed until it is fixed; Ready is False.",
     "Edit the Registry as the message says; `kubectl explain registry.spec` and the "
     "[API reference](../reference/api.md) give every field's rules."),
    ("ApplyFailed", "The API server refused a write of the operator; the message names the object and the HTTP "
     "status. Ready is False.",
     "Read the status and message: a 403 is missing RBAC (reinstall `deploy/`), a 422 a value Kubernetes refuses "
     "(an annotation, a label)."),
    ("MissingSecret", "A Secret the spec names does not exist. The pods wait for it.",
     "Create the Secret in the Registry's namespace; the pods start without another edit."),
    ("MissingSecretKey", "A Secret the spec names lacks the key given in `field` (or `key`).",
     "Add the key to the Secret, or name the key it has."),
    ("MissingConfigMap", "A ConfigMap the spec names (token auth's `rootCertBundle` or `jwks`) does not exist.",
     "Create it (a trust-manager Bundle writes one)."),
    ("MissingConfigMapKey", "A ConfigMap the spec names lacks the key given in `field`.",
     "Add the key, or name the key it has."),
    ("MissingPVC", "`persistentVolumeClaim` names a claim that does not exist.",
     "Create the claim, or use `storageClass` and let Berth create it."),
    ("MissingCOSI", "`objectStorage` needs the COSI CRDs and controller, and the cluster has none.",
     "Install COSI; the Registry carries on by itself within seconds, with no operator restart."),
    ("MissingBucketClaim", "The BucketClaim `objectStorage` names does not exist.", "Create it, or fix the name."),
    ("MissingBucketAccess", "The BucketAccess `objectStorage` names does not exist.", "Create it, or fix the name."),
    ("MissingStorageClass", "The StorageClass `filesystem.storageClass` names does not exist.",
     "Name a class the cluster has (`kubectl get storageclass`)."),
    ("MissingBucketClass", "The BucketClass the spec names does not exist.", "Create it, or fix the name."),
    ("MissingBucketAccessClass", "The BucketAccessClass the spec names does not exist.",
     "Create it, or fix the name."),
    ("VolumeShrinkRefused", "`filesystem.size` is smaller than the claim: claims never shrink. The claim keeps its "
     "size and the registry keeps serving.", "Set `size` back to at least the claim's size."),
    ("VolumeExpansionNotAllowed", "`filesystem.size` is larger than the claim, but the claim's StorageClass (named "
     "in the message) does not set `allowVolumeExpansion: true`. Nothing changes.",
     "Use a class that allows expansion, or set `size` back."),
    ("Unsatisfiable", "The Registry cannot be built as asked, whatever the cluster does; the message names the "
     "field (for example `metadata.name` too long, or not a DNS label, to name the registry's Service).",
     "Fix what the message names (a new Registry with a shorter name, for `metadata.name`)."),
    ("ReplicasCapped", "More replicas than the storage allows (a ReadWriteOnce claim, or `inmemory`): the "
     "Deployment runs 1.", "Use shared storage (S3, COSI, Azure, GCS, a ReadWriteMany claim) for more replicas, "
     "or set `replicas: 1`."),
    ("AgentFailed", "A pod's agent could not apply the current spec (`status.agents.<pod>.error` says why); that "
     "pod keeps serving its last good config. The agent's pre-flight refuses before any restart: a TLS pair that "
     "does not load or an expired certificate, a token bundle that is not PEM certificates or holds an expired one, "
     "a JWKS without a usable key, a new port in use, a redis that does not answer `PING`, a pull-through upstream "
     "that does not answer or refuses its credentials, S3, Azure or GCS credentials the service refuses, or a "
     "missing container or bucket. It retries every 5 s.",
     "Fix the input the error names (the Secret, the spec field); the agent picks it up by itself. See "
     "[rotation](rotation.md) for changing credentials without a failed request."),
    ("RegistryBinaryMissing", "`spec.image` has no registry binary at `/bin/registry`, where the official images "
     "keep it: the init container `registry-binary` could not copy it (the message quotes `cp`, per pod).",
     "Use an image built like the official `registry` images, or put the binary at `/bin/registry`."),
    ("ImagePullFailed", "A container's image cannot be pulled; the message names the pod, the container, the image "
     "and the kubelet's error (`ErrImagePull`, `ImagePullBackOff`: a tag that does not exist, a `401`).",
     "Fix the tag, or add a pull Secret in `spec.pod.imagePullSecrets` ([placement](placement-and-identity.md)); "
     "the Registry recovers with no other edit."),
    ("RolloutFallback", "A roll that could not surge (the new pod cannot be placed beside the old one) stopped the "
     "old pod first, as `spec.rollout.recreateAfterDeadline: true` allows once `progressDeadlineSeconds` passed.",
     "Make room on the node (or accept the short outage); the message joins the cause, usually `Unschedulable`."),
    ("Unschedulable", "The scheduler cannot place a pod; its own message (`0/3 nodes are available: ...`) says "
     "why.", "Fix `spec.pod.nodeSelector`, add `tolerations` for the taints, or lower `spec.resources`."),
    ("ContainerConfigError", "The kubelet cannot create a container, e.g. a Secret or ConfigMap key `spec.env` names "
     "is missing: its words.", "Create the key, or mark the reference `optional`."),
    ("OOMKilled", "A container was killed for memory; the message has its restarts and last exit.",
     "Raise `spec.resources.limits.memory` (registry) or `spec.pod.agentResources` (agent)."),
    ("CrashLoopBackOff", "A container keeps exiting; the message has its restarts and last exit.",
     "Read the exit in the message and the container's log (`kubectl logs POD -c registry`)."),
    ("MissingMonitoringCRD", "`spec.monitoring.serviceMonitor` needs prometheus-operator's CRDs and the cluster has "
     "none. The registry serves as usual.", "Install prometheus-operator's CRDs, or remove the field."),
    ("MissingGatewayAPI", "`spec.gateway` needs the Gateway API CRDs and the cluster has none.",
     "Install the Gateway API CRDs; the Registry recovers without an operator restart."),
    ("MissingCertManager", "`spec.http.tls.issuerRef` or `spec.ingress.tls.issuerRef` needs cert-manager and the "
     "cluster has none.", "Install cert-manager, or give a `secretName` instead."),
)

PROGRESSING = _reasons(
    "Progressing", "operator",
    ("WaitingForPVC", "The claim exists but is not Bound yet.",
     "Usually nothing: wait. If it lasts, `kubectl describe pvc` says why (no provisioner, no capacity)."),
    ("WaitingForBucket", "The COSI bucket is not ready yet.", "Wait; if it lasts, describe the BucketClaim."),
    ("WaitingForBucketAccess", "The COSI access is not granted, or its Secret not written yet.",
     "Wait; if it lasts, describe the BucketAccess."),
    ("WaitingForCertificate", "Berth made a cert-manager Certificate and its Secret is not written yet.",
     "Wait; if it lasts, `kubectl describe certificate` says what the issuer answered."),
    ("WaitingForPods", "Pods are starting or rolling (`N of M pods ready, K up to date`).",
     "Wait. If a pod cannot run, Degraded names why (ImagePullFailed, Unschedulable, ...)."),
    ("WaitingForAgents", "The agents are applying a new generation of the spec.",
     "Wait (about 10 s per replica for a config edit). If it lasts, see `status.agents.<pod>`."),
    ("ResizingPVC", "The volume is growing (the claim's `Resizing` condition); the registry keeps serving and Ready "
     "is unaffected.", "Nothing: it clears by itself."),
    ("WaitingForFileSystemResize", "The volume grew and the file system waits to grow (`FileSystemResizePending`); "
     "Ready is unaffected.", "Nothing: the kubelet grows it online."),
    ("GarbageCollecting", "A garbage-collection run is requested or running: every replica serves read-only "
     "(pushes get HTTP 405), Ready is unaffected.",
     "Wait for it to end ([garbage collection](garbage-collection.md)); `status.garbageCollection.active` shows "
     "its phase."),
)

READY = _reasons(
    "Ready", "operator",
    ("Available", "Serving: every wanted pod is ready and its agent applied the current generation. Progressing is "
     "then False with `Available` too.", "Nothing."),
    ("ScaledToZero", "`spec.replicas` is 0: Ready is False with nothing to fix.", "Scale up when you want it."),
    ("AsExpected", "The reason of Degraded when it is False: nothing needs a human.", "Nothing."),
)

AGENT_EVENTS = _reasons(
    "Event", "agent",
    ("ConfigApplied", "(Normal) A pod's registry runs a new config; the message names its hash.", "Nothing."),
    ("ConfigRejected", "(Warning) A pod's agent refused an edit or an input; the last good config keeps serving. "
     "The Registry is Degraded `AgentFailed` with the same words.", "As for `AgentFailed`."),
    ("RolledBack", "(Warning) A new config did not come up; the agent restored the last good one, which serves "
     "again. The message quotes the registry's error.", "Fix the setting the error names."),
    ("RollbackFailed", "(Warning) Neither the new config nor the last good one came up.",
     "Read the message and the registry's log (`kubectl logs POD -c registry`); fix the spec or the inputs."),
    ("SupervisorMissing", "(Warning) The registry container's supervisor (`berth-supervise`) is not running: "
     "nothing restarts the registry, changes wait.", "Look at the registry container: `kubectl describe pod`."),
    ("SupervisorRestarted", "(Warning) The registry container restarted (kill -9, out of memory) quicker than the "
     "agent looks (a second): nothing served meanwhile; the wanted config is applied again.",
     "Look at the registry container's last state, `kubectl describe pod`; `OOMKilled`: raise "
     "`spec.resources.limits.memory`."),
    ("RegistryCrashLooping", "(Warning) The registry process keeps exiting; the message quotes what the registry "
     "said (without what moves between starts, such as a local port: one message per failure).",
     "Fix what the registry says (storage reachable, the upstream reachable, config values)."),
    ("CertificateExpiresSoon", "(Warning) A TLS certificate or a token-auth trust certificate ends within 7 days.",
     "Renew it and update the Secret or ConfigMap; it is applied hot."),
    ("SillyAuthInUse", "(Warning) `auth.silly` is on: any request with an `Authorization` header is let in.",
     "Use `htpasswd` or `token` outside tests ([auth](auth.md))."),
    ("RedisUnavailable", "(Warning) A pod's first config names a redis that does not answer: it starts without the "
     "cache (lookups fall back to storage).", "Fix `spec.redis` or the redis server."),
    ("UpstreamUnreachable", "(Warning) A pull-through cache's first config: the upstream does not answer. The agent "
     "starts the registry anyway, but Distribution (2.8 and 3.x) panics at start while its upstream's `/v2/` does "
     "not answer: the pod crash-loops (`RegistryCrashLooping`) and serves nothing, its cache included, until the "
     "upstream answers; then it comes up by itself.",
     "Check the upstream URL, the network, `HTTPS_PROXY`; scale or roll a cache only with its upstream up "
     "([pull-through cache](pull-through-cache.md))."),
    ("UpstreamAuthFailed", "(Warning) A pull-through cache's first config: the upstream refuses its credentials.",
     "Fix the Secret `spec.config.proxy.credentials` names ([pull-through cache](pull-through-cache.md))."),
    ("GarbageCollectionStarted", "(Normal) The agent holding the `<registry>-gc` Lease started "
     "`registry garbage-collect`.", "Nothing."),
    ("GarbageCollectionInterrupted", "(Warning) The runner's pod died during a run; another agent (or the operator, "
     "at the deadline) recorded it and every replica turns writable.", "Nothing; run it again if needed."),
)

OPERATOR_EVENTS = _reasons(
    "Event", "operator",
    ("Created", "(Normal) The operator created objects; the message names them.", "Nothing."),
    ("Updated", "(Normal) The operator updated objects; the message names them.", "Nothing."),
    ("Replaced", "(Normal) The operator deleted and created an object Kubernetes cannot change in place (a "
     "LoadBalancer Service's `loadBalancerClass`): its cluster IP and node port change, its name stays.",
     "Nothing; clients that pinned the old address need the new one."),
    ("Deleted", "(Normal) The operator deleted objects it no longer needs.", "Nothing."),
    ("GarbageCollectionRequested", "(Normal) A run was asked for, by the schedule or the annotation.", "Nothing."),
    ("GarbageCollectionSucceeded", "(Normal) A run ended; the message has the counts.", "Nothing."),
    ("GarbageCollectionFailed", "(Warning) A run failed; `lastRun.message` says why (e.g. killed by SIGKILL at the "
     "memory limit).", "Raise `spec.resources.limits.memory` for a large store, or fix what the message names."),
    ("GarbageCollectionTimedOut", "(Warning) The run took longer than `readOnlyTimeout` and was stopped; the "
     "registry is writable again.", "Raise `readOnlyTimeout`, or run at a quieter time."),
    ("GarbageCollectionInterrupted", "(Warning) The runner's pod died and no agent recorded it before the deadline.",
     "Nothing; run it again if needed."),
    ("GarbageCollectionSkipped", "(Normal) A scheduled run came while another stood.", "Nothing."),
    ("InvalidGarbageCollectionRequest", "(Warning) The `berth.dev/gc-requested-at` annotation is not an RFC 3339 "
     "timestamp, or the storage is in-memory.", "Fix the annotation's value, or remove it."),
)

CONDITION_REASONS = DEGRADED + PROGRESSING + READY
EVENT_REASONS = AGENT_EVENTS + OPERATOR_EVENTS

_INTRO = """\
# Troubleshooting

Start with the Registry's conditions: `kubectl describe reg NAME`, or
`kubectl get reg NAME -o jsonpath='{.status.conditions}'`. Every condition has a reason and a message; the
message names the field, the object or the pod concerned. A pod's own trouble is in
`status.agents.<pod>.error`, and every new Degraded reason is also a Warning Event
(`kubectl get events --field-selector involvedObject.name=NAME`). Nothing a user must know hides in a pod.
How Ready, Progressing and `observedGeneration` relate is in [monitoring](monitoring.md#conditions-and-ready).

By symptom:

- *`kubectl get reg` shows READY False*: read the Ready reason; it names the cause (a missing Secret, a pod
  that cannot run) rather than the symptom.
- *An edit does not take effect*: Progressing `WaitingForAgents`, or Degraded `AgentFailed` with the agent's
  refusal in `status.agents.<pod>.error`; the last good config keeps serving.
- *Pods do not start*: Degraded `ImagePullFailed`, `Unschedulable`, `ContainerConfigError`, `OOMKilled` or
  `CrashLoopBackOff`, with the kubelet's or the scheduler's words.
- *Pushes fail with HTTP 405*: Progressing `GarbageCollecting` (read-only for a run), or
  `storage.maintenance.readonly.enabled`, or a pull-through cache (which refuses pushes).

The tables below are generated from agent/berth_api/reasons.py (`{command}`); a test fails when the operator or
the agent can set a reason they do not list.
"""


def render_troubleshooting() -> str:
    lines = [f"<!-- Generated from agent/berth_api/reasons.py by `{REGENERATE_COMMAND}`. Do not edit. -->", "",
             _INTRO.replace("{command}", REGENERATE_COMMAND)]
    for title, reasons in (("Degraded: something needs a human", DEGRADED),
                           ("Progressing: on its way", PROGRESSING),
                           ("Ready, and the idle reasons", READY)):
        lines += [f"## {title}", "", "| Reason | What it means | What to do |", "|---|---|---|"]
        lines += [f"| `{r.name}` | {r.meaning} | {r.remedy} |" for r in reasons]
        lines.append("")
    for title, reasons in (("Events from the agents", AGENT_EVENTS), ("Events from the operator", OPERATOR_EVENTS)):
        lines += [f"## {title}", "", "| Reason | What it means | What to do |", "|---|---|---|"]
        lines += [f"| `{r.name}` | {r.meaning} | {r.remedy} |" for r in reasons]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
