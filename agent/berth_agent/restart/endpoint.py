"""Where the registry listens: the rendered http.addr, as the probe connects to it and /proc shows its socket."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    """Where the registry listens, from the rendered http.addr (and whether it serves TLS).

    `host` is where to connect (a wildcard listener answers on loopback); `bind` is the address as configured
    ("" for a wildcard), which is what /proc/net/tcp shows for the listening socket.
    """

    host: str
    port: int
    tls: bool = False
    bind: str | None = None  # None: the same as host

    @classmethod
    def from_addr(cls, addr: str, *, tls: bool = False) -> Endpoint:
        host, _, port = addr.rpartition(":")
        host = host.strip("[]")
        bind = host
        if host in ("", "0.0.0.0", "::"):
            host, bind = "127.0.0.1", ""  # a wildcard listener answers on loopback too
        return cls(host, int(port), tls, bind)


__all__ = ["Endpoint"]
