"""docs/guide/migrate-from-docker-registry-chart.md on the real node: a registry as the `twuni/docker-registry`
Helm chart (3.0.0) runs it, with `persistence.enabled=true` and `secrets.htpasswd` set, holding images pushed
through its Service; then the guide's kubectl steps as written (its `run:` blocks, in the chart's namespace), after
which the images pushed before pull through the same Service address with the same users and digests, and a push
through Berth works. Then the guide's rollback: the chart's registry back on the same claim serves every image,
the one pushed through Berth included, and takes a push.

Helm is not on this machine: the chart's objects are written here as the chart renders them with those values
(its templates/ and values.yaml at 3.0.0: names, labels, the Secret's keys, the claim, the registry's config,
env, mounts and security contexts), with the ownership label and annotations Helm stamps on what it installs and
Helm's release record (a Secret `sh.helm.release.v1.RELEASE.v1`), created as the field manager `helm`. The claim
is bound to a hostPath volume (no provisioner on the node) whose root the test gives to user 1000, as the chart's
`fsGroup` would on a volume that applies it; hostPath applies no fsGroup, so the files the chart's registry writes
stay 1000's and the guide's owner change is what lets Berth (65532) write.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import yaml

from support.clusters.node import Node
from support.clusters.node_berth import REGISTRIES, deployment_available, registry, service_url, wait_for
from support.common.doc_commands import block
from support.registries.registry import http_get, make_oci_image, pull_image, push_image
from support.registries.upstream import htpasswd

RELEASE = "docker-registry"  # `helm install docker-registry twuni/docker-registry`: the full name is the release's
CHART = "docker-registry-3.0.0"
SECRET = f"{RELEASE}-secret"
# The chart's image.tag is 3.0.0; the node has registry 3.1.1 (support.clusters.images) and no network, so that
# image is also tagged 3.0.0 here: what the chart runs and what the guide's Job and Registry name.
CHART_IMAGE = "docker.io/library/registry:3.0.0"
NODE_IMAGE = "docker.io/library/registry:3.1.1"
USER = ("alice", "a long password")
CHART_UID = 1000  # the chart's securityContext.runAsUser / fsGroup
BERTH_UID = 65532


def _helm(namespace: str, labels: dict[str, str]) -> dict:
    """metadata as Helm leaves it: the chart's labels plus the ownership label and annotations Helm stamps."""
    return {"namespace": namespace, "labels": {**labels, "app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": namespace}}


def _labels(app: str = "docker-registry") -> dict[str, str]:
    return {"app": app, "chart": CHART, "heritage": "Helm", "release": RELEASE}


def _config() -> str:
    """configData of the chart's values.yaml, as templates/configmap.yaml renders it."""
    return yaml.safe_dump({
        "version": 0.1, "log": {"fields": {"service": "registry"}},
        "storage": {"cache": {"blobdescriptor": "inmemory"}},
        "http": {"addr": ":5000", "headers": {"X-Content-Type-Options": ["nosniff"]},
                 "debug": {"addr": ":5001", "prometheus": {"enabled": False, "path": "/metrics"}}},
        "health": {"storagedriver": {"enabled": True, "interval": "10s", "threshold": 3}}})


def _service(ns: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": RELEASE, **_helm(ns, _labels())},
            "spec": {"type": "ClusterIP",
                     "ports": [{"port": 5000, "protocol": "TCP", "name": "http-5000", "targetPort": 5000}],
                     "selector": {"app": "docker-registry", "release": RELEASE}}}


def _configmap(ns: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{RELEASE}-config", **_helm(ns, _labels())},
            "data": {"config.yml": _config()}}


def _deployment(ns: str, claim: str = RELEASE) -> dict:
    """templates/deployment.yaml with the default values, persistence on and secrets.htpasswd set."""
    probe = {"httpGet": {"path": "/", "port": 5000}}
    env = [{"name": "REGISTRY_HTTP_SECRET", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "haSharedSecret"}}},
           {"name": "REGISTRY_AUTH", "value": "htpasswd"},
           {"name": "REGISTRY_AUTH_HTPASSWD_REALM", "value": "Registry Realm"},
           {"name": "REGISTRY_AUTH_HTPASSWD_PATH", "value": "/auth/htpasswd"},
           {"name": "REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY", "value": "/var/lib/registry"}]
    container = {
        "name": "docker-registry", "image": "registry:3.0.0", "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/registry", "serve", "/etc/distribution/config.yml"], "ports": [{"containerPort": 5000}],
        "livenessProbe": probe, "readinessProbe": probe, "resources": {}, "env": env,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": False,
                            "readOnlyRootFilesystem": True, "runAsUser": CHART_UID, "runAsGroup": CHART_UID,
                            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": f"{RELEASE}-config", "mountPath": "/etc/distribution"},
                         {"name": "auth", "mountPath": "/auth", "readOnly": True},
                         {"name": "data", "mountPath": "/var/lib/registry/"}]}
    selector = {"app": "docker-registry", "release": RELEASE}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": RELEASE, **_helm(ns, _labels())},
            "spec": {"selector": {"matchLabels": selector}, "replicas": 1, "minReadySeconds": 5,
                     "template": {"metadata": {"labels": selector}, "spec": {
                         "securityContext": {"fsGroupChangePolicy": "Always", "sysctls": [], "supplementalGroups": [],
                                             "runAsUser": CHART_UID, "fsGroup": CHART_UID},
                         "containers": [container],
                         "volumes": [{"name": f"{RELEASE}-config", "configMap": {"name": f"{RELEASE}-config"}},
                                     {"name": "auth", "secret": {"secretName": SECRET,
                                                                 "items": [{"key": "htpasswd", "path": "htpasswd"}]}},
                                     {"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}}}


def _install_chart(node: Node, ns: str, data: pathlib.Path) -> None:
    """What `helm install docker-registry twuni/docker-registry --set persistence.enabled=true --set
    secrets.htpasswd=...` leaves in the namespace, the claim bound to a hostPath volume at `data`."""
    def b64(value: bytes) -> str:
        return base64.b64encode(value).decode()

    os.chown(data, CHART_UID, CHART_UID)  # the chart's fsGroup, as a volume that applies it would have it
    volume = f"{ns}-{RELEASE}"
    node.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
                     "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                              "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                              "hostPath": {"path": str(data), "type": "Directory"},
                              "claimRef": {"namespace": ns, "name": RELEASE}}})
    manager = {"fieldManager": "helm"}
    # templates/pvc.yaml: its app label is the full name; no storageClassName (persistence.storageClass unset).
    node.api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": RELEASE, **_helm(ns, _labels(app=RELEASE))},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}},
                    **manager)
    node.api.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                     "metadata": {"name": SECRET, **_helm(ns, _labels())},
                     "data": {"htpasswd": b64(htpasswd(dict([USER]))),
                              "haSharedSecret": b64(os.urandom(8).hex().encode()),
                              "proxyUsername": "", "proxyPassword": ""}}, **manager)
    node.api.create(_configmap(ns), **manager)
    node.api.create(_service(ns), **manager)
    node.api.create(_deployment(ns), **manager)
    # Helm's record of the release (the Secrets storage driver): what `helm uninstall` would read.
    node.api.create({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                     "metadata": {"name": f"sh.helm.release.v1.{RELEASE}.v1", "namespace": ns,
                                  "labels": {"name": RELEASE, "owner": "helm", "status": "deployed", "version": "1"}},
                     "data": {"release": b64(b"a gzipped release, not read here")}}, **manager)


def _answers(url: str) -> bool:
    try:
        http_get(f"{url}/v2/", timeout=2)
        return True
    except OSError:
        return False


def _owners(root: pathlib.Path) -> set[tuple[int, int]]:
    """(uid, gid) of the volume's root and of everything under it."""
    found = {(root.stat().st_uid, root.stat().st_gid)}
    for path in root.rglob("*"):
        info = path.lstat()
        found.add((info.st_uid, info.st_gid))
    return found


class Guide:
    """Runs the guide's blocks as written, with bash (they hold here-documents), kubectl on the node, in the
    chart's namespace (the guide's commands name none: they run in the release's namespace)."""

    def __init__(self, node: Node, namespace: str, home: pathlib.Path):
        kubeconfig = home / "kubeconfig"
        shutil.copy(node.kubeconfig, kubeconfig)
        kubectl = shutil.which("kubectl")
        assert kubectl, "kubectl is needed (the base image has it)"
        self.env = {"KUBECONFIG": str(kubeconfig), "HOME": str(home),
                    "PATH": f"{pathlib.Path(kubectl).parent}:/usr/bin:/bin"}
        self.run_text(f"kubectl config set-context --current --namespace={namespace}")

    def run_text(self, text: str, timeout: float = 600) -> str:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", text], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        assert done.returncode == 0, f"{text}\nexited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def __call__(self, run_id: str) -> str:
        began = time.monotonic()
        out = self.run_text(block(run_id))
        print(f"{run_id}: {time.monotonic() - began:.1f} s\n{out.strip()}")
        return out


def _pulls(host: str, pushed: dict, workdir: pathlib.Path) -> None:
    """Every image in `pushed` (reference -> OciImage) pulls with the users of the chart's htpasswd: the same
    manifest digest and the same bytes."""
    for reference, image in pushed.items():
        layout = pathlib.Path(tempfile.mkdtemp(prefix="pull-", dir=workdir))
        pulled = pull_image(host, reference, layout, creds=USER)
        assert pulled.manifest_digest == image.manifest_digest, reference
        assert pulled.blobs == image.blobs, reference


def test_the_guides_migration_from_the_chart_keeps_every_image_and_takes_pushes(
        kube_node: Node, berth_image: str, node_namespace: str, tmp_path: pathlib.Path) -> None:
    ns = node_namespace
    kube_node.tag_image(NODE_IMAGE, CHART_IMAGE)
    data = pathlib.Path(tempfile.mkdtemp(prefix=f"berth-pv-{ns}-chart-", dir=kube_node.state.root))
    _install_chart(kube_node, ns, data)
    wait_for(lambda: deployment_available(kube_node, ns, RELEASE, 1), "the chart's registry Ready", 180, kube_node)
    url = service_url(kube_node, ns, RELEASE)
    host = url.removeprefix("http://")
    wait_for(lambda: _answers(url), "the chart's Service answering", 60, kube_node, interval=0.2)
    assert http_get(f"{url}/v2/").status == 401  # the chart's htpasswd auth
    pushed = {f"team/app:{n}": make_oci_image(tmp_path / f"app-{n}", layers=2) for n in ("1.0", "1.1")}
    pushed["tools/base:1"] = make_oci_image(tmp_path / "base")
    for reference, image in pushed.items():
        push_image(image, host, reference, creds=USER)
    # The chart's layout on the claim: <rootdirectory>/docker/registry/v2 with the claim at the root directory.
    assert (data / "docker" / "registry" / "v2" / "repositories" / "team" / "app").is_dir()
    assert _owners(data) == {(CHART_UID, CHART_UID)}, _owners(data)
    # ... and no directory the registry made is writable by another user: Berth's 65532 could not add a blob or a
    # repository without the guide's owner change.
    made = [path for path in (data / "docker").rglob("*") if path.is_dir()]
    assert made and [path for path in made if path.stat().st_mode & 0o022] == []
    cluster_ip = kube_node.api.get("v1/services", ns, RELEASE)["spec"]["clusterIP"]

    guide = Guide(kube_node, ns, tmp_path)
    listed = guide("chart-migrate-list")
    for name in (f"deployment.apps/{RELEASE}", f"service/{RELEASE}", f"configmap/{RELEASE}-config",
                 f"secret/{SECRET}", f"persistentvolumeclaim/{RELEASE}"):
        assert name in listed, (name, listed)

    began = time.monotonic()
    guide("chart-migrate-stop")
    assert kube_node.api.get("apps/v1/deployments", ns, RELEASE)["spec"]["replicas"] == 0
    assert not kube_node.api.list("v1/pods", ns)
    guide("chart-migrate-chown")
    assert _owners(data) == {(BERTH_UID, BERTH_UID)}, _owners(data)
    assert kube_node.api.get("batch/v1/jobs", ns, "docker-registry-chown") is None
    guide("chart-migrate-delete")
    for path, name in (("apps/v1/deployments", RELEASE), ("v1/configmaps", f"{RELEASE}-config"),
                       ("v1/secrets", f"sh.helm.release.v1.{RELEASE}.v1")):
        assert kube_node.api.get(path, ns, name) is None, (path, name)
    for path, name in (("v1/persistentvolumeclaims", RELEASE), ("v1/secrets", SECRET), ("v1/services", RELEASE)):
        assert kube_node.api.get(path, ns, name) is not None, (path, name)

    guide("chart-migrate-registry")
    wait_for(lambda: _answers(url), "the Service answering again", 60, kube_node, interval=0.2)
    down = time.monotonic() - began
    print(f"the registry was down {down:.1f} s: from the chart's scale to zero until Berth's Registry served")

    # The same Service: adopted by the Registry (its controller now), same cluster IP, Berth's pods behind it.
    reg = registry(kube_node, ns, RELEASE)
    service = kube_node.api.get("v1/services", ns, RELEASE)
    assert service["spec"]["clusterIP"] == cluster_ip, service["spec"]
    assert [(o["kind"], o["uid"]) for o in service["metadata"].get("ownerReferences", ()) if o.get("controller")] \
        == [("Registry", reg["metadata"]["uid"])], service["metadata"]
    assert service["spec"]["selector"].get("app.kubernetes.io/instance") == RELEASE, service["spec"]
    assert "app" not in service["spec"]["selector"], service["spec"]
    # Berth mounts the claim at the chart's path and renders its root directory: nothing moved.
    deployment = kube_node.api.get("apps/v1/deployments", ns, RELEASE)
    template = deployment["spec"]["template"]["spec"]
    claimed = [v["name"] for v in template["volumes"] if (v.get("persistentVolumeClaim") or {}).get("claimName")
               == RELEASE]
    mounts = {m["mountPath"] for c in template["containers"] for m in c.get("volumeMounts", ()) if m["name"] in claimed}
    assert mounts == {"/var/lib/registry"}, mounts

    assert http_get(f"{url}/v2/").status == 401  # the chart's users, from its Secret
    _pulls(host, pushed, tmp_path)
    after = make_oci_image(tmp_path / "after", layers=2)
    push_image(after, host, "team/app:2.0", creds=USER)
    pushed["team/app:2.0"] = after
    _pulls(host, {"team/app:2.0": after}, tmp_path)
    assert _owners(data) == {(BERTH_UID, BERTH_UID)}, _owners(data)

    # Roll back: the Registry goes with its adopted Service; the claim and the Secret stay.
    guide("chart-rollback-delete")
    assert kube_node.api.get(REGISTRIES, ns, RELEASE) is None
    wait_for(lambda: kube_node.api.get("v1/services", ns, RELEASE) is None, "the adopted Service gone with the "
             "Registry", 60, kube_node)
    for path, name in (("v1/persistentvolumeclaims", RELEASE), ("v1/secrets", SECRET)):
        assert kube_node.api.get(path, ns, name) is not None, (path, name)
    guide("chart-rollback-chown")
    assert _owners(data) == {(CHART_UID, CHART_UID)}, _owners(data)
    # What `helm install ... --set persistence.existingClaim=docker-registry` creates: no claim, the same Deployment
    # on the kept one, the Service and the ConfigMap (the kept Secret is adopted, as it stands).
    for obj in (_configmap(ns), _service(ns), _deployment(ns, claim=RELEASE)):
        kube_node.api.create(obj, fieldManager="helm")
    wait_for(lambda: deployment_available(kube_node, ns, RELEASE, 1), "the chart's registry Ready again", 180,
             kube_node)
    url = service_url(kube_node, ns, RELEASE)
    host = url.removeprefix("http://")
    wait_for(lambda: _answers(url), "the chart's Service answering again", 60, kube_node, interval=0.2)
    _pulls(host, pushed, tmp_path)
    last = make_oci_image(tmp_path / "last")
    push_image(last, host, "team/app:3.0", creds=USER)
    _pulls(host, {"team/app:3.0": last}, tmp_path)
    print(json.dumps({"images": sorted(pushed), "downtime_seconds": round(down, 1)}))
