"""Why a registry pod cannot run, in the Registry's conditions: engine.pod_problems on pod statuses as the
kubelet and the scheduler write them (the messages below are v1.36's), through what the caches keep of a pod
(cluster.pod_status), to the conditions."""

from __future__ import annotations

from berth_operator.cluster.caches import strip
from berth_operator.engine import pod_problems
from berth_operator.engine.status import DeploymentState, Observation, conditions

IMAGE = "docker.io/library/registry:3.9.99"
PULL_ERROR = (f'failed to pull and unpack image "{IMAGE}": failed to resolve reference "{IMAGE}": '
              f'{IMAGE}: not found')
SCHEDULER = ("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes "
             "are available: 1 Preemption is not helpful for scheduling.")


def pod(name: str = "demo-7d9c-abcde", *, conditions=(), init=(), containers=(), deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": "ns", "resourceVersion": "7",
            "labels": {"app.kubernetes.io/instance": "demo", "app.kubernetes.io/managed-by": "berth"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []},
            "status": {"phase": "Pending", "conditions": list(conditions), "podIP": "10.88.0.9",
                       "startTime": "2026-12-04T10:00:00Z",
                       "initContainerStatuses": list(init), "containerStatuses": list(containers)}}


def waiting(name: str, image: str, reason: str, message: str = "", **extra) -> dict:
    return {"name": name, "image": image, "imageID": "", "ready": False, "restartCount": 0, "started": False,
            "state": {"waiting": {"reason": reason, "message": message}}, "lastState": {}, **extra}


def found(*pods: dict) -> list[tuple[str, str]]:
    """Through the cache's stripped form, as the reconcile reads pods."""
    return [(f.reason, f.message) for f in pod_problems.findings([strip(p) for p in pods])]


def test_an_image_that_cannot_be_pulled_names_container_image_and_the_kubelets_error() -> None:
    err = waiting("registry-binary", IMAGE, "ErrImagePull", PULL_ERROR)
    back_off = waiting("registry-binary", IMAGE, "ImagePullBackOff",
                       f'Back-off pulling image "{IMAGE}": ErrImagePull: {PULL_ERROR}')
    for status, reason in ((err, "ErrImagePull"), (back_off, "ImagePullBackOff")):
        [(kind, message)] = found(pod(init=[status]))
        assert kind == "ImagePullFailed"
        assert message == (f"pod demo-7d9c-abcde: container registry-binary cannot pull image {IMAGE}: {reason}: "
                           f"{PULL_ERROR}")


def test_an_unschedulable_pod_carries_the_schedulers_message() -> None:
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": SCHEDULER,
                 "lastTransitionTime": "2026-12-04T10:00:00Z", "lastProbeTime": None}
    assert found(pod(conditions=[scheduled])) == [("Unschedulable", f"pod demo-7d9c-abcde cannot be scheduled: "
                                                                    f"{SCHEDULER}")]


def test_a_crash_loop_and_an_oom_kill_give_the_last_exit() -> None:
    crash = waiting("registry", "berth:1", "CrashLoopBackOff", "back-off 40s restarting failed container",
                    restartCount=4, lastState={"terminated": {"reason": "Error", "exitCode": 2, "message": "boom",
                                                              "finishedAt": "2026-12-04T10:00:00Z"}})
    oom = waiting("agent", "berth:1", "CrashLoopBackOff", "", restartCount=3,
                  lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}})
    assert found(pod(init=[oom], containers=[crash])) == [
        ("OOMKilled", "pod demo-7d9c-abcde: container agent is in a crash loop (3 restarts), last exit: OOMKilled, "
                      "exit code 137"),
        ("CrashLoopBackOff", "pod demo-7d9c-abcde: container registry is in a crash loop (4 restarts), last exit: "
                             "Error, exit code 2: boom")]


def test_a_missing_env_secret_is_a_container_config_error() -> None:
    status = waiting("registry", "berth:1", "CreateContainerConfigError", 'secret "egress" not found')
    assert found(pod(containers=[status])) == [
        ("ContainerConfigError", 'pod demo-7d9c-abcde: container registry cannot be created: '
                                 'CreateContainerConfigError: secret "egress" not found')]


def test_a_healthy_or_leaving_pod_says_nothing() -> None:
    running = {"name": "registry", "image": "berth:1", "ready": True, "restartCount": 0,
               "state": {"running": {"startedAt": "2026-12-04T10:00:00Z"}}, "lastState": {}}
    assert found(pod(containers=[running])) == []
    assert found(pod(init=[waiting("registry-binary", IMAGE, "ErrImagePull", PULL_ERROR)], deleting=True)) == []
    # The registry-binary container's failed copy is RegistryBinaryMissing's (status.binary_findings), not a loop.
    cp = waiting("registry-binary", IMAGE, "CrashLoopBackOff", "", restartCount=2,
                 lastState={"terminated": {"reason": "Error", "exitCode": 1}})
    assert found(pod(init=[cp])) == []


def test_the_cache_keeps_what_the_findings_read_and_no_timestamps() -> None:
    status = waiting("registry-binary", IMAGE, "ErrImagePull", PULL_ERROR, containerID="containerd://x")
    kept = strip(pod(init=[status], conditions=[{"type": "Ready", "status": "False",
                                                 "lastTransitionTime": "2026-12-04T10:00:00Z"}]))["status"]
    assert kept == {"phase": "Pending", "initContainerStatuses": [
        {"name": "registry-binary", "image": IMAGE, "restartCount": 0,
         "state": {"waiting": {"reason": "ErrImagePull", "message": PULL_ERROR}}}]}


def test_the_conditions_name_the_pod_problem_as_why_it_is_not_ready() -> None:
    [finding] = pod_problems.findings([pod(init=[waiting("registry-binary", IMAGE, "ErrImagePull", PULL_ERROR)])])
    obs = Observation(generation=1, findings=(finding,), deployment=DeploymentState(wanted=1, replicas=1),
                      serving_pods=("demo-7d9c-abcde",))
    wanted = conditions(obs)
    assert wanted["Degraded"] == ("True", "ImagePullFailed", finding.message)
    assert wanted["Ready"] == ("False", "ImagePullFailed", finding.message)
    assert wanted["Progressing"][:2] == ("True", "WaitingForPods")
