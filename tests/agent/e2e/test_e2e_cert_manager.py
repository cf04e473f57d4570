"""A certificate from cert-manager (spec.http.tls.issuerRef): no cert-manager runs, so the test writes
the Certificate's Secret as cert-manager does (kubernetes.io/tls with tls.crt, tls.key and ca.crt) into the
pod's TLS mount. The registry serves that certificate; a renewal (cert-manager rewrites the Secret in place, the
kubelet swaps the mount) is served by the same pod with 0 failed pulls over TLS, on 2.8 and 3.1.1."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

import pytest

from support.common.polling import wait_for
from support.registries.pod import filesystem_spec, on_distribution, registry_object
from support.registries.registry import make_oci_image, push_image, registry_binaries
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.services.certs import self_signed
from support.traffic.pull_loop import PullLoop

from .test_e2e_tls import served_name

pytestmark = pytest.mark.e2e

ISSUER = {"name": "cluster-ca", "kind": "ClusterIssuer"}


class TlsPullLoop(PullLoop):
    """support.traffic.pull_loop's counting, over HTTPS: the test's certificates are self-signed, and which one is
    served
    is checked apart (served_name)."""

    context = ssl._create_unverified_context()  # noqa: SLF001

    def _open(self):
        try:
            return urllib.request.urlopen(urllib.request.Request(self.url), timeout=30, context=self.context)
        except urllib.error.HTTPError as exc:
            return exc


def cert_manager_secret(name: str) -> dict[str, bytes]:
    cert, key = self_signed(name)
    return {"tls.crt": cert, "tls.key": key, "ca.crt": cert}  # a self-signed issuer's CA is the certificate


@pytest.mark.parametrize("dist", registry_binaries())
def test_a_renewed_certificate_is_served_hot_with_no_failed_pull(pod, dist, tmp_path):
    write_secret_dir(pod.mounts / "tls", cert_manager_secret("issued"))
    pod.tls = True
    spec = filesystem_spec(pod.port, http={"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s",
                                           "tls": {"issuerRef": ISSUER}})
    pod.write_registry_file(registry_object(on_distribution(spec, dist[0])))
    pod.start_agent()
    pod.start_supervisor()
    pod.wait_serving()
    assert served_name(pod) == "issued"
    image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
    push_image(image, pod.host, "demo/app:1")
    layer = image.layer_digests[0]
    pid = pod.registry_pid()
    loop = TlsPullLoop(f"{pod.url}/v2/demo/app/blobs/{layer}", image.blobs[layer])
    loop.start()
    try:
        wait_for(lambda: loop.stats.successes >= 5, what="the pull loop to get going")
        swap_secret_dir(pod.mounts / "tls", cert_manager_secret("renewed"))
        wait_for(lambda: served_name(pod) == "renewed", what="the renewed certificate to be served")
        wait_for(lambda: pod.actions("restarted"), what="the agent to record the restart")
        after = loop.stats.successes
        wait_for(lambda: loop.stats.successes >= after + 10, what="pulls after the renewal")
    finally:
        stats = loop.stop()
    assert stats.failures == [], stats.failures[:5]
    assert pod.metric("reloads_total") == 1
    assert pod.registry_pid() != pid  # the registry process restarted in place: the pod (agent) is the same one
    print(f"\n{dist[0]}: {stats.requests} pulls over TLS across the renewal, {len(stats.failures)} failed, "
          f"{stats.refused_retries} refused and {stats.reset_retries} reset (retried)")
