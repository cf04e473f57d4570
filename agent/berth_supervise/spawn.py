"""Start a process: fork, set up its file descriptors, exec; return once the exec has happened.

The parent learns of the exec through a close-on-exec pipe (end of file: exec'd; bytes: why not), so a pid it
writes to a state file always names the program itself, never a forked copy of the supervisor. Every other
descriptor of the supervisor is non-inheritable (PEP 446), so a child gets exactly stdin, stdout, stderr and, for
a registry on the held socket, fd 3 with LISTEN_FDS=1 and LISTEN_PID set to its own pid (go-systemd's activation
checks both).
"""

from __future__ import annotations

import fcntl
import os
import select
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from .protocol import S3_CREDENTIALS_NAME

LISTEN_FD = 3  # SD_LISTEN_FDS_START


class SpawnError(OSError):
    """The exec failed (a missing binary, no permission): the child exited 127 without running anything."""


def spawn(argv: list[str], env: Mapping[str, str], *, stdout: int, listener: socket.socket | None = None,
          stdin: int | None = None) -> int:
    """The pid of `argv` running with `env`, its stdout and stderr on `stdout`, and `listener` as fd 3."""
    ready, report = os.pipe()  # both close-on-exec
    null = os.open(os.devnull, os.O_RDONLY) if stdin is None else stdin
    pid = os.fork()
    if pid == 0:  # the child: nothing here may return
        try:
            os.close(ready)
            report = fcntl.fcntl(report, fcntl.F_DUPFD_CLOEXEC, 10)  # above the descriptors set up below
            os.dup2(null, 0)
            os.dup2(stdout, 1)
            os.dup2(stdout, 2)
            child_env = dict(env)
            if listener is not None:
                if listener.fileno() == LISTEN_FD:
                    os.set_inheritable(LISTEN_FD, True)
                else:
                    os.dup2(listener.fileno(), LISTEN_FD)  # dup2 clears close-on-exec on fd 3
                child_env.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
            os.execvpe(argv[0], argv, child_env)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, then gone
            try:
                os.write(report, f"{type(exc).__name__}: {exc}".encode(errors="replace")[:1000])
            finally:
                os._exit(127)
    os.close(report)
    if stdin is None:
        os.close(null)
    try:
        why = b""
        while chunk := os.read(ready, 1024):
            why += chunk
    finally:
        os.close(ready)
    if why:
        os.waitpid(pid, 0)
        raise SpawnError(f"could not run {argv[0]}: {why.decode(errors='replace')}")
    return pid


def version_output(argv: list[str], env: Mapping[str, str], timeout: float = 10.0) -> bytes:
    """What `argv` prints (stdout and stderr) before it exits or `timeout` passes (then it is killed)."""
    read_end, write_end = os.pipe()
    try:
        pid = spawn(argv, env, stdout=write_end)
    finally:
        os.close(write_end)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0 and select.select([read_end], [], [], left)[0]:
            chunk = os.read(read_end, 4096)
            if not chunk:
                break
            output += chunk
    finally:
        os.close(read_end)
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    return output


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket listening on host:port ("" or "::": every address, IPv6 and IPv4 where the host has both);
    `reuse_port`: SO_REUSEPORT, so that each registry can have its own socket on the address (steer.py)."""
    if host in ("", "::", "0.0.0.0"):
        if host != "0.0.0.0" and socket.has_dualstack_ipv6():
            return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True,
                                        backlog=socket.SOMAXCONN, reuse_port=reuse_port)
        return socket.create_server(("0.0.0.0", port), backlog=socket.SOMAXCONN, reuse_port=reuse_port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=socket.SOMAXCONN, reuse_port=reuse_port)


def free_loopback_port(host: str) -> int:
    """A port the kernel has just given out on `host` (closed again: the registry binds it moments later)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind host:port now, as Go's does (SO_REUSEADDR: a TIME_WAIT does not hold it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


# What the AWS SDK's credential chains ask before a shared credentials file (2.8.2 s3.go:413-422; 3.1.1 through
# aws-sdk-go's default chain: the environment's key, then web identity): left out when the file is there.
AWS_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                      "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE")


def registry_env(base: Mapping[str, str], config: Path) -> dict[str, str]:
    """The environment of a registry process (serve or garbage-collect) on `config`. With temporary S3
    credentials beside it the SDK is pointed at their file, and the keys the chain would ask first are left out:
    the Secret's key wins, as a long-lived one does from config.yml."""
    env = dict(base)
    credentials = config.parent / S3_CREDENTIALS_NAME
    if credentials.is_file():
        for name in AWS_CREDENTIAL_ENV:
            env.pop(name, None)
        env["AWS_SHARED_CREDENTIALS_FILE"] = str(credentials)
    return env


def exit_status(wait_status: int) -> int:
    """The status as a shell reports it: the exit code, or 128+N when signal N ended the process."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


__all__ = ["LISTEN_FD", "SpawnError", "exit_status", "free_loopback_port", "listening_socket", "port_is_free",
           "registry_env", "spawn", "version_output"]
