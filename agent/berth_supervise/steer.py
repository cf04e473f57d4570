"""Which registry gets each new connection (3.x): one listening socket per registry, all bound with SO_REUSEPORT
to the one address, and a classic BPF program on their group that names the socket every new connection joins.

One socket shared by two processes is one accept queue: while the old and the new registry overlap both accept
from it, and a connection the old one accepts in the instant of its SIGTERM is closed without a response (Go's
Server.Shutdown; measured in docs/benchmarks.md). With a socket each, the supervisor steers new connections to
the successor once it answers, waits until the old socket's accept queue is empty, and only then SIGTERMs the old
registry: it never gets a connection it would drop. The kernel keeps a reuseport group as an array in join order;
a socket that leaves (its last holder closed it) is replaced by the last one, and an index past the end falls back
to the kernel's hash over every socket of the group. So outside a handover the group is [current] and the program
says 0; a successor joins as 1 (still steered to 0 while it starts: a successor that fails drops nothing); once
it answers the program says 1; once the old registry has exited the supervisor closes its copy of the old socket,
the successor moves to 0 and the program is pointed there (group.close_sockets: only the supervisor's close makes a
socket leave, so it always knows the group's order).

Standard library only: the program is one instruction packed with struct, its address taken from an array.
"""

from __future__ import annotations

import array
import os
import socket
import struct

SO_ATTACH_REUSEPORT_CBPF = 51  # linux/asm-generic/socket.h (since Linux 4.5)
BPF_RET_K = 0x06  # BPF_RET | BPF_K: return the constant
TCPI_UNACKED = 24  # offset of tcpi_unacked in struct tcp_info: for a listener, its accept queue's length
TCP_INFO_SIZE = 104
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/net/tcp's timer unit (USER_HZ)
SYNACK_TIMEOUT = 1.0  # TCP_TIMEOUT_INIT: a request's first SYN-ACK retransmit
NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY = 4, 20
NLM_DUMP = 0x301  # NLM_F_REQUEST | NLM_F_DUMP
NLMSG_ERROR, NLMSG_DONE = 2, 3
DIAG_SYN_RECV = 1 << 3 | 1 << 12  # TCPF_SYN_RECV | TCPF_NEW_SYN_RECV (request sockets)
DIAG_CONNECTED = 1 << 1 | 1 << 8  # TCPF_ESTABLISHED | TCPF_CLOSE_WAIT: a client's connection, kept alive or not
SYN_RECV = b"03"  # TCP_SYN_RECV in /proc/net/tcp's st column
CONNECTED = (b"01", b"08")


def point_group_at(sock: socket.socket, index: int) -> None:
    """New connections to the group `sock` belongs to go to its socket number `index` (join order)."""
    instruction = array.array("B", struct.pack("HBBI", BPF_RET_K, 0, 0, index))
    address, _ = instruction.buffer_info()
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, struct.pack("@HP", 1, address))


def accept_queue(sock: socket.socket) -> int:
    """How many connections wait in this listening socket's accept queue (established, not yet accepted)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_SIZE)
    return struct.unpack_from("I", info, TCPI_UNACKED)[0]


def inode(sock: socket.socket) -> int:
    return os.fstat(sock.fileno()).st_ino


def handshakes(port: int, begun_before: float) -> int:
    """Connections to `port` still in their handshake (SYN_RECV) that began over `begun_before` seconds ago: one
    whose SYN met the old socket before the switch joins the old accept queue when its last ACK comes (an RTT
    later); the ones begun since the switch are the successor's. A request's age is read from its SYN-ACK timer
    (first timeout 1 s; retransmitted: over a second old). Asked over sock_diag netlink, which filters by state in
    the kernel (/proc/net/tcp prints every TIME_WAIT entry first: 100 ms at 20,000 lines on a loaded node)."""
    try:
        requests = _diag_requests()
    except OSError:
        requests = _proc_requests()
    return sum(1 for local_port, retransmits, left, _inode in requests if local_port == port
               and (retransmits or SYNACK_TIMEOUT - left >= begun_before - 0.01))


def client_connections(pid: int, port: int) -> int:
    """Connections to `port` that process `pid` holds (ESTABLISHED or CLOSE_WAIT): a steered-away registry's kept-alive
    clients, which could still send it a request (and so an event) until they close."""
    held = _socket_inodes(pid)
    if not held:
        return 0
    try:
        found = _diag_requests(DIAG_CONNECTED)
    except OSError:
        found = _proc_connected()
    return sum(1 for local_port, _r, _t, number in found if local_port == port and number in held)


def _socket_inodes(pid: int) -> set[int]:
    found = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def _diag_requests(states: int = DIAG_SYN_RECV) -> list[tuple[int, int, float, int]]:
    """(local port, retransmits, seconds left on its timer, inode) of every TCP socket in `states`, IPv4 and IPv6."""
    found = []
    for family in (socket.AF_INET, socket.AF_INET6):
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
            request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, states) + bytes(48)
            diag.sendto(struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_DUMP, 1, 0) + request,
                        (0, 0))
            while (message := _diag_messages(diag.recv(65536), found)) is None:
                pass
            if not message:
                raise OSError("sock_diag answered with an error")
    return found


def _diag_messages(data: bytes, found: list[tuple[int, int, float, int]]) -> bool | None:
    """Append the inet_diag_msg records in one datagram; True at the dump's end, False on an error, else None."""
    offset = 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if kind == NLMSG_DONE:
            return True
        if kind == NLMSG_ERROR or length < 16:
            return False
        _family, _state, _timer, retransmits = struct.unpack_from("=BBBB", data, offset + 16)
        (local_port,) = struct.unpack_from("!H", data, offset + 20)
        (expires_ms,) = struct.unpack_from("=I", data, offset + 68)
        (number,) = struct.unpack_from("=I", data, offset + 84)  # idiag_inode
        found.append((local_port, retransmits, expires_ms / 1000, number))
        offset += (length + 3) & ~3
    return None


def _proc_connected() -> list[tuple[int, int, float, int]]:
    found = []
    for line in _lines():
        fields = line.split()
        if len(fields) < 10 or fields[3] not in CONNECTED:
            continue
        try:
            found.append((int(fields[1].rpartition(b":")[2], 16), 0, 0.0, int(fields[9])))
        except ValueError:
            continue
    return found


def _proc_requests() -> list[tuple[int, int, float, int]]:
    found = []
    for line in _lines():
        if b" 03 " not in line:  # most lines are not a handshake: skip the split
            continue
        fields = line.split()
        if len(fields) < 7 or fields[3] != SYN_RECV:
            continue
        try:
            found.append((int(fields[1].rpartition(b":")[2], 16), int(fields[6], 16),
                          int(fields[5].partition(b":")[2], 16) / CLOCK_TICKS, 0))
        except ValueError:
            continue
    return found


def _lines():
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table, "rb") as lines:
                yield from lines
        except OSError:
            continue


__all__ = ["accept_queue", "client_connections", "handshakes", "inode", "point_group_at"]
