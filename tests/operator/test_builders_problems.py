"""problems(): specs that are valid but cannot run as written, each message naming the field."""

from __future__ import annotations

from berth_operator.builders import build_all, problems

RWO_CLASS = {"filesystem": {"storageClass": "standard"}}
CLAIM = {"filesystem": {"persistentVolumeClaim": "data"}}
COSI_CLASSES = {"objectStorage": {"bucketClass": "s3", "bucketAccessClass": "rw"}}
COSI_EXISTING_ACCESS = {"objectStorage": {"bucketClass": "s3", "bucketAccess": "team-access"}}


def spec(storage, **top):
    return {"config": {"storage": storage}, **top}


def test_every_builder_case_without_problems_or_with_the_expected_ones(builder_case):
    reg, facts = builder_case
    found = problems(reg, facts)
    if reg.spec.replicas > 1 and reg.spec.config.storage.filesystem and facts.pvc_access_modes != ("ReadWriteMany",):
        assert len(found) == 1 and found[0].reason == "ReplicasCapped"
        assert found[0].message.startswith("spec.replicas: 3 needs ReadWriteMany storage")
    else:
        assert found == []


def test_replicas_on_read_write_once_storage(registry_factory, facts_factory):
    [(reason, message)] = problems(registry_factory(spec(RWO_CLASS, replicas=3)), facts_factory())
    assert reason == "ReplicasCapped"
    assert message == ("spec.replicas: 3 needs ReadWriteMany storage; filesystem storage on the ReadWriteOnce claim "
                       "created from storageClass 'standard' is capped at 1 replica")
    [(_reason, message)] = problems(registry_factory(spec(CLAIM, replicas=2)), facts_factory())
    assert message.startswith("spec.replicas: 2 needs ReadWriteMany storage")
    assert "claim 'data' (accessModes not known yet)" in message
    [(_reason, message)] = problems(registry_factory(spec(CLAIM, replicas=2)),
                                    facts_factory(pvc_access_modes=("ReadWriteOnce",)))
    assert "claim 'data' (accessModes ReadWriteOnce)" in message
    assert problems(registry_factory(spec(CLAIM, replicas=2)), facts_factory(pvc_access_modes=("ReadWriteMany",))) == []
    assert problems(registry_factory(spec(RWO_CLASS, replicas=1)), facts_factory()) == []


def test_replicas_on_inmemory_storage(registry_factory, facts_factory):
    reg = registry_factory(spec({"inmemory": {}}, replicas=2))
    [(reason, message)] = problems(reg, facts_factory())
    assert reason == "ReplicasCapped" and message.startswith("spec.replicas: 2 with spec.config.storage.inmemory")
    assert [o["spec"]["replicas"] for o in build_all(reg, facts_factory(), http_secret_value=None)
            if o["kind"] == "Deployment"] == [1]


def test_existing_bucket_access_without_known_secret(registry_factory, facts_factory):
    reg = registry_factory(spec(COSI_EXISTING_ACCESS, replicas=3))
    [(reason, message)] = problems(reg, facts_factory())
    assert reason == "WaitingForBucketAccess"
    assert message.startswith("spec.config.storage.objectStorage.bucketAccess: waiting for BucketAccess 'team-access'")
    kinds = [o["kind"] for o in build_all(reg, facts_factory(), http_secret_value=None)]
    assert "Deployment" not in kinds and "BucketClaim" in kinds
    assert "PodDisruptionBudget" in kinds, "the budget follows spec.replicas only, so a wait prunes nothing"
    assert problems(reg, facts_factory(bucket_access_secret="team-creds")) == []


def test_name_that_cannot_name_a_service(registry_factory, facts_factory):
    for name in ("a" * 64, "team.registry", "1registry"):
        [(reason, message)] = problems(registry_factory(spec(COSI_CLASSES), name=name), facts_factory())
        assert reason == "Unsatisfiable"
        assert message.startswith(f"metadata.name: {name!r} cannot name the registry's Service")
    assert problems(registry_factory(spec(COSI_CLASSES), name="a" * 63), facts_factory()) == []


def test_drain_timeout_longer_than_the_grace_period(registry_factory, facts_factory):
    [(reason, message)] = problems(registry_factory(spec(COSI_CLASSES, http={"drainTimeout": "10m"})), facts_factory())
    assert reason == "Unsatisfiable"
    assert message.startswith("spec.http.drainTimeout: 10m does not fit the pod's termination grace period of 300s")
    # The preStop sleep (5 s), the drain and 10 s to exit fit the 300 s.
    assert problems(registry_factory(spec(COSI_CLASSES, http={"drainTimeout": "4m45s"})), facts_factory()) == []
    [(_reason, message)] = problems(registry_factory(spec(COSI_CLASSES, http={"drainTimeout": "4m46s"})),
                                    facts_factory())
    assert message.endswith("a stopping pod is killed after 285s of draining")


def test_http_addr_must_listen_on_every_interface(registry_factory, facts_factory):
    for addr in ("127.0.0.1:5000", "localhost:5000", "[::1]:5000", "10.0.0.7:5000"):
        [(reason, message)] = problems(registry_factory(spec(COSI_CLASSES, http={"addr": addr})), facts_factory())
        assert reason == "Unsatisfiable"
        assert message.startswith(f"spec.http.addr: {addr!r} listens on ")
        assert "':5000' or '0.0.0.0:5000'" in message
    for addr in (":5000", "0.0.0.0:5000", "[::]:5000"):
        assert problems(registry_factory(spec(COSI_CLASSES, http={"addr": addr})), facts_factory()) == [], addr


def test_placement_that_keeps_the_pods_apart_on_a_readwriteonce_claim(registry_factory, facts_factory):
    apart = {"pod": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app.kubernetes.io/name": "registry"}},
         "topologyKey": "kubernetes.io/hostname"}]}}}}
    [(reason, message)] = problems(registry_factory(spec(RWO_CLASS, **apart)), facts_factory())
    assert reason == "Unsatisfiable" and message.startswith(
        "spec.pod.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0] keeps two of this "
        "Registry's pods off one node")
    assert problems(registry_factory(spec(COSI_CLASSES, **apart)), facts_factory()) == []  # shared storage: fine
