"""The node tier's images, built offline and cached by the hash of their inputs (docs/upstream.md#parts-real-node).

    berth      Debian bookworm (debootstrap minbase) + a venv at /opt/berth with deploy/requirements.lock and
               the project, as the Containerfile builds it; runs as 65532, works on a read-only root
    registry2  Debian's docker-registry 2.8 at /bin/registry, busybox at the official image's paths
    registry3  `$BERTH_REGISTRY3_BIN` (else DEFAULT_REGISTRY3) at /bin/registry, the same busybox
    pause      a static C program that sleeps until SIGTERM and reaps children

Each image is a stack of layers; a layer is a directory plus its tar, built once per key under the cache
directory (`$BERTH_IMAGE_CACHE`, default /var/cache/berth-test-images: outside the clone, so it survives clean
clones on one machine). A layer on top of another is built in an overlay mount: its upper directory is the
layer, so nothing is copied and an edit of the project rebuilds only the last, small layer. The images are
docker-archive tarballs that `ctr images import` takes; no registry, no network beyond PyPI for the wheels
and the Debian mirror apt uses.

Root only (debootstrap, chroot, mount): support.clusters.node checks that before anything is built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence

REPO = pathlib.Path(__file__).resolve().parents[3]
CACHE_ENV = "BERTH_IMAGE_CACHE"
DEFAULT_CACHE = pathlib.Path("/var/cache/berth-test-images")
# Bumped when the build steps change in a way the inputs below do not show.
RECIPE = "4"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"  # the mirror apt uses here (/etc/apt/sources.list.d)
# What the Containerfile's python:3.11-slim-bookworm gives that minbase lacks: Python 3.11 with venv.
BASE_PACKAGES = ("python3", "python3-venv")
BUSYBOX = pathlib.Path("/bin/busybox")  # the official registry images are Alpine: busybox at these paths
REGISTRY2 = pathlib.Path("/usr/bin/docker-registry")
REGISTRY3_ENV = "BERTH_REGISTRY3_BIN"
DEFAULT_REGISTRY3 = REPO.parent / "shared" / "dist" / "registry-v3.1.1"
RUN_AS = "65532:65532"
SITE_PACKAGES = "/opt/berth/lib/python3.11/site-packages"

# The official image's entry point and default configuration (distribution/distribution, Dockerfile and
# cmd/registry/config-example.yml), so the images start as registry:2 and registry:3 do.
ENTRYPOINT_SH = """#!/bin/sh
set -e
case "$1" in
    *.yaml|*.yml) set -- registry serve "$@" ;;
    serve|garbage-collect|help|-*) set -- registry "$@" ;;
esac
exec "$@"
"""
REGISTRY_CONFIG = """version: 0.1
log:
  fields:
    service: registry
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: /var/lib/registry
http:
  addr: :5000
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
"""
PAUSE_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
    if (getpid() != 1) return 1;
    signal(SIGINT, stop);
    signal(SIGTERM, stop);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
"""


@dataclasses.dataclass(frozen=True)
class Image:
    name: str  # the reference pods use (imagePullPolicy IfNotPresent finds it imported)
    tags: tuple[str, ...]  # all references it is imported under (the first is `name`)
    archive: pathlib.Path  # docker-archive tarball for `ctr images import`
    key: str


def cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def registry3_binary() -> pathlib.Path | None:
    path = pathlib.Path(os.environ.get(REGISTRY3_ENV) or DEFAULT_REGISTRY3)
    return path if path.is_file() else None


def missing_tools() -> list[str]:
    """What building the images needs and this machine lacks (tests/run installs all of it)."""
    missing = [tool for tool in ("debootstrap", "gcc", "tar", "mount", "chroot") if shutil.which(tool) is None]
    missing += [str(path) for path in (BUSYBOX, REGISTRY2) if not path.is_file()]
    if registry3_binary() is None:
        missing.append(f"${REGISTRY3_ENV} (.ci/run exports ../shared/dist/registry-v3.1.1)")
    return missing


def _digest(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def _file_digest(path: pathlib.Path) -> str:
    with path.open("rb") as source:
        return hashlib.file_digest(source, "sha256").hexdigest()


def _tree_digest(roots: Sequence[pathlib.Path]) -> str:
    """The project's sources: every file's relative path and content (not caches, not build leftovers)."""
    parts: list[str] = []
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or any(part.endswith(".egg-info") for part in path.parts):
                continue
            parts += [str(path.relative_to(REPO)), _file_digest(path)]
    return _digest(*parts)


def _run(args: Sequence[str], log: pathlib.Path, **kwargs) -> None:
    with log.open("ab") as out:
        out.write(f"$ {' '.join(map(str, args))}\n".encode())
        out.flush()
        result = subprocess.run(list(map(str, args)), stdout=out, stderr=subprocess.STDOUT, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{args[0]} exited {result.returncode}; see {log}:\n{log.read_text()[-4000:]}")


@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
    """One builder of a layer at a time, across xdist workers and concurrent runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclasses.dataclass(frozen=True)
class Layer:
    key: str
    root: pathlib.Path  # the layer's files
    tar: pathlib.Path
    diff_id: str  # sha256 of the uncompressed tar, as an image config names it


class Builder:
    def __init__(self, cache: pathlib.Path | None = None):
        self.cache = cache or cache_dir()
        self.layers = self.cache / "layers"
        self.layers.mkdir(parents=True, exist_ok=True)

    # --------------------------------------------------------------------------------------- layers

    def layer(self, name: str, key: str, build, below: Sequence[Layer] = ()) -> Layer:
        """The cached layer `name-key`, built by build(root) (root: the layer's directory; with `below`, an
        overlay of them is mounted at root/../merged and build gets that, the layer being its upper dir)."""
        base = self.layers / f"{name}-{key[:20]}"
        done = base / "done.json"
        with _locked(self.layers / f".{name}-{key[:20]}.lock"):
            if not done.is_file():
                shutil.rmtree(base, ignore_errors=True)
                base.mkdir(parents=True)
                log = base / "build.log"
                root = base / "root"
                root.mkdir()
                if below:
                    self._in_overlay(base, root, below, build, log)
                else:
                    build(root, log)
                diff_id = self._tar(root, base / "layer.tar", log)
                done.write_text(json.dumps({"diff_id": diff_id}))
        return Layer(key, base / "root", base / "layer.tar", json.loads(done.read_text())["diff_id"])

    def _in_overlay(self, base: pathlib.Path, upper: pathlib.Path, below: Sequence[Layer], build,
                    log: pathlib.Path) -> None:
        work, merged = base / "work", base / "merged"
        work.mkdir()
        merged.mkdir()
        lower = ":".join(str(layer.root) for layer in reversed(below))  # overlayfs: the top-most first
        _run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={upper},workdir={work}",
              merged], log)
        try:
            build(merged, log)
        finally:
            _run(["umount", merged], log)
        shutil.rmtree(work, ignore_errors=True)
        merged.rmdir()
        _whiteouts_to_oci(upper)

    def _tar(self, root: pathlib.Path, target: pathlib.Path, log: pathlib.Path) -> str:
        # The overlay's own trusted.* attributes stay out (containerd refuses them in an archive).
        _run(["tar", "--numeric-owner", "--xattrs", "--xattrs-exclude=trusted.*", "--sort=name", "-C", root,
              "-cf", target, "."], log)
        return "sha256:" + _file_digest(target)

    # --------------------------------------------------------------------------------------- images

    def image(self, tags: Sequence[str], layers: Sequence[Layer], config: dict) -> Image:
        key = _digest(*tags, *(layer.diff_id for layer in layers), json.dumps(config, sort_keys=True))
        archive = self.cache / "images" / f"{tags[0].rsplit('/', 1)[-1].replace(':', '-')}-{key[:20]}.tar"
        with _locked(archive.with_suffix(".lock")):
            if not archive.is_file():
                archive.parent.mkdir(parents=True, exist_ok=True)
                full = {"architecture": "amd64", "os": "linux", "config": config,
                        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]}}
                config_bytes = json.dumps(full, sort_keys=True).encode()
                config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
                names = [f"{layer.diff_id.removeprefix('sha256:')}/layer.tar" for layer in layers]
                manifest = json.dumps([{"Config": config_name, "RepoTags": list(tags), "Layers": names}]).encode()
                partial = archive.with_suffix(".partial")
                with tarfile.open(partial, "w") as out:
                    _add_bytes(out, config_name, config_bytes)
                    _add_bytes(out, "manifest.json", manifest)
                    for name, layer in zip(names, layers):
                        out.add(layer.tar, arcname=name)
                os.replace(partial, archive)
        return Image(tags[0], tuple(tags), archive, key)

    # ---------------------------------------------------------------------------- the four images

    def debian(self) -> Layer:
        key = _digest(RECIPE, SUITE, MIRROR, *BASE_PACKAGES)

        def build(root: pathlib.Path, log: pathlib.Path) -> None:
            _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, root, MIRROR],
                 log)
            # Trim what a container never uses (as the slim images do): apt's lists and caches, docs.
            for sub in ("var/lib/apt/lists", "var/cache/apt", "usr/share/doc", "usr/share/man", "usr/share/info",
                        "usr/share/locale", "var/log"):
                for child in (root / sub).glob("*"):
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()

        return self.layer("debian", key, build)

    def berth_deps(self, debian: Layer) -> Layer:
        locks = [REPO / "deploy" / "build-requirements.lock", REPO / "deploy" / "requirements.lock"]
        key = _digest(RECIPE, debian.key, *(lock.read_text() for lock in locks))

        def build(merged: pathlib.Path, log: pathlib.Path) -> None:
            wheels = pathlib.Path(tempfile.mkdtemp(prefix="berth-wheels-", dir=self.cache))
            try:
                # The wheels come down here (the host's pip and its index settings); the chroot stays offline.
                for lock in locks:
                    _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                          "--python-version", "3.11", "--platform", "manylinux2014_x86_64", "--platform",
                          "manylinux_2_28_x86_64", "--platform", "linux_x86_64", "--implementation", "cp",
                          "--requirement", lock, "--dest", wheels], log)
                inside = merged / "tmp" / "wheels"
                shutil.copytree(wheels, inside)
                _chroot(merged, ["/usr/bin/python3", "-m", "venv", "/opt/berth"], log)
                for lock in locks:
                    shutil.copy(lock, inside / lock.name)
                    _chroot(merged, ["/opt/berth/bin/pip", "install", "--quiet", "--no-index", "--find-links",
                                     "/tmp/wheels", "--no-deps", "--requirement", f"/tmp/wheels/{lock.name}"], log)
                shutil.rmtree(inside)
                # As the Containerfile: .opt-2.pyc for the agent's PYTHONOPTIMIZE=2 (Debian ships the .pyc of -o 0).
                _chroot(merged, ["/opt/berth/bin/python", "-m", "compileall", "-q", "-j", "0", "-o", "2", "-x",
                                 "/(test|tests|idle_test)/", "/usr/lib/python3.11", SITE_PACKAGES], log)
            finally:
                shutil.rmtree(wheels, ignore_errors=True)

        return self.layer("berth-deps", key, build, below=[debian])

    def berth_project(self, debian: Layer, deps: Layer) -> Layer:
        sources = [REPO / "pyproject.toml", REPO / "README.md", REPO / "agent", REPO / "operator"]
        key = _digest(RECIPE, deps.key, _tree_digest(sources))

        def build(merged: pathlib.Path, log: pathlib.Path) -> None:
            source = merged / "tmp" / "src"
            source.mkdir(parents=True)
            for path in sources:
                ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
                shutil.copytree(path, source / path.name, ignore=ignore) if path.is_dir() else shutil.copy(path, source)
            _chroot(merged, ["/opt/berth/bin/pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                             "--no-index", "/tmp/src"], log)
            shutil.rmtree(source)
            # Berth's own .opt-2.pyc (what the deps layer compiled is up to date and stays there).
            _chroot(merged, ["/opt/berth/bin/python", "-m", "compileall", "-q", "-o", "2", SITE_PACKAGES], log)
            _chroot(merged, ["/opt/berth/bin/pip", "check"], log)
            for program in ("berth-operator", "berth-agent"):
                _chroot(merged, [f"/opt/berth/bin/{program}", "--help"], log)

        return self.layer("berth-project", key, build, below=[debian, deps])

    def berth(self) -> Image:
        debian = self.debian()
        deps = self.berth_deps(debian)
        project = self.berth_project(debian, deps)
        config = {"User": RUN_AS, "WorkingDir": "/tmp", "Cmd": ["berth-operator", "--help"],
                  "Env": ["PATH=/opt/berth/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                          "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp"]}
        return self.image([f"localhost/berth-test/berth:{project.key[:12]}"], [debian, deps, project], config)

    def busybox(self) -> Layer:
        key = _digest(RECIPE, _file_digest(BUSYBOX), *(_file_digest(lib) for lib in _libraries(BUSYBOX)))

        def build(root: pathlib.Path, log: pathlib.Path) -> None:
            (root / "bin").mkdir()
            shutil.copy2(BUSYBOX, root / "bin" / "busybox")
            for library in _libraries(BUSYBOX):  # Debian's busybox is dynamic, busybox-static is not
                target = root / library.relative_to("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(library.resolve(), target)
            applets = subprocess.run([str(BUSYBOX), "--list-full"], capture_output=True, text=True, check=True)
            for applet in applets.stdout.split():
                link = root / applet
                if applet == "bin/busybox" or link.exists():
                    continue
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to("/bin/busybox")
            for sub, mode in (("tmp", 0o1777), ("etc", 0o755), ("var/lib/registry", 0o755)):
                (root / sub).mkdir(parents=True, exist_ok=True)
                os.chmod(root / sub, mode)
            (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
            (root / "etc" / "group").write_text("root:x:0:\nnobody:x:65534:\n")

        return self.layer("busybox", key, build)

    def _registry_layer(self, name: str, binary: pathlib.Path, libraries: Sequence[pathlib.Path]) -> Layer:
        key = _digest(RECIPE, ENTRYPOINT_SH, REGISTRY_CONFIG, _file_digest(binary),
                      *(_file_digest(lib) for lib in libraries))

        def build(root: pathlib.Path, log: pathlib.Path) -> None:
            (root / "bin").mkdir()
            shutil.copy2(binary, root / "bin" / "registry")
            for library in libraries:  # where the dynamic loader looks for them
                target = root / library.relative_to("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(library.resolve(), target)
            (root / "etc" / "docker" / "registry").mkdir(parents=True)
            (root / "etc" / "docker" / "registry" / "config.yml").write_text(REGISTRY_CONFIG)
            (root / "entrypoint.sh").write_text(ENTRYPOINT_SH)
            os.chmod(root / "entrypoint.sh", 0o755)

        return self.layer(name, key, build)

    def private_registry(self) -> Image:
        """Registry 3.1.1 under another name and with another config, so another image ID: what a private mirror
        serves (tests/node/test_pod_fit.py). Never the preloaded image's ID: once the kubelet (1.36) has pulled an
        image ID with a pull Secret, a pod without that Secret is made to pull it again (seen on this node: a pod
        of the preloaded registry:3.1.1 then failed with ErrImagePull, there being no network)."""
        return self.registry(3, tags=["berth.test/private/registry:3.1.1"], labels={"berth.test/private": "true"})

    def registry(self, version: int, *, tags: Sequence[str] | None = None,
                 labels: dict[str, str] | None = None) -> Image:
        if version == 2:
            layer = self._registry_layer("registry2", REGISTRY2, _libraries(REGISTRY2))
            default_tags = ["docker.io/library/registry:2.8.2", "docker.io/library/registry:2"]
        else:
            binary = registry3_binary()
            assert binary is not None, f"${REGISTRY3_ENV} is unset"
            layer = self._registry_layer("registry3", binary, ())
            default_tags = ["docker.io/library/registry:3.1.1", "docker.io/library/registry:3"]
        config = {"Entrypoint": ["/entrypoint.sh"], "Cmd": ["/etc/docker/registry/config.yml"],
                  "ExposedPorts": {"5000/tcp": {}}, "Volumes": {"/var/lib/registry": {}},
                  "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
        if labels:
            config["Labels"] = dict(labels)
        return self.image(list(tags or default_tags), [self.busybox(), layer], config)

    def pause(self) -> Image:
        gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True).stdout
        key = _digest(RECIPE, PAUSE_C, gcc)

        def build(root: pathlib.Path, log: pathlib.Path) -> None:
            source = root.parent / "pause.c"
            source.write_text(PAUSE_C)
            _run(["gcc", "-Os", "-static", "-o", root / "pause", source], log)
            _run(["strip", root / "pause"], log)

        layer = self.layer("pause", key, build)
        config = {"Entrypoint": ["/pause"], "User": "65535:65535"}
        return self.image([f"localhost/berth-test/pause:{key[:12]}"], [layer], config)


def _chroot(root: pathlib.Path, args: Sequence[str], log: pathlib.Path) -> None:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8", "PIP_NO_CACHE_DIR": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    _run(["chroot", root, *args], log, env=env)


def _libraries(binary: pathlib.Path) -> list[pathlib.Path]:
    """The shared libraries a dynamic binary loads (Debian's docker-registry is linked against glibc)."""
    result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    if result.returncode != 0:  # "not a dynamic executable"
        return []
    out = result.stdout
    found = []
    for line in out.splitlines():
        words = line.split()
        path = words[2] if "=>" in words and len(words) > 2 else words[0]
        if path.startswith("/"):
            found.append(pathlib.Path(path))
    return found


def _whiteouts_to_oci(upper: pathlib.Path) -> None:
    """overlayfs marks a deleted file with a 0/0 character device; an image layer with `.wh.NAME`."""
    for path in list(upper.rglob("*")):
        if path.is_char_device() and os.stat(path, follow_symlinks=False).st_rdev == 0:
            path.unlink()
            (path.parent / f".wh.{path.name}").touch()
        elif path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                if os.getxattr(path, "trusted.overlay.opaque") == b"y":
                    (path / ".wh..wh..opq").touch()


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    out.addfile(info, io.BytesIO(data))


def build_all(builder: Builder | None = None) -> dict[str, Image]:
    builder = builder or Builder()
    return {"pause": builder.pause(), "registry2": builder.registry(2), "registry3": builder.registry(3),
            "berth": builder.berth()}


if __name__ == "__main__":  # python tests/support/clusters/images.py: build (or find) them all, print what they are
    for role, image in build_all().items():
        print(role, image.name, image.archive, f"{image.archive.stat().st_size >> 20} MiB")
