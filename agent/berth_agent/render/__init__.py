"""Spec + mounted inputs -> config.yml and the files beside it: a pure function (config), its storage
section (storage), where the files go (paths), what the config points at (targets), and the result, which
carries its parsed document (rendered).
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "Distribution": ".config",
    "HTPASSWD_FILE": ".paths",
    "RedisTarget": ".targets",
    "RenderPaths": ".paths",
    "Rendered": ".rendered",
    "S3Target": ".targets",
    "TLS_CERT_FILE": ".paths",
    "TLS_KEY_FILE": ".paths",
    "render": ".config",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
