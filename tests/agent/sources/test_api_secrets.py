"""ApiSecrets: which copy of a mounted Secret a render reads, mount or API, and the API copy materialised so
read_inputs parses it exactly as a mount. Real AtomicWriter volumes (support.registries.secretdir) in
tmp_path."""

from __future__ import annotations

import json

import pytest

from berth_agent.core import metrics
from berth_agent.core.errors import InputError
from berth_agent.mounted.mounts import read_inputs
from berth_agent.sources import Change
from berth_agent.sources.api_secrets import STORE_NAME, ApiSecrets, mount_fingerprint
from berth_agent.sources.secret_api import SecretCopy, data_fingerprint
from berth_api import RegistrySpec
from support.registries.secretdir import swap_secret_dir, write_secret_dir

OLD, NEW, NEWER = "users-old-7d1e", "users-new-93aa", "users-newer-c4b2"
HTPASSWD = "htpasswd"


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def api_change(value: str, rv: str = "1", volume: str = "http-secret", name: str = "signing") -> Change:
    data = {"secret": value.encode()}
    return Change(f"secret:{volume}", secret=SecretCopy(volume, name, rv, data, data_fingerprint(data)))


def api_error(volume: str = "http-secret") -> Change:
    return Change(f"secret:{volume}", error="cannot read Secret default/signing: API answered 503")


SPEC = RegistrySpec.model_validate({"config": {"storage": {"inmemory": {}}},
                                    "http": {"secret": {"name": "signing", "field": "secret"}}})


@pytest.fixture
def mounts(tmp_path):
    root = tmp_path / "mounts"
    write_secret_dir(root / "http-secret", {"secret": OLD})
    return root


@pytest.fixture
def make(tmp_path, mounts):
    clock = Clock()

    def make_store() -> ApiSecrets:
        store = ApiSecrets(tmp_path / "config" / STORE_NAME, mounts, {"http-secret": "signing"}, clock=clock)
        store.clock = clock
        return store

    return make_store


def rendered_value(store: ApiSecrets, mounts) -> str:
    """What a render would see: read_inputs with the roots the store picks."""
    return read_inputs(SPEC, mounts, store.overrides()).http_secret


def _count(path: str) -> float:
    return metrics.secret_changes_applied_total.labels(path=path)._value.get()


def _lag_count() -> float:
    return next(s.value for s in metrics.secret_mount_lag_seconds.collect()[0].samples if s.name.endswith("_count"))


def test_no_api_copy_reads_the_mount(make, mounts):
    store = make()
    assert store.overrides() == {}
    assert rendered_value(store, mounts) == OLD
    assert store.absorb(Change("mount:http-secret")) is False  # not its business
    store.absorb(api_error())
    assert rendered_value(store, mounts) == OLD  # forbidden or unreachable from the start: the mount serves


def test_api_change_wins_then_the_mount_catches_up_and_never_goes_back(make, mounts):
    store = make()
    assert rendered_value(store, mounts) == OLD
    store.settled(changed=True)  # the first config: no change to attribute
    api_before, mount_before, lag_before = _count("api"), _count("mount"), _lag_count()

    store.absorb(api_change(NEW, "2"))
    assert rendered_value(store, mounts) == NEW  # at once, the mount still shows OLD
    store.settled(changed=True)
    assert _count("api") == api_before + 1

    store.clock.now += 65.0  # the kubelet's sync period
    swap_secret_dir(mounts / "http-secret", {"secret": NEW})
    assert rendered_value(store, mounts) == NEW
    store.settled(changed=False)  # same content: nothing to apply, nothing counted
    assert (_count("api"), _count("mount")) == (api_before + 1, mount_before)
    assert _lag_count() == lag_before + 1

    swap_secret_dir(mounts / "http-secret", {"secret": OLD})  # a mount showing an older payload
    assert rendered_value(store, mounts) == NEW
    store.absorb(api_error())  # even with the watch broken: OLD is known to be superseded
    assert rendered_value(store, mounts) == NEW


def test_mount_showing_new_content_while_the_api_is_out_of_sight_wins(make, mounts):
    store = make()
    store.absorb(api_change(OLD, "1"))
    assert rendered_value(store, mounts) == OLD
    store.settled(changed=True)
    before = _count("mount")
    store.absorb(api_error())  # the watch broke...
    swap_secret_dir(mounts / "http-secret", {"secret": NEWER})  # ...and the Secret changed meanwhile
    assert rendered_value(store, mounts) == NEWER
    store.settled(changed=True)
    assert _count("mount") == before + 1
    store.absorb(api_change(NEWER, "3"))  # the watch is back with the same payload: nothing moves
    assert rendered_value(store, mounts) == NEWER


def test_mount_seen_behind_a_live_api_is_superseded_even_after_the_api_is_lost(make, mounts):
    store = make()
    store.absorb(api_change(NEW, "2"))
    assert rendered_value(store, mounts) == NEW  # the mount (OLD) is seen lagging while the watch is live
    store.absorb(api_error())
    assert rendered_value(store, mounts) == NEW


def test_restart_keeps_the_api_copy_against_a_stale_mount(make, mounts, tmp_path):
    first = make()
    first.absorb(api_change(NEW, "2"))
    assert rendered_value(first, mounts) == NEW
    # The store holds the files and a record of names and fingerprints, never a value in the record.
    record = (tmp_path / "config" / STORE_NAME / "http-secret.json").read_text()
    assert NEW not in record and OLD not in record
    assert json.loads(record)["name"] == "signing" and json.loads(record)["resourceVersion"] == "2"
    assert (tmp_path / "config" / STORE_NAME / "http-secret" / "secret").stat().st_mode & 0o777 == 0o600

    second = make()  # the agent restarted; its watch has not answered (API down, or still listing)
    assert rendered_value(second, mounts) == NEW
    second.absorb(api_change(NEWER, "3"))  # then the API answers with yet newer content
    assert rendered_value(second, mounts) == NEWER


def test_restart_with_an_unknown_mount_payload_takes_the_mount(make, mounts):
    first = make()
    first.absorb(api_change(NEW, "2"))
    assert rendered_value(first, mounts) == NEW
    swap_secret_dir(mounts / "http-secret", {"secret": NEWER})  # changed while no agent watched
    assert rendered_value(make(), mounts) == NEWER


def test_kept_copy_of_another_secret_is_dropped(make, mounts, tmp_path):
    first = make()
    first.absorb(api_change(NEW, "2"))
    first.overrides()
    other = ApiSecrets(tmp_path / "config" / STORE_NAME, mounts, {"http-secret": "other-name"})
    assert other.overrides() == {}
    assert not (tmp_path / "config" / STORE_NAME / "http-secret").exists()


def test_api_copy_is_parsed_and_checked_like_a_mount(tmp_path):
    """The same InputError, naming the same directory and key, and never the value."""
    mounts = tmp_path / "mounts"
    write_secret_dir(mounts / HTPASSWD, {"users": "alice:$2y$05$" + "a" * 53 + "\n"})
    spec = RegistrySpec.model_validate({"config": {"storage": {"inmemory": {}, "auth": {"htpasswd": {
        "secret": {"name": "users", "field": "users"}}}}}})
    store = ApiSecrets(tmp_path / STORE_NAME, mounts, {HTPASSWD: "users"})
    bad = {"users": b"alice:plaintext-" + OLD.encode() + b"\n"}
    store.absorb(Change("secret:htpasswd", secret=SecretCopy(HTPASSWD, "users", "5", bad, data_fingerprint(bad))))
    with pytest.raises(InputError) as from_api:
        read_inputs(spec, mounts, store.overrides())
    swap_secret_dir(mounts / HTPASSWD, bad)
    with pytest.raises(InputError) as from_mount:
        read_inputs(spec, mounts)
    assert str(from_api.value) == str(from_mount.value)
    assert "htpasswd/users" in str(from_api.value) and OLD not in str(from_api.value)
    # Keys the API copy no longer has are removed from the store, as the kubelet removes them.
    fixed = {"other": b"x"}
    store.absorb(Change("secret:htpasswd", secret=SecretCopy(HTPASSWD, "users", "6", fixed, data_fingerprint(fixed))))
    store.overrides()
    assert sorted(p.name for p in (tmp_path / STORE_NAME / HTPASSWD).iterdir()) == ["other"]


def test_mount_fingerprint_matches_the_api_fingerprint(tmp_path):
    write_secret_dir(tmp_path / "v", {"a": "1", "b": "2"})
    assert mount_fingerprint(tmp_path / "v") == data_fingerprint({"a": b"1", "b": b"2"})
    assert mount_fingerprint(tmp_path / "missing") is None


def test_first_render_waits_for_the_first_answers_but_not_for_ever(make):
    store = make()
    assert store.start_wait() == pytest.approx(5.0)  # no answer yet: a render now could use a stale mount
    store.absorb(api_error())  # an error is an answer: the mount serves at once
    assert store.start_wait() == 0.0
    silent = make()
    silent.clock.now += 2.0
    assert silent.start_wait() == pytest.approx(3.0)
    silent.clock.now += 3.5  # an API server that never answers leaves the mount in charge
    assert silent.start_wait() == 0.0


def test_a_missing_volume_reads_the_copy(make, mounts):
    import shutil

    store = make()
    store.absorb(api_change(NEW, "2"))
    store.absorb(api_error())
    shutil.rmtree(mounts / "http-secret")
    assert rendered_value(store, mounts) == NEW


def test_mount_fingerprint_never_blocks_on_a_fifo(tmp_path):
    import os

    volume = tmp_path / "v"
    volume.mkdir()
    os.mkfifo(volume / "pipe")  # nobody writes: a plain open() would block the render for ever
    (volume / "key").write_bytes(b"1")
    assert mount_fingerprint(volume) not in (None, data_fingerprint({"key": b"1"}))


def test_a_payload_the_api_replaced_is_superseded_even_if_no_render_saw_it_lag(make, mounts):
    store = make()
    store.absorb(api_change(OLD, "1"))
    assert rendered_value(store, mounts) == OLD  # mount and API agree
    store.absorb(api_change(NEW, "2"))
    store.absorb(api_error())  # the watch breaks before any render compared the mount with NEW
    assert rendered_value(store, mounts) == NEW
