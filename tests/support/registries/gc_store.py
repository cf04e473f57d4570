"""A registry store with many blobs, about half of them unreferenced: what a garbage collection has to walk.

Filled through the registry's own API (distribution spec: POST an upload, PUT it with ?digest=, PUT the
manifest), a few images at a time, then the manifests of every second image are deleted (storage.delete must be
enabled). Every blob is unique to its image, so the blobs garbage-collect must delete are exactly the deleted
images' (manifest, config, layers):

    store = fill(registry.url, images=125, layers=6)       # 125 x (manifest + config + 6 layers) = 1,000 blobs
    store.delete_every_second(registry.url)                # 63 images: 504 blobs unreferenced
    store.blobs_total, store.eligible_blobs, store.eligible_bytes
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import json
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from berth_agent.gc import report as gc_report

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class StoredImage:
    repo: str
    tag: str
    manifest_digest: str
    blobs: dict[str, int]  # every blob of the image, the manifest included: digest -> size


@dataclass
class Store:
    images: list[StoredImage]
    deleted: list[StoredImage] = field(default_factory=list)

    @property
    def blobs_total(self) -> int:
        return sum(len(image.blobs) for image in self.images)

    @property
    def eligible_blobs(self) -> set[str]:
        return {digest for image in self.deleted for digest in image.blobs}

    @property
    def eligible_bytes(self) -> int:
        return sum(size for image in self.deleted for size in image.blobs.values())

    @property
    def kept(self) -> list[StoredImage]:
        return [image for image in self.images if image not in self.deleted]

    def delete_every_second(self, base_url: str) -> None:
        """Delete the manifests of images 0, 2, 4, ...: their blobs are then referenced by nothing."""
        with _Client(base_url) as client:
            for image in self.images[::2]:
                status = client.request("DELETE", f"/v2/{image.repo}/manifests/{image.manifest_digest}")[0]
                if status != 202:
                    raise RuntimeError(f"DELETE manifest of {image.repo}:{image.tag} answered {status} "
                                       "(is storage.delete enabled?)")
                self.deleted.append(image)


class _Client:
    """One keep-alive HTTP connection to the registry."""

    def __init__(self, base_url: str) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.connection.close()

    def request(self, method: str, target: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
        self.connection.request(method, target, body=body, headers={"Content-Length": str(len(body)),
                                                                    **(headers or {})})
        response = self.connection.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = _digest(data)
        status, headers = self.request("POST", f"/v2/{repo}/blobs/uploads/")
        if status != 202:
            raise RuntimeError(f"POST upload to {repo} answered {status}")
        location = urllib.parse.urlsplit(headers["location"])
        query = urllib.parse.parse_qsl(location.query) + [("digest", digest)]
        target = location.path + "?" + urllib.parse.urlencode(query)
        status, _ = self.request("PUT", target, data, {"Content-Type": "application/octet-stream"})
        if status != 201:
            raise RuntimeError(f"PUT blob {digest} to {repo} answered {status}")
        return digest


def push_image(base_url: str, repo: str, tag: str, *, layers: int, layer_size: int) -> StoredImage:
    """An image of `layers` random layers and a config, all its own; returns what it stored."""
    with _Client(base_url) as client:
        blobs: dict[str, int] = {}
        descriptors = []
        for _ in range(layers):
            data = os.urandom(layer_size)
            descriptors.append({"mediaType": OCI_LAYER, "digest": client.push_blob(repo, data), "size": len(data)})
            blobs[descriptors[-1]["digest"]] = len(data)
        config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [
            d["digest"] for d in descriptors]}, "config": {"Labels": {"nonce": os.urandom(8).hex()}}}).encode()
        config_digest = client.push_blob(repo, config)
        blobs[config_digest] = len(config)
        manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {
            "mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)}, "layers": descriptors}).encode()
        status, _ = client.request("PUT", f"/v2/{repo}/manifests/{tag}", manifest, {"Content-Type": OCI_MANIFEST})
        if status != 201:
            raise RuntimeError(f"PUT manifest {repo}:{tag} answered {status}")
        blobs[_digest(manifest)] = len(manifest)
        return StoredImage(repo, tag, _digest(manifest), blobs)


def fill(base_url: str, *, images: int = 125, layers: int = 6, layer_size: int = 4096, repos: int = 10,
         workers: int = 4) -> Store:
    """Push `images` images (each `layers` + 2 blobs) spread over `repos` repositories, `workers` at a time."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(push_image, base_url, f"bench/app{index % repos}", f"v{index}", layers=layers,
                               layer_size=layer_size) for index in range(images)]
        return Store([future.result() for future in futures])


def blob_files(rootdirectory: Path | str) -> int:
    """Blobs on a filesystem registry's disk (each a `data` file under the blobs directory)."""
    return sum(1 for _ in (Path(rootdirectory) / gc_report.BLOBS_DIR).rglob("data"))
