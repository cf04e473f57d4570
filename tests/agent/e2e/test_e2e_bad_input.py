"""Bad input never breaks the running registry.

Each case: a registry pod serving through the API (kmock), then a bad input (malformed COSI Secret, unreadable
file, invalid CR edit, a config the registry refuses). The registry keeps serving on the last good config, the
error shows in status.agents.<pod>.error and in the metrics, and fixing the input recovers by itself. No
planted secret value appears in the agent's log, the status or the Events.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat

import pytest

from support.clouds.s3 import REGION, running_moto
from support.common.polling import wait_for
from support.common.ports import free_port
from support.registries.pod import filesystem_spec, registry_object
from support.registries.secretdir import swap_secret_dir, write_secret_dir

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

REGISTRIES = "berth.dev/v1alpha1/registries"
HTTP_SECRET = "PLANTED-http-secret-3f9a7c1e"


def _record(kube_api) -> dict:
    obj = kube_api.get(REGISTRIES, "default", "reg") or {}
    return ((obj.get("status") or {}).get("agents") or {}).get("pod-0") or {}


def _error(kube_api) -> str:
    return _record(kube_api).get("error") or ""


def _assert_no_secret_leaked(pod, kube_api, secrets: list[str]) -> None:
    events = json.dumps(kube_api.list("v1/events", "default"))
    status = json.dumps((kube_api.get(REGISTRIES, "default", "reg") or {}).get("status"))
    metrics = pod.metrics_text()
    for value in secrets:
        for where, text in (("agent log", pod.agent_log_text()), ("events", events), ("status", status),
                            ("metrics", metrics)):
            assert value not in text, f"a secret value leaked into the {where}"


def _start(pod, kube_api, spec) -> None:
    kube_api.create(registry_object(spec))
    pod.start_agent(registry="default/reg", kube_host=kube_api.url)
    pod.start_supervisor()
    pod.wait_serving()
    wait_for(lambda: _record(kube_api).get("configHash"), what="the first config in status")


def _assert_kept_serving(pod, pid: int) -> None:
    assert pod.serving()
    assert pod.registry_pid() == pid, "the registry was restarted on bad input"


@pytest.fixture
def http_secret_pod(pod, kube_api):
    write_secret_dir(pod.mounts / "http-secret", {"secret": HTTP_SECRET})
    _start(pod, kube_api, filesystem_spec(pod.port, http={
        "addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s", "secret": {"name": "http", "field": "secret"}}))
    return pod


def test_an_invalid_cr_edit_keeps_the_last_good_config(http_secret_pod, kube_api):
    pod = http_secret_pod
    pid, good_hash = pod.registry_pid(), _record(kube_api)["configHash"]

    # kmock does not validate against the CRD schema, so the bad value reaches the agent as a real API would
    # let an older CRD or a direct etcd write through.
    kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"http": {"drainTimeout": "soon"}}})
    wait_for(lambda: "spec.http.drainTimeout" in _error(kube_api), what="the error in status")
    _assert_kept_serving(pod, pid)
    assert _record(kube_api)["configHash"] == good_hash
    assert pod.metric("render_errors_total", 'source="registry"') >= 1
    assert any(e.get("reason") == "ConfigRejected" for e in kube_api.list("v1/events", "default"))

    kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"http": {"drainTimeout": "3s"}}})
    wait_for(lambda: not _error(kube_api) and _record(kube_api)["configHash"] != good_hash,
             what="recovery after the fix")
    assert "draintimeout: 3s" in (pod.config_dir / "config.yml").read_text()
    assert pod.serving()
    _assert_no_secret_leaked(pod, kube_api, [HTTP_SECRET])


def test_an_unreadable_mounted_file_keeps_the_last_good_config(http_secret_pod, kube_api):
    pod = http_secret_pod
    pid = pod.registry_pid()
    secret_dir = pod.mounts / "http-secret"

    # Root reads any file whatever its mode, so make the key unreadable the other way: a directory. Swapped in
    # as the kubelet swaps, by renaming ..data to a new payload dir.
    payload = secret_dir / "..broken"
    (payload / "secret").mkdir(parents=True)
    os.symlink("..broken", secret_dir / "..data_tmp")
    old = os.readlink(secret_dir / "..data")
    os.rename(secret_dir / "..data_tmp", secret_dir / "..data")
    shutil.rmtree(secret_dir / old)

    wait_for(lambda: "http-secret/secret" in _error(kube_api),
             what=lambda: f"the error in status\n{pod.agent_log_text()}")
    _assert_kept_serving(pod, pid)
    assert pod.metric("render_errors_total", 'source="http-secret"') >= 1

    fixed = secret_dir / "..fixed"
    fixed.mkdir()
    (fixed / "secret").write_text(HTTP_SECRET + "-2")
    os.symlink("..fixed", secret_dir / "..data_tmp")
    os.rename(secret_dir / "..data_tmp", secret_dir / "..data")
    wait_for(lambda: not _error(kube_api) and pod.actions("restarted"), what="recovery after the fix")
    assert pod.serving()
    _assert_no_secret_leaked(pod, kube_api, [HTTP_SECRET, HTTP_SECRET + "-2"])


def test_a_config_the_registry_refuses_is_rolled_back(http_secret_pod, kube_api):
    pod = http_secret_pod
    good_hash = _record(kube_api)["configHash"]
    # An address taken by someone else. The same port on another loopback address: the pre-flight leaves an
    # unchanged port to the restart (the running registry holds it), so only the registry can refuse this.
    # A new port in use is refused by the pre-flight instead (test_e2e_preflight.py).
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.2", pod.port))
        squatter.listen()
        kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"http": {"addr": f"127.0.0.2:{pod.port}"}}})
        wait_for(lambda: pod.actions("rolled back"), timeout=40, what=lambda: f"a rollback\n{pod.agent_log_text()}")
        wait_for(pod.serving, what="the registry back on the last good config")
        wait_for(lambda: "not applied" in _error(kube_api), what="the failure in status")
        assert _record(kube_api)["configHash"] == good_hash
        assert pod.metric("rollbacks_total") == 1
        assert pod.metric("reload_failures_total", 'reason="restart"') == 1
        assert f"127.0.0.1:{pod.port}" in (pod.config_dir / "config.yml").read_text()
        assert any(e.get("reason") == "RolledBack" for e in kube_api.list("v1/events", "default"))

    new_port = free_port()
    kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"http": {"addr": f"127.0.0.1:{new_port}"}}})
    wait_for(lambda: not _error(kube_api) and _record(kube_api)["configHash"] != good_hash,
             what="recovery on a free port")
    pod.port = new_port
    assert pod.serving()
    _assert_no_secret_leaked(pod, kube_api, [HTTP_SECRET])


def test_a_malformed_cosi_secret_keeps_the_last_good_config(pod, kube_api, tmp_path):
    with running_moto(tmp_path / "moto") as moto:
        key = moto.create_s3_user("registry", bucket="registry-data")
        moto.enforce_iam()

        def bucket_info(access_key) -> dict[str, str]:
            return {"BucketInfo": json.dumps({"metadata": {"name": "bc-1"}, "spec": {
                "bucketName": "registry-data", "authenticationType": "Key", "protocols": ["S3"],
                "secretS3": {"endpoint": moto.endpoint, "region": REGION, "accessKeyID": access_key.access_key_id,
                             "accessSecretKey": access_key.secret_access_key}}})}

        write_secret_dir(pod.mounts / "cosi", bucket_info(key))
        _start(pod, kube_api, {
            "image": "docker.io/library/registry:2", "distribution": "2",
            "config": {"storage": {"objectStorage": {"bucketClaim": "data", "bucketAccess": "access"},
                                   "redirect": {"disabled": True}}},
            "http": {"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s"}})
        pid = pod.registry_pid()

        # Truncated JSON that still holds the secret key: the error must name the file, not quote it.
        broken = bucket_info(key)["BucketInfo"][:-20]
        swap_secret_dir(pod.mounts / "cosi", {"BucketInfo": broken})
        wait_for(lambda: "cosi/BucketInfo" in _error(kube_api),
                 what=lambda: f"the error in status\n{pod.agent_log_text()}")
        _assert_kept_serving(pod, pid)
        assert pod.metric("render_errors_total", 'source="cosi"') >= 1

        # A key the bucket refuses (deleted) is caught by the pre-flight check: no restart onto it.
        dead = moto.create_access_key("registry")
        moto.delete_access_key("registry", dead.access_key_id)
        swap_secret_dir(pod.mounts / "cosi", bucket_info(dead))
        wait_for(lambda: "refused the new credentials" in _error(kube_api), what="the pre-flight error in status")
        _assert_kept_serving(pod, pid)
        assert pod.metric("reload_failures_total", 'reason="preflight"') >= 1

        fresh = moto.create_access_key("registry")
        swap_secret_dir(pod.mounts / "cosi", bucket_info(fresh))
        wait_for(lambda: not _error(kube_api) and pod.actions("restarted"), what="recovery with a good key")
        assert pod.serving()
        _assert_no_secret_leaked(pod, kube_api, [k.secret_access_key for k in (key, dead, fresh)] +
                                 [k.access_key_id for k in (key, dead, fresh)])


# ---- hostile mounts: every key confined to its volume, a regular file, bounded ----------------------

PLANTED = "PLANTED-by-an-attacker-5c2e91"


def test_hostile_mounts_never_reach_the_registry(pod, kube_api, tmp_path):
    """One pod reading all five Secret volumes (COSI on moto, htpasswd, an http secret, a real redis-server, TLS).
    Each attack is swapped into one volume as the kubelet swaps: a link out of the volume to a file holding a
    value that would render, a FIFO, a link to a device, a device node, a key over its limit, 200k-deep JSON.
    Each time the registry keeps serving the last good config with the same pid, the status error names the
    volume and key, /livez stays green (nothing is stuck), and putting the good payload back clears the error.
    A CR edit made while a FIFO sits in a volume is applied once the FIFO is gone. Nothing planted and no secret
    appears in the log, status, Events or metrics."""
    from berth_agent.mounted.secret_volume import DOCUMENT_LIMIT, HTPASSWD_LIMIT, SCALAR_LIMIT
    from support.registries.mountkit import htpasswd_entry
    from support.registries.secretdir import swap_payload
    from support.services.certs import self_signed_pair
    from support.services.redisserver import running_redis

    with running_moto(tmp_path / "moto") as moto, running_redis(tmp_path / "redis") as redis:
        key = moto.create_s3_user("registry", bucket="registry-data")
        moto.enforce_iam()
        cert, tls_key = self_signed_pair()
        password = "alice-password-" + PLANTED[-6:]
        bucket_info = {"spec": {"bucketName": "registry-data", "authenticationType": "Key", "secretS3": {
            "endpoint": moto.endpoint, "region": REGION, "accessKeyID": key.access_key_id,
            "accessSecretKey": key.secret_access_key}}}
        good = {
            "cosi": {"BucketInfo": json.dumps(bucket_info).encode()},
            "htpasswd": {"htpasswd": htpasswd_entry("alice", password) + b"\n"},
            "http-secret": {"secret": HTTP_SECRET.encode()},
            "redis": {"url": redis.url().encode() + b"\n"},
            "tls": {"tls.crt": cert, "tls.key": tls_key},
        }
        for source, data in good.items():
            write_secret_dir(pod.mounts / source, data)
        pod.tls = True
        _start(pod, kube_api, {
            "image": "docker.io/library/registry:2", "distribution": "2",
            "config": {"storage": {"objectStorage": {"bucketClaim": "data", "bucketAccess": "access"},
                                   "redirect": {"disabled": True}, "cache": {"blobdescriptor": "redis"},
                                   "auth": {"htpasswd": {"secret": {"name": "users", "field": "htpasswd"}}}}},
            "http": {"addr": f"127.0.0.1:{pod.port}", "drainTimeout": "5s", "tls": {"secretName": "tls"},
                     "secret": {"name": "http", "field": "secret"}},
            "redis": {"secret": {"name": "redis", "field": "url"}}})
        pid, good_hash = pod.registry_pid(), _record(kube_api)["configHash"]

        # Values that would render if read: the planted file outside every volume holds them.
        outside = tmp_path / "outside"
        outside.mkdir()
        planted = {
            ("cosi", "BucketInfo"): json.dumps({"spec": {**bucket_info["spec"], "secretS3": {
                **bucket_info["spec"]["secretS3"], "accessSecretKey": PLANTED}}}).encode(),
            ("htpasswd", "htpasswd"): htpasswd_entry(PLANTED, "x") + b"\n",
            ("http-secret", "secret"): PLANTED.encode(),
            ("redis", "url"): f"redis://:{PLANTED}@127.0.0.1:{redis.port}/0".encode(),
            ("tls", "tls.key"): tls_key.replace(b"-----\n", b"-----\n" + PLANTED.encode() + b"\n", 1),
        }
        for (source, name), value in planted.items():
            (outside / f"{source}-{name}").write_bytes(value)

        def link_out(source, name):
            return lambda path: os.symlink(outside / f"{source}-{name}", path)

        def padded(data: bytes, limit: int, pad: bytes) -> bytes:  # still a valid value, one byte too long
            head, tail = (data[:-1], data[-1:]) if data.endswith(b"}") else (data, b"")
            return head + pad * (limit + 1 - len(head) - len(tail)) + tail

        def mknod_zero(path):
            os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 5))

        attacks = [(f"escape {s}/{n}", s, n, link_out(s, n), "leaves the Secret volume") for s, n in planted]
        attacks += [
            ("device link", "http-secret", "secret", lambda path: os.symlink("/dev/urandom", path),
             "leaves the Secret volume"),
            ("oversize cosi/BucketInfo", "cosi", "BucketInfo",
             lambda path: path.write_bytes(padded(good["cosi"]["BucketInfo"], DOCUMENT_LIMIT, b" ")),
             "larger than 1 MiB"),
            ("oversize htpasswd", "htpasswd", "htpasswd",
             lambda path: path.write_bytes(padded(good["htpasswd"]["htpasswd"], HTPASSWD_LIMIT, b"\n")),
             "larger than 4 MiB"),
            ("oversize http-secret", "http-secret", "secret",
             lambda path: path.write_bytes(b"s" * (SCALAR_LIMIT + 1)), "larger than 64 KiB"),
            ("oversize redis/url", "redis", "url",
             lambda path: path.write_bytes(padded(good["redis"]["url"], SCALAR_LIMIT, b" ")), "larger than 64 KiB"),
            ("oversize tls.crt", "tls", "tls.crt",
             lambda path: path.write_bytes(padded(cert, DOCUMENT_LIMIT, b"\n")), "larger than 1 MiB"),
            ("deep JSON", "cosi", "BucketInfo",
             lambda path: path.write_text("[" * 200_000 + "]" * 200_000), "levels deep"),
        ]
        if os.geteuid() == 0:  # mknod needs CAP_MKNOD
            attacks.append(("device node", "tls", "tls.crt", mknod_zero, "is a character device"))

        def swap(source: str, name: str | None = None, make=None) -> None:
            def fill(payload):
                for key_name, value in good[source].items():
                    if key_name == name:
                        make(payload / key_name)
                    else:
                        (payload / key_name).write_bytes(value)

            swap_payload(pod.mounts / source, list(good[source]), fill)

        for title, source, name, make, message in attacks:
            errors_before = pod.metric("render_errors_total", f'source="{source}"')
            swap(source, name, make)
            wait_for(lambda where=f"{source}/{name}: ", message=message:
                     where in _error(kube_api) and message in _error(kube_api),
                     what=lambda title=title: f"{title}: the error in status\n{_error(kube_api)}\n"
                                              f"{pod.agent_log_text()[-3000:]}")
            _assert_kept_serving(pod, pid)
            assert _record(kube_api)["configHash"] == good_hash, title
            assert pod.health("/livez") == 200, title
            assert pod.metric("render_errors_total", f'source="{source}"') > errors_before, title
            swap(source)  # the good payload back
            wait_for(lambda: not _error(kube_api),
                     what=lambda title=title: f"{title}: recovery\n{pod.agent_log_text()[-3000:]}")
            _assert_kept_serving(pod, pid)

        # A FIFO used to block the pipeline thread in open(2): a CR edit made meanwhile was never applied.
        swap("redis", "url", os.mkfifo)
        wait_for(lambda: "redis/url: is a FIFO" in _error(kube_api), what="the FIFO error in status")
        kube_api.patch(REGISTRIES, "default", "reg", {"spec": {"config": {"log": {"level": "debug"}}}})
        wait_for(lambda: pod.metric("renders_total") > 0 and "redis/url: is a FIFO" in _error(kube_api),
                 what="the edit rendered against the FIFO")
        assert pod.health("/livez") == 200
        _assert_kept_serving(pod, pid)
        swap("redis")
        wait_for(lambda: not _error(kube_api) and "level: debug" in (pod.config_dir / "config.yml").read_text(),
                 what=lambda: f"the edit applied once the FIFO is gone\n{pod.agent_log_text()[-3000:]}")
        wait_for(pod.serving, what="the registry on the edited config")

        messages = _error(kube_api) + pod.agent_log_text() + json.dumps(kube_api.list("v1/events", "default"))
        assert "RecursionError" not in messages and "internal error" not in messages
        _assert_no_secret_leaked(pod, kube_api, [PLANTED, password, HTTP_SECRET, key.secret_access_key,
                                                 redis.password, tls_key.decode().splitlines()[1]])


def test_a_registry_file_is_as_strict_as_the_api_server(pod):
    """--registry-file: what the API server would refuse (a coerced type, another kind or apiVersion) and what
    cannot be read at all (an empty file) keep the last good config serving, name the problem, and each counts
    in render_errors_total{source="registry"}; a good file then applies."""
    good = registry_object(filesystem_spec(pod.port))
    pod.write_registry_file(good)
    pod.start_agent()
    pod.start_supervisor()
    pod.wait_serving()
    pid = pod.registry_pid()

    def failed_with(part: str) -> bool:
        return any(part in line.get("error", "") for line in pod.actions("failed"))

    coerced = json.loads(json.dumps(good))
    coerced["spec"]["config"]["storage"]["maintenance"] = {"readonly": {"enabled": "yes"}}
    deployment = {**good, "kind": "Deployment"}
    future = {**good, "apiVersion": "berth.dev/v9"}
    for document, part in ((coerced, "spec.config.storage.maintenance.readonly.enabled: Input should be a valid "
                                     "boolean"),
                           (deployment, "kind: must be Registry"),
                           (future, "apiVersion: must be berth.dev/v1alpha1")):
        pod.write_registry_file(document)
        wait_for(lambda part=part: failed_with(part), what=lambda part=part: f"{part}\n{pod.agent_log_text()[-2000:]}")
        _assert_kept_serving(pod, pid)
    errors = pod.metric("render_errors_total", 'source="registry"')
    assert errors >= 3

    pod.registry_file.write_text("")
    wait_for(lambda: failed_with("is empty"), what="the empty file reported")
    wait_for(lambda: pod.metric("render_errors_total", 'source="registry"') > errors, what="the empty file counted")
    _assert_kept_serving(pod, pid)
    assert "readonly:\n      enabled: false" in (pod.config_dir / "config.yml").read_text()

    fixed = json.loads(json.dumps(good))
    fixed["spec"]["config"]["storage"]["maintenance"] = {"readonly": {"enabled": True}}
    pod.write_registry_file(fixed)
    wait_for(lambda: "readonly:\n      enabled: true" in (pod.config_dir / "config.yml").read_text(),
             what=lambda: f"the good file applied\n{pod.agent_log_text()[-2000:]}")
    wait_for(pod.serving, what="the registry on the new config")


def test_a_wrong_redis_password_is_refused_by_the_preflight_in_status_and_events(pod, kube_api, redis_server):
    """Through the API: the pre-flight's refusal is on status.agents.<pod>.error and a ConfigRejected Event, and
    neither redis password is in the log, the status, the Events or the metrics."""
    write_secret_dir(pod.mounts / "redis", {"url": redis_server.url()})
    spec = filesystem_spec(pod.port, redis={"secret": {"name": "redis", "field": "url"}})
    spec["config"]["storage"]["cache"] = {"blobdescriptor": "redis"}
    _start(pod, kube_api, spec)
    pid, good_hash = pod.registry_pid(), _record(kube_api)["configHash"]

    wrong = "PLANTED-wrong-redis-password"
    swap_secret_dir(pod.mounts / "redis", {"url": f"redis://:{wrong}@127.0.0.1:{redis_server.port}/0"})
    wait_for(lambda: "spec.redis" in _error(kube_api),
             what=lambda: f"the pre-flight error in status\n{pod.agent_log_text()}")
    assert "password in the redis URL is refused" in _error(kube_api)
    wait_for(lambda: any(e.get("reason") == "ConfigRejected" and "spec.redis" in e.get("message", "")
                         for e in kube_api.list("v1/events", "default")), what="the ConfigRejected Event")
    _assert_kept_serving(pod, pid)
    assert _record(kube_api)["configHash"] == good_hash
    assert pod.metric("reload_failures_total", 'reason="preflight"') >= 1
    _assert_no_secret_leaked(pod, kube_api, [wrong, redis_server.password])
