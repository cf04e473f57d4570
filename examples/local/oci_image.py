"""Write a tiny OCI image layout that skopeo can push, with no network and nothing but Python's standard library.

    python3 examples/local/oci_image.py /tmp/hello
    skopeo copy --dest-tls-verify=false oci:/tmp/hello docker://127.0.0.1:5000/demo/hello:1

The image has one layer holding one file (`hello.txt`, or `--file NAME=TEXT`), a config and a manifest. The
same arguments give the same bytes, so the same digest, every time: tar headers carry no time, owner or mode
from this machine. It is an image to push and pull, not one to run (there is no program in it).
Berth's tests build their images with `write_layout` too (tests/support/registries/registry.py).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


def layer_tar(files: dict[str, bytes]) -> bytes:
    """An uncompressed layer tar of `files` (name -> contents), with fixed metadata so it is reproducible."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            info.uid, info.gid, info.uname, info.gname = 0, 0, "", ""
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_layout(layout: Path, layers: list[dict[str, bytes]]) -> tuple[str, dict[str, bytes]]:
    """Write an OCI image layout at `layout` with one layer per dict of files; returns (manifest digest, blobs).

    `blobs` maps every digest the image references (manifest, config, layers) to its bytes.
    """
    layout = Path(layout)
    blob_dir = layout / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    blobs: dict[str, bytes] = {}

    def put(data: bytes, media_type: str) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (blob_dir / digest.split(":", 1)[1]).write_bytes(data)
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    layer_descriptors = [put(layer_tar(files), OCI_LAYER) for files in layers]
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": {},
        # Uncompressed layers: each diff_id is the layer's own digest.
        "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layer_descriptors]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": put(config, OCI_CONFIG),
        "layers": layer_descriptors,
    }, sort_keys=True).encode()
    manifest_descriptor = put(manifest, OCI_MANIFEST)
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    # One manifest, no ref name: `oci:DIR` (no tag) selects it.
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest_descriptor]}))
    return manifest_descriptor["digest"], blobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="oci_image.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("layout", type=Path, help="directory to write the OCI image layout into")
    parser.add_argument("--file", action="append", default=[], metavar="NAME=TEXT",
                        help="a file of the image's one layer (repeatable; default hello.txt)")
    args = parser.parse_args(argv)
    files: dict[str, bytes] = {}
    for item in args.file:
        name, sep, text = item.partition("=")
        if not sep or not name:
            parser.error(f"--file wants NAME=TEXT, not {item!r}")
        files[name] = text.encode()
    digest, _ = write_layout(args.layout, [files or {"hello.txt": b"hello from Berth\n"}])
    print(f"wrote oci:{args.layout} ({digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
