"""Free TCP ports on 127.0.0.1 for the services tests start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (the OS picks it; the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
    """Block until something accepts connections on host:port; TimeoutError after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s") from None
            time.sleep(0.02)
