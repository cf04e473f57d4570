"""Every key read from a Secret volume stays inside that volume, is a regular file, and is bounded in size.

Each attack is swapped in as the kubelet swaps a payload (support.registries.secretdir.swap_payload): a key that links
out
of its volume (to a file holding a value the agent would happily use), a FIFO, a device, a socket, a key over
its limit, and 200k-deep BucketInfo JSON. Each must be an InputError naming the volume and key, quoting no
content, and must return at once (a FIFO used to block the reader in open(2) for ever).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from berth_agent.core.errors import InputError
from berth_agent.mounted.cosi import MAX_JSON_DEPTH, json_depth
from berth_agent.mounted.mounts import read_inputs
from berth_agent.mounted.secret_volume import DOCUMENT_LIMIT, HTPASSWD_LIMIT, SCALAR_LIMIT, volume_fingerprint
from berth_api import Registry
from support.registries.mountkit import htpasswd_entry
from support.registries.secretdir import swap_payload, write_secret_dir
from support.services.certs import self_signed_pair

PEM_CERT, PEM_KEY = self_signed_pair()
PLANTED = "PLANTED-outside-the-volume-7d41"
INMEMORY = {"storage": {"inmemory": {}}}
BUCKET_INFO = {"spec": {"bucketName": "b", "authenticationType": "Key", "secretS3": {
    "endpoint": "http://127.0.0.1:9", "region": "us-east-1", "accessKeyID": "AKIA" + PLANTED,
    "accessSecretKey": PLANTED}}}


class Volume:
    """One of the five Secret volumes: the spec that reads it, the key read, a good value, and a value that
    renders fine if read (the planted file outside the volume holds it)."""

    def __init__(self, source: str, key: str, spec: dict, good: bytes, planted: bytes, limit: int):
        self.source, self.key, self.spec, self.good, self.planted, self.limit = source, key, spec, good, planted, limit

    def registry_spec(self):
        return Registry.model_validate({"spec": self.spec}).spec

    def good_data(self) -> dict[str, bytes]:
        return {"tls.crt": PEM_CERT, "tls.key": PEM_KEY} if self.source == "tls" else {self.key: self.good}


VOLUMES = [
    Volume("cosi", "BucketInfo", {"config": {"storage": {"objectStorage": {"bucketClaim": "c", "bucketAccess": "a"}}}},
           json.dumps({**BUCKET_INFO, "spec": {**BUCKET_INFO["spec"], "secretS3": {
               **BUCKET_INFO["spec"]["secretS3"], "accessSecretKey": "good"}}}).encode(),
           json.dumps(BUCKET_INFO).encode(), DOCUMENT_LIMIT),
    Volume("htpasswd", "htpasswd", {"config": {**INMEMORY, "storage": {
        "inmemory": {}, "auth": {"htpasswd": {"secret": {"name": "u", "field": "htpasswd"}}}}}},
           htpasswd_entry("alice", "good"), htpasswd_entry(PLANTED, "x"), HTPASSWD_LIMIT),
    Volume("http-secret", "secret", {"config": INMEMORY, "http": {"secret": {"name": "h", "field": "secret"}}},
           b"good-http-secret", PLANTED.encode(), SCALAR_LIMIT),
    Volume("redis", "url", {"config": INMEMORY, "redis": {"secret": {"name": "r", "field": "url"}}},
           b"redis://:good@127.0.0.1:6379/0", f"redis://:{PLANTED}@127.0.0.1:6379/0".encode(), SCALAR_LIMIT),
    Volume("tls", "tls.key", {"config": INMEMORY, "http": {"tls": {"secretName": "t"}}},
           PEM_KEY, PEM_KEY.replace(b"-----\n", b"-----\n" + PLANTED.encode() + b"\n", 1), DOCUMENT_LIMIT),
]
IDS = [volume.source for volume in VOLUMES]


@pytest.fixture(params=VOLUMES, ids=IDS)
def volume(request, tmp_path) -> Volume:
    chosen: Volume = request.param
    write_secret_dir(tmp_path / "mounts" / chosen.source, chosen.good_data())
    read_inputs(chosen.registry_spec(), tmp_path / "mounts")  # the good value reads
    return chosen


def swap_key(tmp_path: Path, volume: Volume, make) -> None:
    """Swap in a payload whose `volume.key` is made by make(path); the other keys keep their good values."""

    def fill(payload: Path) -> None:
        for key, value in volume.good_data().items():
            if key != volume.key:
                (payload / key).write_bytes(value)
        make(payload / volume.key)

    swap_payload(tmp_path / "mounts" / volume.source, list(volume.good_data()), fill)


def refused(tmp_path: Path, volume: Volume, *, any_key: bool = False) -> InputError:
    """read_inputs must refuse, in a thread that has to come back (an open(2) on a FIFO never would)."""
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            read_inputs(volume.registry_spec(), tmp_path / "mounts")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    reader = threading.Thread(target=attempt, daemon=True)
    reader.start()
    reader.join(30)  # a hang guard, not a timing claim: a read that blocks never returns
    if reader.is_alive():
        _unblock(tmp_path / "mounts" / volume.source / volume.key)
        pytest.fail(f"reading {volume.source}/{volume.key} blocked")
    [error] = outcome
    assert isinstance(error, InputError), f"read_inputs accepted it ({error!r})"
    if any_key:  # the whole payload is elsewhere: whichever key is read first is refused
        assert error.source.startswith(f"{volume.source}/") and error.source != f"{volume.source}/"
    else:
        assert error.source == f"{volume.source}/{volume.key}"
    for text in (str(error), repr(error)):
        assert PLANTED not in text and "good" not in text
        assert "/etc/" not in text and str(tmp_path) not in text  # never where a link points
    return error


def _unblock(path: Path) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


@pytest.mark.parametrize("style", ["absolute", "relative"])
def test_a_link_out_of_the_volume_is_refused(volume, tmp_path, style):
    outside = tmp_path / "outside" / "planted"
    outside.parent.mkdir()
    outside.write_bytes(volume.planted)

    def link(path: Path) -> None:
        os.symlink(outside if style == "absolute" else os.path.relpath(outside, path.parent), path)

    swap_key(tmp_path, volume, link)
    assert "leaves the Secret volume" in refused(tmp_path, volume).message


def test_a_data_link_out_of_the_volume_is_refused(volume, tmp_path):
    """`..data` itself swapped to a payload directory of another volume (relative) is outside this one."""
    elsewhere = write_secret_dir(tmp_path / "mounts" / "elsewhere", {volume.key: volume.planted})
    directory = tmp_path / "mounts" / volume.source
    os.symlink(f"../elsewhere/{os.readlink(elsewhere / '..data')}", directory / "..data_tmp")
    os.rename(directory / "..data_tmp", directory / "..data")
    assert "leaves the Secret volume" in refused(tmp_path, volume, any_key=True).message


def test_a_key_linked_to_etc_is_refused(volume, tmp_path):
    swap_key(tmp_path, volume, lambda path: os.symlink("/etc/hostname", path))
    assert "leaves the Secret volume" in refused(tmp_path, volume).message


def test_a_fifo_is_refused_without_blocking(volume, tmp_path):
    swap_key(tmp_path, volume, os.mkfifo)
    assert "is a FIFO, not a regular file" in refused(tmp_path, volume).message


def test_a_link_to_a_device_is_refused(volume, tmp_path):
    swap_key(tmp_path, volume, lambda path: os.symlink("/dev/zero", path))
    assert "leaves the Secret volume" in refused(tmp_path, volume).message


def test_a_device_inside_the_volume_is_refused(volume, tmp_path):
    def device(path: Path) -> None:
        try:
            os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD")

    swap_key(tmp_path, volume, device)
    assert "is a character device, not a regular file" in refused(tmp_path, volume).message


def test_a_socket_is_refused(volume, tmp_path):
    listeners = []

    def bind(path: Path) -> None:
        # sun_path holds ~107 bytes: bind at a short name on the same file system, then move it into place.
        with tempfile.TemporaryDirectory(dir=tmp_path.anchor + "tmp", prefix="berth-") as short_dir:
            short = Path(short_dir) / "s"
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(str(short))
            listeners.append(listener)
            os.rename(short, path)

    swap_key(tmp_path, volume, bind)
    try:
        assert "is a socket, not a regular file" in refused(tmp_path, volume).message
    finally:
        for listener in listeners:
            listener.close()


def test_a_key_over_its_limit_is_refused(volume, tmp_path):
    swap_key(tmp_path, volume, lambda path: path.write_bytes(b"x" * (volume.limit + 1)))
    assert "is larger than" in refused(tmp_path, volume).message


def test_a_key_at_its_limit_is_read(volume, tmp_path):
    """The limit itself is allowed: the error above is the size, not some other check (padding keeps it valid)."""
    padding = volume.limit - len(volume.good)
    if volume.source == "cosi":
        value = volume.good[:-1] + b" " * padding + b"}"
    elif volume.source in ("htpasswd", "tls"):
        value = volume.good + b"\n" * padding
    else:
        value = volume.good + b" " * padding
    assert len(value) == volume.limit
    swap_key(tmp_path, volume, lambda path: path.write_bytes(value))
    read_inputs(volume.registry_spec(), tmp_path / "mounts")


def test_deep_json_is_refused_before_parsing(tmp_path):
    cosi = VOLUMES[0]
    write_secret_dir(tmp_path / "mounts" / "cosi", {"BucketInfo": "[" * 200_000 + "]" * 200_000})
    error = refused(tmp_path, cosi)
    assert f"at most {MAX_JSON_DEPTH}" in error.message
    assert "RecursionError" not in str(error)


def test_json_depth_ignores_brackets_in_strings():
    assert json_depth('{"a": "[[[[{{{{", "b": [1, {"c": "\\"]]"}]}') == 3
    assert json_depth(json.dumps(BUCKET_INFO)) == 3


def test_the_fingerprint_moves_with_a_swap_and_not_with_a_read(tmp_path):
    directory = write_secret_dir(tmp_path / "redis", {"url": "redis://a:1"})
    before = volume_fingerprint(directory)
    (directory / "url").read_bytes()
    assert volume_fingerprint(directory) == before
    swap_payload(directory, ["url"], lambda payload: (payload / "url").write_text("redis://a:1"))
    assert volume_fingerprint(directory) != before
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "fifo", directory / "blocking")
    volume_fingerprint(directory)  # stat only: returns although the FIFO has no writer


def test_a_swap_racing_the_reader_never_leads_out_or_blocks(tmp_path):
    """`..data` flips between a good payload, one whose key links out of the volume and one whose key is a FIFO,
    as fast as a thread can rename, while reads run: each read gives the good value or an InputError, never the
    planted file's content, and never blocks (the open is per component with O_NOFOLLOW and O_NONBLOCK)."""
    from berth_agent.mounted.secret_volume import read_key

    outside = tmp_path / "planted"
    outside.write_text(PLANTED)
    volume = write_secret_dir(tmp_path / "http-secret", {"secret": "good"})
    payloads = [os.readlink(volume / "..data")]
    for name, make in (("..escape", lambda p: os.symlink(outside, p)), ("..fifo", os.mkfifo)):
        (volume / name).mkdir()
        make(volume / name / "secret")
        payloads.append(name)
    stop = threading.Event()

    def flip() -> None:
        turn = 0
        while not stop.is_set():
            turn += 1
            os.symlink(payloads[turn % 3], volume / "..data_tmp")
            os.rename(volume / "..data_tmp", volume / "..data")

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    good = refused = 0
    try:
        for _ in range(3000):  # pytest's timeout is the hang guard: a blocked open never returns
            try:
                assert read_key(tmp_path, "http-secret", "secret", why="test", limit=SCALAR_LIMIT) == b"good"
                good += 1
            except InputError as exc:
                assert PLANTED not in str(exc)
                refused += 1
    finally:
        stop.set()
        flipper.join(10)
    assert good and refused, (good, refused)  # both kinds of payload were met
