"""What a render produces: config.yml and the files beside it, identified by the config's sha256."""

from __future__ import annotations

from dataclasses import dataclass, field

from .paths import TLS_CERT_FILE, TLS_KEY_FILE


@dataclass(frozen=True, repr=False)
class Rendered:
    config: bytes  # config.yml, deterministic
    files: dict[str, bytes] = field(default_factory=dict)  # more files for config_dir, by relative name
    config_hash: str = ""  # sha256 hex of config

    def restart_needed(self, previous: Rendered | None) -> bool:
        """True when the registry must restart to apply this render: it reads its config and TLS files once at
        start. The htpasswd file alone is re-read live (field-notes §1), so a change there needs no restart."""
        if previous is None:
            return True
        if self.config != previous.config:
            return True
        return any(self.files.get(name) != previous.files.get(name) for name in (TLS_CERT_FILE, TLS_KEY_FILE))

    def __repr__(self) -> str:
        return f"Rendered(config_hash={self.config_hash!r}, files={sorted(self.files)!r})"


__all__ = ["Rendered"]
