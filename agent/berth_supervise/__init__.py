"""berth-supervise: the registry container's command
(docs/decisions/0005-berth-supervise-in-the-standard-library.md), in Python with the standard library only.

It is the parent of every registry process of its container. It starts the registry once config.yml exists,
restarts it when it exits (with a pause after a quick failure), hands over to a successor when the agent asks,
runs garbage-collect beside it, and copies each process's output, redacted, to the container log and to
registry-output. For Distribution 3 (BERTH_LISTEN_ADDR set) it owns the registry's listening sockets: one per
registry in one SO_REUSEPORT group, passed as fd 3 (socket activation: LISTEN_FDS=1, LISTEN_PID = the child's
pid), so a reload never leaves the port without a listener, and new connections go to the successor before the
old registry stops.

Layout, top to bottom: protocol (every file, marker and signal it shares with the agent, written and read: the
agent imports that module and no other of this package), settings (its environment), write (its log, a whole
buffer to a fd, a signal), lines (whole-line output with the notification-header redaction), spawn (fork and exec
with the socket), steer (which registry's socket gets new connections), notify (what a steered-away registry waits
for), gc_child (the garbage-collect command it runs for the agent); the parts, one job each: registry (the
processes), signals (the signal pipe), relay (each registry's output), backoff (when an exited registry starts
again), ports (debug ports), overlapped_handover (the 2.8 handover), group (the held sockets' reuseport group),
waiting (steered-away registries), held_socket (the 3.x handover's state machine); main (the loop that wires them).
It imports nothing of the agent, of berth_api or outside the standard library, and nothing heavy of the standard
library (no typing, no importlib.metadata but for --version): every registry pod pays for its memory (a bare Python
is about 10 MiB).
"""
