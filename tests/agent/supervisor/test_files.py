"""supervisor/files.py names every file the agent and berth-supervise share (spelled once, in supervise/names.py);
berth-supervise uses each of them, and marks its registries as the agent expects."""

from __future__ import annotations

import re
from pathlib import Path

from berth_agent.supervisor import files
from berth_agent.supervisor.supervise import main, names

SUPERVISE = Path(names.__file__).parent


def test_every_shared_name_is_one_berth_supervise_reads_or_writes():
    code = "\n".join(path.read_text() for path in SUPERVISE.glob("*.py") if path.name != "names.py")
    shared = {key: value for key, value in vars(files).items() if key.endswith("_NAME")}
    assert len(shared) >= 12
    for key, value in shared.items():
        assert getattr(names, key) == value, key  # the agent's name is the supervisor's
        if key not in ("CONFIG_NAME", "HANDOVER_NAME"):  # these two arrive in its settings, as paths
            assert re.search(rf"\b{key}\b", code), f"{key} = {value!r} is not what berth-supervise reads or writes"


def test_the_markers_are_what_berth_supervise_puts_in_its_registry_s_environment():
    environment = {f"{key}={value}".encode() for key, value in main.MARKERS.items()}
    assert environment == {files.HANDOVER_MARKER, files.GC_MARKER}
    assert files.SOCKET_MARKER == b"BERTH_SUPERVISE_SOCKET=1"
    assert 'env["BERTH_SUPERVISE_SOCKET"] = "1"' in Path(main.__file__).read_text()  # on the held socket only


def test_berth_supervise_spells_the_config_name_as_the_pod_contract_does():
    # berth-supervise cannot import berth_api (pydantic: megabytes in every pod), so names.py repeats this one.
    from berth_agent.render import paths
    from berth_agent.supervisor.supervise import settings
    from berth_api import pod

    assert names.CONFIG_NAME == pod.CONFIG_NAME
    assert names.S3_CREDENTIALS_NAME == paths.S3_CREDENTIALS_FILE  # the renderer writes what the registry is shown
    assert settings.DEFAULT_CONFIG == f"{pod.CONFIG_DIR}/{pod.CONFIG_NAME}"


def test_temporary_s3_credentials_beside_the_config_are_what_every_registry_process_is_shown(tmp_path):
    from berth_agent.supervisor.supervise.spawn import registry_env

    config = tmp_path / "config.yml"
    base = {"PATH": "/usr/bin", "AWS_ACCESS_KEY_ID": "AKIAFROMTHEPOD", "AWS_SECRET_ACCESS_KEY": "x",
            "AWS_ROLE_ARN": "arn:aws:iam::1:role/r", "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token"}
    assert registry_env(base, config) == base  # long-lived keys are in config.yml: the environment as it is
    (tmp_path / "s3").mkdir()
    (tmp_path / names.S3_CREDENTIALS_NAME).write_text("[default]\n")
    assert registry_env(base, config) == {"PATH": "/usr/bin",
                                          "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "s3" / "credentials")}
    assert "registry_env(self.env, self.config)" in (SUPERVISE / "gc.py").read_text()  # garbage-collect too
