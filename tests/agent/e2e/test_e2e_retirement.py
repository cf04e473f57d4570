"""An old registry's retirement. No request is served on an old configuration later than drainTimeout
after a reload, kept-alive clients included, so an old key revoked exactly when docs/guide/rotation.md says (the
pod reports the new config, then drainTimeout) fails no pull.

Real agent, berth-supervise and registry (2.8.2 and 3.1.1), S3 on moto with IAM enforced, the key in storage.s3's
own Secret dir or in a COSI (v1alpha2) Secret dir. Two pull loops run throughout: one on a kept-alive connection
(a requests.Session, as containerd and Go clients keep theirs) and one opening a new connection per request. Each
retries, and counts, what Go's transport retries: a GET on a reused connection the old registry closed before any
response byte (its drain closes idle connections), and a refused connection (2.8 with one replica); a pull that
got an answer never is.
"""

from __future__ import annotations

import time

import pytest

from support.clouds.s3 import running_moto
from support.common.polling import wait_for
from support.registries.pod import on_distribution, registry_object
from support.registries.registry import make_oci_image, push_image, registry_binaries
from support.registries.secretdir import swap_secret_dir, write_secret_dir
from support.traffic.pull_loop import KeptAlivePullLoop, PullLoop

from .test_e2e_rotation import BUCKET, cosi_secret, s3_spec, volume

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

DRAIN_SECONDS = 2.0


@pytest.mark.parametrize("dist", registry_binaries())
@pytest.mark.parametrize("fmt", ["s3", "v1alpha2"])  # storage.s3's own Secret, and a COSI key
def test_old_keys_revoked_at_drain_timeout_fail_no_kept_alive_pull(pod, tmp_path, dist, fmt):
    rotations = 5
    with running_moto(tmp_path / "moto") as moto:
        key = moto.create_s3_user("registry", bucket=BUCKET)
        moto.enforce_iam()
        write_secret_dir(pod.mounts / volume(fmt), cosi_secret(fmt, moto.endpoint, key))
        spec = on_distribution(s3_spec(pod.port, fmt, moto.endpoint), dist[0])
        spec["http"]["drainTimeout"] = f"{DRAIN_SECONDS:g}s"
        pod.write_registry_file(registry_object(spec))
        pod.start_agent()
        pod.start_supervisor()
        pod.wait_serving()
        image = make_oci_image(tmp_path / "image", layer_size=64 * 1024)
        push_image(image, pod.host, "demo/app:1")
        layer = image.layer_digests[0]
        url = f"{pod.url}/v2/demo/app/blobs/{layer}"
        kept, fresh = KeptAlivePullLoop(url, image.blobs[layer]), PullLoop(url, image.blobs[layer])
        kept.start()
        fresh.start()
        wait_for(lambda: kept.stats.successes >= 5 and fresh.stats.successes >= 5, what="the pull loops")
        lingered = []
        for turn in range(1, rotations + 1):
            new = moto.create_access_key("registry")
            swap_secret_dir(pod.mounts / volume(fmt), cosi_secret(fmt, moto.endpoint, new))
            wait_for(lambda turn=turn: len(pod.actions("restarted")) >= turn, timeout=60,
                     what=lambda turn=turn: f"restart {turn}\n{pod.agent_log_text()[-3000:]}")
            # docs/guide/rotation.md: the pod reports the new config, and drainTimeout has passed. Not a moment
            # later: an old registry still serving a kept-alive client would fail its pulls from here on.
            time.sleep(DRAIN_SECONDS)
            lingered.append(len(pod.supervisor.registries()) - 1)
            moto.delete_access_key("registry", key.access_key_id)
            key = new
            after = kept.stats.successes
            wait_for(lambda after=after: kept.stats.successes >= after + 20, what="kept-alive pulls on the new key")
        kept_stats, fresh_stats = kept.stop(), fresh.stop()
        print(f"{dist[0]} {fmt}: {rotations} rotations, old key revoked {DRAIN_SECONDS:g}s after each was applied: "
              f"kept-alive {kept_stats.requests} pulls ({kept_stats.reset_retries} retried after a close before "
              f"any response, {kept_stats.refused_retries} refused), failures {kept_stats.failures[:5]}; "
              f"new connections {fresh_stats.requests} pulls, failures {fresh_stats.failures[:5]}; "
              f"old registries still running at "
              f"the revoke {lingered}")
        assert lingered == [0] * rotations
        assert kept_stats.failures == [] and fresh_stats.failures == []
        assert pod.registry_starts() == rotations + 1
