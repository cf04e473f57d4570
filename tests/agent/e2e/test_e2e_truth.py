"""The agent tells the truth and recovers by itself: faults an adversarial user found.

Each case runs what users run outside Kubernetes: `berth-agent run --registry-file`, the real berth-supervise
and Debian's registry on loopback (3.1.1 too where the held socket changes the case), and kills
the real processes. In file mode the agent's `failed` / `rolled back` / `registry problem` lines are what
status.agents.<pod>.error and the Events say (the reporter's own lines are at DEBUG). No planted secret value
may appear in the agent's log, the registry-output file or the metrics.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from datetime import datetime

import pytest

from support.common.polling import wait_for
from support.registries.pod import filesystem_spec, on_distribution
from support.registries.readyz import ReadyzProbe
from support.registries.registry import registry_binaries
from support.registries.secretdir import write_secret_dir

pytestmark = pytest.mark.e2e  # real agents, supervisors and registries: not in the quick run

HTTP_SECRET = "PLANTED-http-secret-9c41d7e2ab"


def _spec(pod, host: str = "127.0.0.1", **config) -> dict:
    return filesystem_spec(pod.port, config={"log": {"level": "info"},
                                             "storage": {"filesystem": {"persistentVolumeClaim": "data"}}, **config},
                           http={"addr": f"{host}:{pod.port}", "drainTimeout": "5s",
                                 "secret": {"name": "http", "field": "secret"}})


def _start(pod, spec=None) -> None:
    write_secret_dir(pod.mounts / "http-secret", {"secret": HTTP_SECRET})
    pod.write_registry_file(spec or _spec(pod))
    pod.start_agent()
    pod.start_supervisor()
    pod.wait_serving()
    wait_for(lambda: pod.actions("written"), what=lambda: f"the first config applied\n{pod.agent_log_text()}")


def _wall(line: dict) -> float:
    return datetime.fromisoformat(line["time"]).timestamp()


def _errors(pod) -> list[str]:
    return [line.get("error", "") for line in pod.actions("failed")]


def _assert_no_secret(pod) -> None:
    for where, text in (("agent log", pod.agent_log_text()), ("metrics", pod.metrics_text()),
                        ("agent messages", repr(_errors(pod)))):
        assert HTTP_SECRET not in text, f"the http secret leaked into the {where}"


def _squat(port: int, host: str = "127.0.0.2") -> socket.socket:
    """The same port on another loopback address: only the registry can refuse it (the pre-flight leaves an
    unchanged port to the restart, test_e2e_bad_input.py)."""
    squatter = socket.socket()
    squatter.bind((host, port))
    squatter.listen()
    return squatter


def test_a_restarted_agent_rolls_back_a_config_on_disk_that_is_not_served(pod):
    """The agent is killed right after writing a config the registry refuses; the agent started
    again must not adopt it (the supervisor crash-loops on it) but roll back to the last config verified good,
    which a marker on the config volume names."""
    _start(pod)
    good = (pod.config_dir / "config.yml").read_bytes()
    squatter = _squat(pod.port)
    try:
        pod.write_registry_file(_spec(pod, host="127.0.0.2"))
        # The registry restarted onto it and failed at start (the supervisor notes each exit): kill the agent
        # now, before it could see the failure through and roll back.
        wait_for(lambda: "exited with status 1" in pod.supervisor.log(), timeout=30, interval=0.005,
                 what=lambda: f"the registry failing on the refused config\n{pod.agent_log_text()}")
        pod.agent.kill()
        pod.agent.wait(10)
        assert not pod.actions("rolled back")

        pod.start_agent()
        line = wait_for(lambda: pod.actions("rolled back"), timeout=60,
                        what=lambda: f"a rollback by the new agent\n{pod.agent_log_text()}")[0]
        wait_for(pod.serving, what="the registry serving the last good config again")
        assert (pod.config_dir / "config.yml").read_bytes() == good
        assert not pod.actions("config on disk is current") or all(
            current.get("config_hash") != line["failed_hash"] for current in pod.actions("config on disk is current"))
        assert line["failed_hash"] != line["restored_hash"]
        assert line["rollback_ok"] is True
        assert "address already in use" in line["error"], line["error"]
        assert any("address already in use" in e for e in _errors(pod))
        assert pod.metric("rollbacks_total") >= 1
        wait_for(lambda: pod.health("/readyz") == 200, what="/readyz once the good config serves")
    finally:
        squatter.close()
    _assert_no_secret(pod)


@pytest.mark.parametrize("dist", registry_binaries())
def test_a_missing_supervisor_is_reported_and_its_return_applies_the_wanted_config(pod, dist):
    """Kill -9 of berth-supervise, the registry container's main process. The runtime kills the
    rest of the container with it (support.registries.supervisor does as it does), so nothing serves until the kubelet
    starts the container again. The agent reports it (status, Event, metric, /readyz 503), restarts nothing while
    it is gone, and applies the edit made meanwhile once a supervisor is back (on 3.x on a socket created
    again), without an agent restart."""
    major = dist[0]
    _start(pod, on_distribution(_spec(pod), major))
    wait_for(lambda: pod.health("/readyz") == 200, what="/readyz 200 before the kill")
    with ReadyzProbe(pod.health_port) as probe:  # asked every 10 ms throughout
        pod.supervisor.process.kill()
        pod.supervisor.process.wait(5)
        dead = time.time()  # reaped: from here on nothing serves (the harness ends the container's rest)
        wait_for(lambda: pod.metric("supervisor_up") == 0 and pod.actions("registry problem"),
                 what=lambda: f"the missing supervisor reported\n{pod.agent_log_text()}")
        assert "supervisor" in pod.actions("registry problem")[0]["error"]
        wait_for(lambda: not pod.serving(), what="the registry container gone")
        wait_for(lambda: pod.health("/readyz") == 503, what="/readyz 503 while nothing serves")

        pod.write_registry_file(on_distribution(_spec(pod, log={"level": "warn"}), major))
        wait_for(lambda: any("supervisor" in e and "not running" in e for e in _errors(pod)),
                 what=lambda: f"the edit refused while the supervisor is gone\n{pod.agent_log_text()}")
        assert not pod.actions("rolled back") and not pod.actions("restarted")
        assert b"level: warn" not in (pod.config_dir / "config.yml").read_bytes()
        # The window must hold a few answers to mean anything: at a load of 17 the agent answered only 2 questions
        # between the kill and this point, so the supervisor stays away until it has answered 3 (still no 200).
        wait_for(lambda: len(probe.answers_after(dead)) >= 3, timeout=30,
                 what=lambda: f"3 /readyz answers since the kill: {probe.answers_after(dead - 1)}")
        back = time.time()
        pod.start_supervisor()  # the kubelet starts the registry container again
    # Not one 200 once the supervisor was gone (nor once the agent logged it) until a supervisor was started again.
    logged = min(_wall(line) for line in pod.actions("registry problem") + pod.actions("failed"))
    asked = probe.answers_after(dead, back)
    # Too few answers means the probe was not answered for most of the window: say how long each question took.
    sent = [t for t, _status in probe.answers]
    gaps = sorted((b - a for a, b in zip(sent, sent[1:], strict=False) if b > dead - 1), reverse=True)[:3]
    assert len(asked) >= 3 and all(status != 200 for _sent, status in asked), \
        ([a for a in asked if a[1] == 200][:5], f"{len(asked)} answers in {back - dead:.3f}s; longest gaps "
         f"between questions {[round(g, 3) for g in gaps]}; around it {probe.answers_after(dead - 1, back + 1)}")
    assert all(status != 200 for _sent, status in probe.answers_after(logged, back))
    wait_for(lambda: pod.actions("restarted"), timeout=60,
             what=lambda: f"the wanted config applied once the supervisor is back\n{pod.agent_log_text()}")
    wait_for(pod.serving, what="the registry serving the new config")
    assert b"level: warn" in (pod.config_dir / "config.yml").read_bytes()
    if major == "3":
        assert "holding the registry's listening socket" in pod.supervisor.log()
    wait_for(lambda: pod.metric("supervisor_up") == 1, what="supervisor_up back to 1")
    wait_for(lambda: pod.health("/readyz") == 200, what="/readyz")
    _assert_no_secret(pod)


def test_a_refused_config_is_retried_until_its_cause_clears(pod):
    """The registry refuses a config (its address is held); the failure names the
    registry's own error, the rollback names both hashes; once the port is free, the retry on the backoff
    applies the config with no one touching anything."""
    _start(pod)
    squatter = _squat(pod.port)
    try:
        pod.write_registry_file(_spec(pod, host="127.0.0.2"))
        line = wait_for(lambda: pod.actions("rolled back"), timeout=60,
                        what=lambda: f"a rollback\n{pod.agent_log_text()}")[0]
        assert line["failed_hash"] != line["restored_hash"]
        assert "address already in use" in line["error"], line["error"]
        wait_for(lambda: any("address already in use" in e for e in _errors(pod)), what="the error in status")
        wait_for(pod.serving, what="the last good config serving")
    finally:
        squatter.close()
    pod.listen_host = "127.0.0.2"
    wait_for(lambda: pod.actions("restarted"), timeout=60,
             what=lambda: f"the refused config applied by itself once the port is free\n{pod.agent_log_text()}")
    wait_for(pod.serving, what="the registry on 127.0.0.2")
    assert b"127.0.0.2" in (pod.config_dir / "config.yml").read_bytes()
    _assert_no_secret(pod)


def test_a_killed_registry_is_counted_and_logged(pod):
    """Kill -9 of the registry. The supervisor restarts it at once; the agent counts the exit in
    berth_agent_registry_exits_total{reason="signal"} and logs it."""
    _start(pod)
    pid = pod.registry_pid()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: pod.metric("registry_exits_total", 'reason="signal"') == 1,
             what=lambda: f"the exit counted\n{pod.agent_log_text()}")
    exited = pod.actions("registry exited")
    assert exited and exited[0]["pid"] == pid and exited[0]["reason"] == "signal"
    wait_for(pod.serving, what="the registry restarted by the supervisor")
    wait_for(lambda: pod.health("/readyz") == 200, what="/readyz")
    _assert_no_secret(pod)


def test_an_agent_restarted_while_the_registry_is_invalid_keeps_a_serving_pod_ready(pod):
    """The Registry is invalid when the agent starts again; the registry serves the config on disk,
    so /startupz and /readyz answer 200 and the error is reported."""
    _start(pod)
    assert pod.stop_agent() == 0
    pod.registry_file.write_text("spec: [this is not a Registry\n")
    pod.start_agent()
    wait_for(lambda: _errors(pod), what=lambda: f"the invalid Registry reported\n{pod.agent_log_text()}")
    wait_for(lambda: pod.health("/readyz") == 200, what="/readyz 200 while the registry serves")
    assert pod.health("/startupz") == 200
    assert pod.serving()
    # And /readyz tells the truth the other way: with nothing serving, it is 503.
    pod.supervisor.stop(signal.SIGKILL)
    for process in pod.supervisor.registries() if pod.supervisor.alive() else []:
        os.kill(process.pid, signal.SIGKILL)
    wait_for(lambda: not pod.serving(), what="the registry gone")
    wait_for(lambda: pod.health("/readyz") == 503, what="/readyz 503 with nothing serving")
    _assert_no_secret(pod)


def test_the_first_config_counts_as_applied_only_once_a_registry_answers_on_it(pod):
    """Never claim applied unless seen answering, for the very first config: with no registry
    container started yet the config is written (/startupz 200, so the kubelet may start it) but not reported
    applied, config_info shows nothing and /readyz is 503; once the supervisor starts, it is."""
    write_secret_dir(pod.mounts / "http-secret", {"secret": HTTP_SECRET})
    spec = _spec(pod)
    # A restart's bound is the drain timeout + 10 s: with no supervisor ever started the agent must say it waits
    # without waiting that bound out first (it held the pipeline, and status said nothing, for ~40 s by default).
    spec["http"]["drainTimeout"] = "10m"
    pod.write_registry_file(spec)
    pod.start_agent()
    wait_for(lambda: pod.actions("waiting for the registry container"), timeout=60,
             what=lambda: f"the agent waiting for a registry\n{pod.agent_log_text()}")
    assert (pod.config_dir / "config.yml").exists()
    assert pod.health("/startupz") == 200
    assert pod.health("/readyz") == 503
    assert not pod.actions("written") and not pod.actions("failed")
    assert "berth_agent_config_info{" not in pod.metrics_text()

    pod.start_supervisor()
    pod.wait_serving()
    wait_for(lambda: "berth_agent_config_info{" in pod.metrics_text(), timeout=60,
             what=lambda: f"config_info once the registry answers\n{pod.agent_log_text()}")
    wait_for(lambda: pod.health("/readyz") == 200, what="/readyz once the registry answers")
    assert not pod.actions("failed")
    _assert_no_secret(pod)


def test_a_crash_loop_on_the_running_config_is_reported_and_clears_when_it_serves(pod):
    """The crash loop: the registry is killed and its port taken before the supervisor restarts it,
    so every start fails. The agent counts each start failure, reports the loop (status, Event, the registry's
    own error) and turns /readyz 503; once the port is free the supervisor's next start serves and it clears."""
    _start(pod)
    # The supervisor restarts a killed registry within ~0.1 s: held stopped (SIGSTOP) meanwhile, it cannot win the
    # race for the port however loaded the machine is; it resumes (SIGCONT) once the port is taken.
    pid = pod.registry_pid()
    os.kill(pod.supervisor.pid, signal.SIGSTOP)
    try:
        os.kill(pid, signal.SIGKILL)
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

        def bound() -> bool:  # the dying registry's listener closes a moment after its /proc entry empties
            try:
                squatter.bind(("127.0.0.1", pod.port))
            except OSError:
                return False
            return True

        wait_for(bound, timeout=10, interval=0.001, what="the killed registry's port free")
        squatter.listen()
    finally:
        os.kill(pod.supervisor.pid, signal.SIGCONT)
    try:
        # The message follows each exit (the count; the registry's words once its output is on the volume).
        wait_for(lambda: [p for p in pod.actions("registry problem") if "crash-looping" in p["error"]
                          and "address already in use" in p["error"]],
                 timeout=60, what=lambda: f"the crash loop reported with the registry's error\n{pod.agent_log_text()}")
        signals = pod.metric("registry_exits_total", 'reason="signal"')  # the kill -9 (more if a try lost)
        starts = pod.metric("registry_exits_total", 'reason="start-failure"')  # then the refused starts
        assert signals >= 1 and starts >= 1 and signals + starts >= 3, (signals, starts)
        wait_for(lambda: pod.health("/readyz") == 503, what="/readyz 503 while nothing serves")
    finally:
        squatter.close()
    wait_for(pod.serving, timeout=30, what="the supervisor's next start serving")
    wait_for(lambda: pod.health("/readyz") == 200, what="/readyz 200 again")
    _assert_no_secret(pod)
