"""Each registry's debug port: one no other live registry holds (a failed debug bind is fatal,
docs/upstream.md#dist-debug-server), named with its pid in registry-metrics for the agent's stable metrics endpoint."""

from __future__ import annotations

from collections.abc import Callable

from .spawn import free_loopback_port, port_is_free


class DebugPorts:
    def __init__(self, ports: tuple[int, ...], host: str, log: Callable[[str], None]) -> None:
        self.ports, self.host, self.log = ports, host, log
        self.refused: set[int] = set()  # debug ports a registry could not bind since the last handover

    def pick(self, held: set[int | None], *, any_free: bool) -> int | None:
        """The first of the debug ports no live registry holds (`held`) and none failed to bind since the last
        handover; with `any_free` (on the held socket, where the successor's own port is how it is seen
        answering) a free one otherwise."""
        for port in self.ports:
            if port in held or port in self.refused:
                continue
            if not port_is_free(self.host, port):
                # Another process holds it. Started on it, the registry would die of it
                # (docs/upstream.md#dist-debug-server), 2.8 perhaps only after it answered on its own port (its debug
                # listener runs in a goroutine).
                self.refused.add(port)
                self.log(f"could not listen on debug port {port}: another process holds it; not used until the "
                         "next reload")
                continue
            return port
        if any_free:
            return free_loopback_port(self.host)
        return None

    def refuse(self, port: int) -> None:
        self.refused.add(port)

    def new_reload(self) -> None:
        """A new reload tries every port again."""
        self.refused.clear()


__all__ = ["DebugPorts"]
