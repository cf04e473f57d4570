"""berth_supervise.steer on real sockets: a reuseport group, its program, accept queues and the group's order as the
kernel keeps it (a closed socket's slot goes to the last one), which the supervisor's handover relies on."""

from __future__ import annotations

import socket

from berth_supervise.spawn import listening_socket
from berth_supervise.steer import accept_queue, point_group_at


def _connect(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]


def test_the_program_sends_every_new_connection_to_the_socket_it_names():
    first = listening_socket("127.0.0.1", 0, reuse_port=True)
    port = first.getsockname()[1]
    point_group_at(first, 0)
    second = listening_socket("127.0.0.1", port, reuse_port=True)
    clients = []
    try:
        clients += _connect(port, 8)  # the successor is starting: all to the current one
        assert (accept_queue(first), accept_queue(second)) == (8, 0)
        point_group_at(second, 1)  # it answers: all to it (the program is the group's, set through any member)
        clients += _connect(port, 8)
        assert (accept_queue(first), accept_queue(second)) == (8, 8)
        for _ in range(8):
            first.accept()[0].close()  # the old registry takes what it was given
        assert accept_queue(first) == 0
        first.close()  # its last holder: it leaves the group
        # [second] now: the index 1 is past the end and the kernel's hash picks the one socket left; then 0.
        clients += _connect(port, 4)
        point_group_at(second, 0)
        clients += _connect(port, 4)
        assert accept_queue(second) == 16
        third = listening_socket("127.0.0.1", port, reuse_port=True)  # the next successor: steered past
        clients += _connect(port, 4)
        assert (accept_queue(second), accept_queue(third)) == (20, 0)
        third.close()
    finally:
        for client in clients:
            client.close()
        first.close()
        second.close()


def test_handshakes_are_asked_of_the_kernel_and_none_is_under_way_on_a_quiet_listener():
    from berth_supervise import steer

    listener = listening_socket("127.0.0.1", 0, reuse_port=True)
    try:
        client = socket.create_connection(listener.getsockname(), timeout=5)  # established, not a handshake
        assert isinstance(steer._diag_requests(), list)  # sock_diag answers here (the /proc table is the fallback)
        assert steer.handshakes(listener.getsockname()[1], begun_before=0.0) == 0
        client.close()
    finally:
        listener.close()


def test_a_socket_leaving_puts_the_program_past_the_end_and_a_closing_listener_resets_what_it_queued():
    """The kernel's side of the residual "closed without a response": [A, B, C] with the program on C;
    A leaves, C takes its slot ([C, B]) and the index 2 is past the end, so the kernel's hash gives B (a waiting
    registry's socket) some new connections; B's last holder then closes it, and what waited in its queue is reset
    (net.ipv4.tcp_migrate_req, off by default, would move it to C instead)."""
    a = listening_socket("127.0.0.1", 0, reuse_port=True)
    port = a.getsockname()[1]
    b = listening_socket("127.0.0.1", port, reuse_port=True)
    c = listening_socket("127.0.0.1", port, reuse_port=True)
    point_group_at(c, 2)
    clients = []
    try:
        clients += _connect(port, 8)
        assert (accept_queue(b), accept_queue(c)) == (0, 8)
        for _ in range(8):
            c.accept()[0].close()
        a.close()
        clients += _connect(port, 64)
        hashed_to_b = accept_queue(b)
        assert hashed_to_b > 0 and hashed_to_b + accept_queue(c) == 64
        for client in clients[8:]:
            client.sendall(b"GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\n")
        b.close()
        reset = 0
        for client in clients[8:]:
            client.settimeout(0.2)
            try:
                client.recv(1)
            except ConnectionResetError:
                reset += 1
            except TimeoutError:
                pass  # queued on C: still waits for an answer
        migrate = open("/proc/sys/net/ipv4/tcp_migrate_req").read().strip()
        assert reset == (0 if migrate == "1" else hashed_to_b)
    finally:
        for client in clients:
            client.close()
        for sock in (a, b, c):
            sock.close()
