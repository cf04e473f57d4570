"""What the pod mounts, read and checked: the Secret volumes under the mount root (secret_volume, mounts),
COSI bucket credentials (cosi), and a Registry YAML file (registry_yaml). Every value comes out parsed (a
redis address, not a URL to parse again); every problem is an InputError naming the file, never the value.
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "DEFAULT_MOUNT_ROOT": ".mounts",
    "MountedInputs": ".mounts",
    "RedisAddress": ".mounts",
    "RegistryFileProblem": ".registry_yaml",
    "S3Credentials": ".mounts",
    "load_yaml": ".registry_yaml",
    "parse_redis_url": ".mounts",
    "read_inputs": ".mounts",
    "read_regular_file": ".registry_yaml",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
