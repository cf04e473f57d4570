"""The held listening sockets of 3.x (steer.py says why one per registry): the current registry's socket, the
SO_REUSEPORT group as the kernel keeps it, the program naming the socket new connections go to, and the sockets
no registry uses any more."""

from __future__ import annotations

import socket
from collections.abc import Callable

from .protocol import split_addr
from .spawn import listening_socket
from .steer import inode, point_group_at


class ReuseportGroup:
    def __init__(self, listen: str, log: Callable[[str], None]) -> None:
        self.listen, self.log = listen, log
        self.listener: socket.socket | None = None  # the current registry's socket: a restart gets it again
        self.steering = False  # one socket per registry, new connections steered (steer.py); else one shared
        # Sockets no registry uses any more. A socket leaves the group only when its last holder closes it, and
        # the supervisor holds each one until its registry has exited: only the supervisor's own close makes one
        # leave, so `order` is always the kernel's (a leave a registry made while a successor joined, seen only
        # after, once put the successor's index where the old registry's socket was). Closed in close_sockets.
        self.unused: list[socket.socket] = []
        self.pointed = 0  # the group's program: the index new connections go to
        # The reuseport group as the kernel keeps it (socket inodes in join order; one that leaves gets the last
        # one moved into its slot), so the program can name the current registry's socket whoever else is in it.
        self.order: list[int] = []

    def hold(self) -> None:
        """The first socket: raises OSError when the address cannot be bound."""
        host, port = split_addr(self.listen)
        self.listener = listening_socket(host, port, reuse_port=True)
        self.log(f"holding the registry's listening socket on {self.listen}")
        self.order = [inode(self.listener)]
        self.steering = self.steer(0)

    def joined(self, sock: socket.socket) -> None:
        self.order.append(inode(sock))

    def left(self, number: int) -> None:
        """The kernel's reuseport_detach_sock: the last socket takes the slot of the one that left."""
        if number in self.order:
            slot = self.order.index(number)
            self.order[slot] = self.order[-1]
            self.order.pop()

    def successor_socket(self) -> socket.socket | None:
        """A socket of the successor's own in the current one's group (steered past it until it answers)."""
        if not self.steering or self.listener is None:
            return self.listener
        host, port = split_addr(self.listen)
        try:
            sock = listening_socket(host, port, reuse_port=True)
        except OSError as exc:
            self.log(f"cannot open a second socket on {self.listen} ({exc}): the successor shares the current one")
            return self.listener
        self.joined(sock)
        return sock

    def own(self, sock: socket.socket | None) -> bool:
        """Whether `sock` is a successor's own socket (steered to once it answers), not the shared one."""
        return self.steering and sock is not None and sock is not self.listener

    def serve_on(self, sock: socket.socket) -> socket.socket | None:
        """`sock` is the current registry's from now on: every new connection goes to it. The old one's back."""
        old, self.listener = self.listener, sock
        self.point_at_current()
        return old

    def steer(self, index: int) -> bool:
        """Point the group's program at socket `index`; False (logged) where the kernel cannot."""
        if self.listener is None:
            return False
        try:
            point_group_at(self.listener, index)
        except OSError as exc:
            self.log(f"cannot steer connections between registries ({exc}): they share one socket")
            return False
        self.pointed = index
        return True

    def point_at_current(self) -> None:
        if self.listener is None or not self.steering:
            return
        try:
            index = self.order.index(inode(self.listener))
        except (ValueError, OSError):
            return
        if index != self.pointed:
            self.steer(index)

    def drop_socket(self, sock: socket.socket | None, in_use: bool) -> None:
        """A socket no live registry uses any more (`in_use`: one restarted on it still serves there; its last
        user's exit brings it back): closed by close_sockets, never while a registry holds it."""
        if sock is None or sock is self.listener or sock.fileno() < 0 or any(sock is s for s in self.unused):
            return
        if in_use:
            return
        if not self.steering:
            sock.close()
            return
        self.unused.append(sock)

    def close_sockets(self) -> None:
        """Close the unused sockets whose leaving moves no socket the program names. The kernel moves the group's
        last socket into the slot of one that leaves, so a leave with the current socket last would leave the
        program past the end until it is pointed again, and the kernel's hash would meanwhile give new connections
        to any socket of the group, a stopped registry's included. Such a socket waits, steered past, until a
        successor has joined behind the current one (or it is the only other one: the hash then has one choice)."""
        current = self.slot(self.listener)
        for sock in list(self.unused):
            slot, last = self.slot(sock), len(self.order) - 1
            if current == last and slot is not None and slot != last and len(self.order) > 2:
                continue
            self.unused.remove(sock)
            if slot is not None:
                self.left(self.order[slot])
            sock.close()
            current = self.slot(self.listener)
            self.point_at_current()

    def regroup(self) -> None:
        """Close the sockets no registry uses when that moves no socket the program names, and keep the program
        on the current registry's."""
        self.close_sockets()
        self.point_at_current()

    def slot(self, sock: socket.socket | None) -> int | None:
        try:
            return self.order.index(inode(sock)) if sock is not None else None
        except (ValueError, OSError):
            return None

    def close(self, registry_sockets: list[socket.socket | None]) -> None:
        """At the stop: every socket, so connections are refused once the registries have closed theirs."""
        for sock in registry_sockets:
            if sock is not None and sock is not self.listener:
                sock.close()
        for sock in self.unused:
            sock.close()
        self.unused = []
        if self.listener is not None:
            self.listener.close()
            self.listener = None


__all__ = ["ReuseportGroup"]
