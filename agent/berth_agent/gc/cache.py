"""After a garbage collection: forget the blob descriptors the registry cached in redis.

`registry garbage-collect` deletes blobs from storage and never touches the blob descriptor cache
(distribution/distribution#2945). A registry whose cache still has a deleted blob answers HEAD with 200 for it:
a client then skips uploading that layer on its next push, and a later pull of that image fails. The in-memory
cache goes with the registry process, and every replica restarts when it returns from read-only to writable
(the hitless reload), so only the redis cache outlives a run. Its global descriptors are the hashes
`blobs::<digest>` (registry/storage/cache/redis/redis.go, 2.8 and 3.1 alike); the repository-scoped lookup reads
that global hash too, so deleting the `blobs::*` keys makes every lookup fall through to storage, which answers
for what exists. The cache refills on the next Stat. Harbor clears the same keys after its GC.

Runs in the runner's worker thread, after the command ended and before the replicas return to writable.
"""

from __future__ import annotations

import errno
import socket
import ssl
from typing import Any

from ..apply.preflight_net import REDIS_TIMEOUT_SECONDS
from ..apply.redis_wire import RedisReplyError, encode, read_reply, tls_context
from ..render.targets import RedisTarget, redis_target

DESCRIPTOR_PATTERN = "blobs::*"
SCAN_COUNT = 1000


class CachePurgeError(Exception):
    """The cache could not be purged; the message names spec.redis and the address, never a password."""


def uses_redis_cache(config: dict[str, Any]) -> bool:
    """Whether a rendered config keeps blob descriptors in redis (storage.cache.blobdescriptor: redis)."""
    storage = config.get("storage") if isinstance(config.get("storage"), dict) else {}
    cache = storage.get("cache") if isinstance(storage.get("cache"), dict) else {}
    return cache.get("blobdescriptor") == "redis" and redis_target(config) is not None


def purge_blob_descriptors(config: dict[str, Any], *, timeout: float = REDIS_TIMEOUT_SECONDS,
                           context: ssl.SSLContext | None = None) -> int:
    """Delete every `blobs::*` key in the redis database the config names; the number of keys deleted.

    SCAN (never KEYS: it would block a large redis) page by page, each page's keys deleted at once.
    """
    target = redis_target(config)
    if target is None:
        return 0
    where = f"spec.redis (redis at {target.addr})"
    deleted = 0
    try:
        with _connect(target, timeout, context) as stream:
            cursor = "0"
            while True:
                page = _call(stream, "SCAN", cursor, "MATCH", DESCRIPTOR_PATTERN, "COUNT", str(SCAN_COUNT))
                cursor = page[0].decode("ascii")
                keys = [key.decode("utf-8", "replace") for key in page[1]]
                if keys:
                    deleted += _call(stream, "DEL", *keys)
                if cursor == "0":
                    return deleted
    except RedisReplyError as exc:
        raise CachePurgeError(f"{where}: redis answered {exc.code} while clearing the blob descriptor cache") from None
    except ssl.SSLError as exc:
        raise CachePurgeError(f"{where}: TLS to redis failed ({exc.reason or type(exc).__name__})") from None
    except TimeoutError:
        raise CachePurgeError(f"{where}: redis did not answer within {timeout:g}s") from None
    except (OSError, ValueError, IndexError, TypeError, AttributeError) as exc:
        name = errno.errorcode.get(getattr(exc, "errno", None) or -1, type(exc).__name__)
        raise CachePurgeError(f"{where}: cannot clear the blob descriptor cache ({name})") from None


class _connect:
    """A connection that has sent AUTH and SELECT, as the registry's own client does."""

    def __init__(self, target: RedisTarget, timeout: float, context: ssl.SSLContext | None) -> None:
        self.target, self.timeout, self.context = target, timeout, context
        self.sock: socket.socket | None = None

    def __enter__(self):
        target = self.target
        raw = socket.create_connection((target.host, target.port), timeout=self.timeout)
        try:
            sock = raw
            if target.tls:
                sock = (self.context or tls_context(target.rootcas)).wrap_socket(raw, server_hostname=target.host)
            sock.settimeout(self.timeout)
        except BaseException:
            raw.close()
            raise
        self.sock = sock
        stream = sock.makefile("rwb")
        if target.password is not None:
            _call(stream, "AUTH", *((target.username,) if target.username else ()), target.password)
        if target.db:
            _call(stream, "SELECT", str(target.db))
        return stream

    def __exit__(self, *exc_info: object) -> None:
        if self.sock is not None:
            self.sock.close()


def _call(stream, *args: str) -> Any:
    stream.write(encode(*args))
    stream.flush()
    return read_reply(stream)


__all__ = ["CachePurgeError", "purge_blob_descriptors", "uses_redis_cache"]
