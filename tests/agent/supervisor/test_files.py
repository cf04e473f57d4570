"""supervisor/files.py names every file the agent and supervise.sh share; the script spells the same names."""

from __future__ import annotations

from berth_agent.supervisor import files
from berth_agent.supervisor.script import supervisor_script


def test_every_shared_name_is_the_one_supervise_sh_uses():
    script = supervisor_script().decode()
    names = {key: value for key, value in vars(files).items() if key.endswith("_NAME")}
    assert len(names) >= 12
    for key, value in names.items():
        assert value in script, f"{key} = {value!r} is not what supervise.sh reads or writes"


def test_the_markers_are_what_supervise_sh_puts_in_its_registry_s_environment():
    script = supervisor_script().decode()
    for marker in (files.HANDOVER_MARKER, files.GC_MARKER):
        assert f"{marker.decode()} " in script  # set on the command line that starts the registry


def test_berth_supervise_spells_the_config_name_as_the_pod_contract_does():
    # berth-supervise cannot import berth_api (pydantic: megabytes in every pod), so names.py repeats this one.
    from berth_agent.supervisor.supervise import names, settings
    from berth_api import pod

    assert names.CONFIG_NAME == pod.CONFIG_NAME
    assert settings.DEFAULT_CONFIG == f"{pod.CONFIG_DIR}/{pod.CONFIG_NAME}"
