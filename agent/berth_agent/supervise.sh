#!/bin/sh
# Berth supervisor: the registry container's command (`sh /etc/berth/supervise.sh`).
#
# The registry reads its config once at start and has no reload (field-notes §1), so the agent applies a new
# config by sending SIGTERM to the registry process; this script starts it again at once. Restarting here,
# inside the container, means a reload never shows as a container restart and never meets the kubelet's
# growing restart backoff (field-notes §3). POSIX sh only: the official registry image has busybox, no bash.
#
# Environment: BERTH_CONFIG (default /etc/berth/config.yml), BERTH_REGISTRY_BIN (default registry).

config="${BERTH_CONFIG:-/etc/berth/config.yml}"
registry_bin="${BERTH_REGISTRY_BIN:-registry}"
child=""
stopping=""
status=0

log() {
    echo "berth-supervise: $*" >&2
}

# The kubelet stops the container with SIGTERM; Ctrl-C sends SIGINT. Either way the registry gets SIGTERM,
# the signal on which it drains in-flight requests (field-notes §1, §6; SIGINT would kill 2.8 at once), and
# this script exits once the registry has finished, with its status. Never exec: the agent signals the
# registry process, and this script must outlive it to start the next one.
stop() {
    stopping="$1"
    if [ -n "$child" ]; then
        log "received SIG$1, stopping registry (pid $child)"
        kill -TERM "$child" 2>/dev/null
    fi
}
trap 'stop TERM' TERM
trap 'stop INT' INT

# The agent writes the config before the registry may start: a registry started without its htpasswd file
# would create one with a random password (field-notes §1).
if [ ! -f "$config" ]; then
    log "waiting for $config"
    while [ ! -f "$config" ]; do
        if [ -n "$stopping" ]; then
            exit 143
        fi
        sleep 0.1
    done
fi

while [ -z "$stopping" ]; do
    started=$(date +%s)
    "$registry_bin" serve "$config" &
    child=$!
    log "started registry (pid $child)"
    if [ -n "$stopping" ]; then
        kill -TERM "$child" 2>/dev/null  # the signal came before $child was known
    fi
    # wait returns early when a trapped signal arrives; keep waiting until the registry itself has exited.
    while :; do
        wait "$child"
        status=$?
        if ! kill -0 "$child" 2>/dev/null; then
            # Gone. If a signal interrupted the wait just as it exited, the status above is the signal's
            # (>128): a second wait collects the registry's own (127 when there is nothing left to collect).
            wait "$child" 2>/dev/null
            again=$?
            if [ "$again" -ne 127 ]; then
                status=$again
            fi
            break
        fi
    done
    log "registry (pid $child) exited with status $status"
    child=""
    if [ -n "$stopping" ]; then
        break
    fi
    # A registry that fails right at start (a refused config, a port in use) would otherwise restart in a
    # hot loop; a clean exit (status 0, the agent's SIGTERM after draining) restarts at once.
    if [ "$status" -ne 0 ] && [ $(($(date +%s) - started)) -lt 2 ]; then
        sleep 1
    fi
done
exit "$status"
