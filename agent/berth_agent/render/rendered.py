"""What a render produces: config.yml and the files beside it, identified together by one sha256 (`identity`),
with the document config.yml holds, parsed once, and typed reads of what pre-flight and the applier act on."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import yaml

from .paths import HTPASSWD_FILE, OUTBOX_FILE, S3_CA_FILE, S3_CREDENTIALS_FILE, TOKEN_BUNDLE_FILE, TOKEN_JWKS_FILE
from .targets import ProxyTarget, RedisTarget, S3Target, proxy_target, redis_target, s3_target

# libyaml's loader when PyYAML has it: a config.yml parses in ~0.7 ms instead of ~9 ms (pure Python, loaded
# machine). Only a render read back from disk (last good, the config dir) is parsed at all.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DEFAULT_ADDR = ":5000"  # the registry's own default for http.addr


@dataclass(frozen=True, repr=False)
class Rendered:
    config: bytes  # config.yml, deterministic
    files: dict[str, bytes] = field(default_factory=dict)  # more files for config_dir, by relative name
    # The document `config` holds, when the caller has it (render() dumped it): then it is never parsed.
    parsed: dict[str, Any] | None = field(default=None, compare=False)
    # Where a file came from, for pre-flight messages (`spec...rootCertBundle (ConfigMap trust key ca.pem)`);
    # empty for a render read back from disk, whose messages name the file.
    origins: dict[str, str] = field(default_factory=dict, compare=False)

    @cached_property
    def identity(self) -> str:
        """The applied state's one name (status configHash, config_info, log lines, messages): sha256 hex over
        config.yml and every file beside it, each by name and sha256. Everything the registry reads is in these:
        the secrets it gets inline (proxy and S3 credentials, notification headers, http and redis secrets) in
        config.yml's bytes, the TLS pair, token trust and htpasswd as files. So a trust or TLS rotation, which
        leaves config.yml as it was, names a new state; only hashes go in, so no secret can be read back out."""
        return state_identity(self.config, self.files)

    @cached_property
    def document(self) -> dict[str, Any]:
        """config.yml as a mapping: what render() dumped, else parsed from `config` on first use, once."""
        if self.parsed is not None:
            return self.parsed
        loaded = yaml.load(self.config, Loader=_LOADER)
        return loaded if isinstance(loaded, dict) else {}

    @property
    def http(self) -> dict[str, Any]:
        section = self.document.get("http")
        return section if isinstance(section, dict) else {}

    @property
    def listen_addr(self) -> str:
        return str(self.http.get("addr", DEFAULT_ADDR))

    @property
    def serves_tls(self) -> bool:
        return bool(self.http.get("tls"))

    @property
    def drain_timeout(self) -> str | None:
        """http.draintimeout as written (a Go duration), None when absent."""
        value = self.http.get("draintimeout")
        return None if value is None else str(value)

    @cached_property
    def redis(self) -> RedisTarget | None:
        return redis_target(self.document)

    @cached_property
    def s3(self) -> S3Target | None:
        return s3_target(self.document, self.files.get(S3_CA_FILE), self.files.get(S3_CREDENTIALS_FILE))

    @cached_property
    def proxy(self) -> ProxyTarget | None:
        return proxy_target(self.document)

    @property
    def trust(self) -> dict[str, str]:
        """sha256 of each token trust file, by spec field (status.agents.<pod>.trust); empty without token auth."""
        files = (("rootCertBundle", TOKEN_BUNDLE_FILE), ("jwks", TOKEN_JWKS_FILE))
        return {field: hashlib.sha256(self.files[name]).hexdigest() for field, name in files if name in self.files}

    def restart_needed(self, previous: Rendered | None) -> bool:
        """True when the registry must restart to apply this render: it reads its config, TLS files and token
        trust (bundle, JWKS) once at start. The htpasswd file alone is re-read live
        (docs/upstream.md#dist-htpasswd-live), and the outbox's endpoints are the agent's (outbox/), so a change there
        needs no restart."""
        if previous is None:
            return True
        if self.config != previous.config:
            return True
        names = (set(self.files) | set(previous.files)) - {HTPASSWD_FILE, OUTBOX_FILE}
        return any(self.files.get(name) != previous.files.get(name) for name in names)

    @cached_property
    def credentials(self) -> str:
        """sha256 over every credential the registry reads: each side file (S3 keys, the gcs keyfile, TLS, token
        trust, htpasswd, CAs) and each config.yml value under a key that names a credential (storage keys and
        secrets, proxy username and password, http.secret, redis password). Notification headers are the
        outbox's (OUTBOX_FILE): no registry holds them."""
        digest = hashlib.sha256()
        for name in sorted(set(self.files) - {OUTBOX_FILE}):  # the outbox's: no registry reads them
            digest.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(self.files[name]).digest())
        document = {k: v for k, v in self.document.items() if k != "notifications"}
        for path, value in _credential_values(document, ""):
            digest.update(f"\0{path}\0{value}".encode())
        return digest.hexdigest()

    def retires_credential(self, previous: Rendered | None) -> bool:
        """Whether serving this render retires a credential `previous` served with: then the old registry must be
        gone within drainTimeout, so that the old credential may be revoked then
        (docs/decisions/0001-retirement-bounded-by-drain-timeout.md)."""
        return previous is not None and self.credentials != previous.credentials

    def __repr__(self) -> str:
        return f"Rendered(identity={self.identity!r}, files={sorted(self.files)!r})"


_CREDENTIAL_KEY = re.compile(r"key|secret|password|username|token|credential", re.I)


def _credential_values(node: Any, path: str) -> list[tuple[str, str]]:
    """(path, value) of each value under a key naming a credential, in document order."""
    if isinstance(node, dict):
        found = []
        for key, value in node.items():
            here = f"{path}.{key}"
            found += [(here, repr(value))] if _CREDENTIAL_KEY.search(str(key)) else _credential_values(value, here)
        return found
    if isinstance(node, list):
        return [item for index, value in enumerate(node) for item in _credential_values(value, f"{path}[{index}]")]
    return []


def state_identity(config: bytes, files: dict[str, bytes]) -> str:
    """Rendered.identity of config.yml `config` and `files` (by name relative to the config dir)."""
    digest = hashlib.sha256(config)
    for name in sorted(files):
        digest.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()


__all__ = ["DEFAULT_ADDR", "Rendered", "state_identity"]
