"""spec.config.proxy: the registry as a pull-through cache of one upstream (docs/design.md §4.6).

Distribution's `proxy` section (configuration.go): `remoteurl`, `username`, `password` (2.8 and 3.x); `ttl` and
`cachewritetimeout` (3.x only). A proxy registry refuses pushes. Only one upstream per registry process.
"""

from __future__ import annotations

from pydantic import Field

from .types import ApiModel, Duration, ObjectName, v3_only_message

# The proxy fields Distribution 2.8 does not know (API name), refused on 2.8 by the model and the CRD.
PROXY_V3_FIELDS = ("ttl", "cacheWriteTimeout")
PROXY_PATH = "spec.config.proxy"
# Why garbageCollection is refused on a proxy (measured on 2.8.2 and 3.1.1,
# docs/decisions/0021-no-garbage-collection-on-a-proxy.md): the read-only mode a collection runs under does not stop a
# proxy from writing what it pulls through, so a sweep would race the cache's own writes; the cache expires its content
# itself.
GC_PROXY_MESSAGE = ("garbageCollection cannot run on a pull-through cache (config.proxy): read-only mode does not "
                    "stop a proxy from writing what it pulls through, so a collection would race the cache's own "
                    "writes (distribution#4443), and the cache expires content itself (proxy.ttl on Distribution 3, "
                    "7 days on 2.8)")


def proxy_v3_message(field: str) -> str:
    return v3_only_message(f"config.proxy.{field}")


class ProxyCredentials(ApiModel):
    secret_name: ObjectName = Field(
        alias="secretName",
        description="Secret with the keys username and password (the kubernetes.io/basic-auth layout) that the "
        "registry authenticates to the upstream with: a Docker Hub access token, a robot account. A change is "
        "checked against the upstream, then applied with a hitless restart.")


class Proxy(ApiModel):
    """Pull-through cache of one upstream registry. The registry refuses pushes while this is set."""

    remote_url: str = Field(
        alias="remoteURL", min_length=1, max_length=2048, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        description="URL of the upstream registry, e.g. https://registry-1.docker.io (the registry asks its "
        "/v2/ at start and cannot start while it does not answer).")
    credentials: ProxyCredentials | None = Field(
        None, description="Credentials for the upstream; absent for an anonymous upstream. On Distribution 2 "
        "only an upstream with token auth (a Bearer challenge, as Docker Hub) can use them.")
    ttl: Duration | None = Field(
        None, description="How long cached content is kept before it is fetched again (Distribution 3 only; "
        "its default 168h; 0 keeps it for ever).")
    cache_write_timeout: Duration | None = Field(
        None, alias="cacheWriteTimeout",
        description="Bound on writing a pulled-through blob into the cache (Distribution 3.1 and later only).")

    def v3_fields_set(self) -> list[str]:
        """The Distribution-3-only fields this spec sets, by API name."""
        values = {"ttl": self.ttl, "cacheWriteTimeout": self.cache_write_timeout}
        return [name for name in PROXY_V3_FIELDS if values[name] is not None]


__all__ = ["GC_PROXY_MESSAGE", "PROXY_PATH", "PROXY_V3_FIELDS", "Proxy", "ProxyCredentials", "proxy_v3_message"]
