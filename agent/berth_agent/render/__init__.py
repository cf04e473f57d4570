"""Spec + mounted inputs -> config.yml and the files beside it: a pure function (config), its storage
section (storage), where the files go (paths), and the result, which carries its parsed document (rendered).
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "Distribution": ".config",
    "HTPASSWD_FILE": ".paths",
    "RenderPaths": ".paths",
    "Rendered": ".rendered",
    "TLS_CERT_FILE": ".paths",
    "TLS_KEY_FILE": ".paths",
    "render": ".config",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
