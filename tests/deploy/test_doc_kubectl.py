"""The guides' kubectl commands, run as written on a real API server: the install (the CRD, then the
operator), the CRD-only install and the upgrade, then, on the Registry the install created (`ci-cache`, the
guides' NAME), each page's commands that create or patch objects or read status. No kubelet runs here, so what a
pod would do is not tested here (the node tier does, the uninstall among it); what the API server admits, stores
and prints is.
"""

from __future__ import annotations

import datetime
import hashlib
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from support.clusters.apiserver import REPO, KubeApiServer, skip_reason
from support.common.doc_commands import commands

NAME = "ci-cache"  # examples/filesystem-storageclass.yaml, which the install block applies
REGISTRIES = "berth.dev/v1alpha1/registries"


@pytest.fixture(scope="module")
def api():
    if skip_reason():
        pytest.skip(skip_reason())
    with KubeApiServer() as server:  # bare: nothing installed until the install block runs
        yield server


@pytest.fixture
def sh(api, tmp_path):
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed (the base image has it)"
    env = {"KUBECONFIG": str(api.kubeconfig), "PATH": f"{Path(kubectl).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(run_id: str, cwd: Path = REPO) -> list[str]:
        """Each command of the block, NAME made the install's Registry; its output, one entry per command."""
        outputs = []
        for command in commands(run_id):
            done = subprocess.run(["bash", "-c", command.replace("NAME", NAME)], cwd=cwd, env=env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"{run_id}: {command}\n{done.stderr}"
            outputs.append(done.stdout)
        return outputs

    run.env = env
    return run


def test_install_upgrade_and_the_crd_alone_as_the_guide_says(api, sh) -> None:
    apply_crds, apply_deploy, apply_example, get_reg = sh("install")
    assert "customresourcedefinition.apiextensions.k8s.io/registries.berth.dev" in apply_crds
    # deploy/ holds the operator only: its symmetric delete (the uninstall) must never take the CRD.
    assert "customresourcedefinition" not in apply_deploy and "deployment.apps/berth-operator" in apply_deploy
    assert f"registry.berth.dev/{NAME} created" in apply_example
    assert get_reg.split()[:3] == ["NAME", "STORAGE", "REPLICAS"] and NAME in get_reg
    assert api.get("apps/v1/deployments", "berth-system", "berth-operator") is not None
    upgrade_crds, upgrade = sh("upgrade")
    assert "registries.berth.dev" in upgrade_crds and "deployment.apps/berth-operator" in upgrade
    (crd_only,) = sh("install-crd-only")
    assert "registries.berth.dev" in crd_only


@pytest.fixture
def installed(api, sh) -> None:
    if api.get(REGISTRIES, "default", NAME) is None:
        sh("install")


def test_growing_the_storage(api, sh, installed) -> None:
    sh("storage-grow")
    registry = api.get(REGISTRIES, "default", NAME)
    assert registry["spec"]["config"]["storage"]["filesystem"]["size"] == "100Gi"


def test_the_deletion_policy_patch(api, sh, installed) -> None:
    sh("storage-deletion-policy")
    registry = api.get(REGISTRIES, "default", NAME)
    assert registry["spec"]["config"]["storage"]["filesystem"]["deletionPolicy"] == "Delete"


def test_a_gc_run_now_is_an_rfc_3339_timestamp(api, sh, installed) -> None:
    sh("gc-run-now")
    value = api.get(REGISTRIES, "default", NAME)["metadata"]["annotations"]["berth.dev/gc-requested-at"]
    assert datetime.datetime.fromisoformat(value).tzinfo is not None, value


def test_the_secrets_the_guides_create(api, sh, tmp_path) -> None:
    sh("placement-pull-secret")
    assert api.get("v1/secrets", "default", "mirror-pull")["type"] == "kubernetes.io/dockerconfigjson"
    (tmp_path / "htpasswd").write_text("alice:$2y$05$abcdefghijklmnopqrstuuGMJ1q4r6nNCMQ2u1eWfZpXxTqS8zyu6\n")
    for _ in range(2):  # the guide runs it again for each change: apply, not create
        sh("auth-htpasswd-secret", tmp_path)
    assert set(api.get("v1/secrets", "default", "registry-htpasswd")["data"]) == {"htpasswd"}
    for _ in range(2):
        sh("rotation-s3-secret")
    assert set(api.get("v1/secrets", "default", "registry-s3")["data"]) == {"AWS_ACCESS_KEY_ID",
                                                                           "AWS_SECRET_ACCESS_KEY"}
    sh("cache-apply")
    sh("rotation-upstream-secret")
    secret = api.get("v1/secrets", "default", "dockerhub-token")
    assert secret["type"] == "kubernetes.io/basic-auth" and set(secret["data"]) == {"username", "password"}


def test_the_trust_rotation_and_its_check(api, sh, installed, tmp_path) -> None:
    bundle = tmp_path / "old-and-new.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    sh("rotation-trust-bundle", tmp_path)
    assert api.get("v1/configmaps", "default", "issuer-trust")["data"]["ca.pem"] == bundle.read_text()
    digest, per_pod = sh("rotation-trust-applied", tmp_path)
    assert digest.split()[0] == hashlib.sha256(bundle.read_bytes()).hexdigest()
    assert per_pod == ""  # no pod runs here: no agent has reported yet


def test_the_retained_claims_list(sh, installed) -> None:
    (listed,) = sh("uninstall-find-retained")
    assert listed == ""  # no claim here carries Berth's storage labels (kubectl says so on stderr)


def test_the_status_and_event_reads(sh, installed) -> None:
    (per_pod,) = sh("rotation-applied")
    assert per_pod == ""
    (events,) = sh("monitoring-events")
    assert events == "" or shlex.split(events.splitlines()[0])[0] == "LAST"


def test_the_conditions_and_kubectl_wait_on_the_current_generation(api, sh, installed) -> None:
    """What the operator would write (no operator runs here): Ready True, first at an older generation, which
    `kubectl wait` must not take, then at the current one, which it returns on."""
    generation = api.get(REGISTRIES, "default", NAME)["metadata"]["generation"]

    def ready_at(observed: int) -> None:
        condition = {"type": "Ready", "status": "True", "reason": "Available", "message": "serving",
                     "observedGeneration": observed, "lastTransitionTime": "2026-12-01T00:00:00Z"}
        api.patch(REGISTRIES, "default", NAME, {"status": {"conditions": [condition]}}, subresource="status")

    ready_at(generation - 1)
    (command,) = commands("monitoring-wait-ready")
    stale = subprocess.run(["bash", "-c", command.replace("NAME", NAME) + " --timeout=3s"], cwd=REPO,
                           env=sh.env, capture_output=True, text=True, timeout=60)
    assert stale.returncode != 0, stale.stdout  # a Ready of an older generation is not about this spec
    ready_at(generation)
    (waited,) = sh("monitoring-wait-ready")
    assert f"registry.berth.dev/{NAME} condition met" in waited
    described, conditions = sh("monitoring-conditions")
    assert "Available" in described and '"reason":"Available"' in conditions
