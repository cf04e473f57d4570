#!/bin/sh
# Berth supervisor: the registry container's command (`sh /etc/berth/supervise.sh`).
#
# The registry reads its config once at start and has no reload (field-notes §1), so the agent applies a new
# config by restarting the registry process; this script starts the new one. Restarting here, inside the
# container, means a reload never shows as a container restart and never meets the kubelet's growing restart
# backoff (field-notes §3). POSIX sh only: the official registry image has busybox, no bash.
#
# Overlapped restart (docs/design.md §4.2): on SIGTERM the registry closes its listener at once and then
# drains its in-flight requests for up to draintimeout (field-notes §7). The agent names the old process's
# pid in the handover file, sends it that SIGTERM, waits until it no longer holds its listening socket and
# sends this script SIGUSR1: the new registry starts then, while the old one keeps draining in the background. Every process
# started here is tracked; SIGTERM/SIGINT go to all of them, and the script exits when all are gone.
#
# The registry's output goes through one `tee` (started once, reading a FIFO the script keeps open) to the
# container log as before and into registry-output beside the config: the agent quotes the registry's own error
# when a config fails (registry_output.py). When a registry exits, that file is copied to registry-output.1 and
# emptied for the next start, which bounds it per start; the agent empties it when a long run makes it large.
# The script's pid goes to supervisor.pid, so the agent can tell a missing supervisor from a quiet one.
#
# Environment: BERTH_CONFIG (default /etc/berth/config.yml), BERTH_REGISTRY_BIN (default registry),
# BERTH_HANDOVER (default handover beside the config), BERTH_STATE_DIR (default the config's directory).

config="${BERTH_CONFIG:-/etc/berth/config.yml}"
registry_bin="${BERTH_REGISTRY_BIN:-registry}"
handover_file="${BERTH_HANDOVER:-${config%/*}/handover}"
# Our own files: the config volume outside Kubernetes; in a pod the registry container mounts it read-only and
# the operator points BERTH_STATE_DIR at the pod's shared tmp volume, which the agent reads too.
state="${BERTH_STATE_DIR:-${config%/*}}"
output="$state/registry-output"
fifo="$state/.registry-output.fifo"
tee_pid=""
current=""      # the registry serving (or starting) on the newest config
draining=""     # older registries finishing their in-flight requests after a handover
stopping=""
handover=""     # set by SIGUSR1: the agent says the current registry stopped listening
handed_over=""  # the current registry was started by a handover (a lost bind race is retried at once)
retries=0
status=0
last=0

log() {
    echo "berth-supervise: $*" >&2
}

# The kubelet stops the container with SIGTERM; Ctrl-C sends SIGINT. Either way every registry gets SIGTERM,
# the signal on which it drains in-flight requests (field-notes §1, §6; SIGINT would kill 2.8 at once), and
# this script exits once all have finished. Never exec: the agent signals the registry process, and this
# script must outlive it to start the next one.
stop() {
    stopping="$1"
    for pid in $current $draining; do
        log "received SIG$1, stopping registry (pid $pid)"
        kill -TERM "$pid" 2>/dev/null
    done
}
trap 'stop TERM' TERM
trap 'stop INT' INT
trap 'handover=1' USR1
# A draining registry that exits interrupts the wait for the current one, so its status is logged when it ends.
trap ':' CHLD

# The first non-zero status of a registry stopped at the end is this script's status (0 when all drained cleanly).
note() {
    if [ "$status" -eq 0 ]; then
        status=$1
    fi
}

# The tee that copies the registry's output to our stdout and to $output. It reads the FIFO, which this script
# holds open read-write on fd 3 (so a registry's write never finds it without a reader, and tee sees no end of
# file between two registries); it gets fd 3 closed, so it ends once the script and every registry are gone.
start_tee() {
    tee -a "$output" <"$fifo" 3>&- &
    tee_pid=$!
}

start_registry() {
    if [ -n "$tee_pid" ] && ! kill -0 "$tee_pid" 2>/dev/null; then
        start_tee  # someone killed it: registries writing to a full FIFO would block
    fi
    # The marker tells the agent this supervisor takes handovers (an older one would die of SIGUSR1).
    BERTH_SUPERVISE_HANDOVER=1 "$registry_bin" serve "$config" >&3 2>&3 &
    current=$!
    started=$(date +%s)  # after the start: forking date first would add to the time without a listener
    log "started registry (pid $current)"
    if [ -n "$stopping" ]; then
        kill -TERM "$current" 2>/dev/null  # the signal came before $current was known
    fi
}

# Wait until registry $1 has ended and set $code to its exit status. A trapped signal (or a CHLD) interrupts
# wait with a status >128; once the process is gone a last wait collects its own status (127 when an earlier
# wait already did: then $code already holds it).
collect() {
    while kill -0 "$1" 2>/dev/null; do
        wait "$1"
        code=$?
    done
    wait "$1" 2>/dev/null
    again=$?
    if [ "$again" -ne 127 ]; then
        code=$again
    fi
}

# Collect draining registries that have exited (the shell reaps them while it waits for $current). Logged
# only: the exit status of the script is about the registries it stops, not about earlier reloads.
reap() {
    left=""
    for pid in $draining; do
        if kill -0 "$pid" 2>/dev/null; then
            left="$left $pid"
        else
            wait "$pid"
            code=$?
            log "registry (pid $pid) exited with status $code after draining"
        fi
    done
    draining="$left"
}

# SIGUSR1: start the successor if the handover names the current registry (a late or repeated signal, or one
# for a registry that already exited and was replaced, changes nothing).
take_handover() {
    named=""
    if [ -f "$handover_file" ]; then
        while read -r pid _rest; do
            if [ "$pid" = "$current" ]; then
                named=1
            fi
        done < "$handover_file"
    fi
    if [ -z "$named" ] || ! kill -0 "$current" 2>/dev/null; then
        return
    fi
    log "registry (pid $current) stopped listening, draining; starting its successor"
    draining="$draining $current"
    handed_over=1
    retries=0
    start_registry
}

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

mkdir -p "$state" 2>/dev/null
echo "$$" >"$state/supervisor.pid"
if [ ! -p "$fifo" ]; then
    rm -f "$fifo"
    mkfifo -m 600 "$fifo"
fi
if exec 3<>"$fifo"; then
    start_tee
else
    exec 3>&2  # no FIFO (a read-only volume?): the registry's output goes straight to the log, as before
fi
start_registry
while [ -z "$stopping" ]; do
    # wait returns early when a trapped signal arrives.
    wait "$current"
    code=$?
    if [ -n "$handover" ]; then
        handover=""
        take_handover
        reap
        continue
    fi
    if [ -n "$stopping" ]; then
        break
    fi
    if kill -0 "$current" 2>/dev/null; then
        reap  # interrupted by a signal (a draining registry ended?); the current one still runs
        continue
    fi
    collect "$current"  # gone, or a zombie: its own status, not the signal's
    log "registry (pid $current) exited with status $code"
    current_was=$current
    current=""
    last=$code
    reap
    # A registry that fails right at start (a refused config, a port in use) would otherwise restart in a hot
    # loop; a clean exit (status 0: a SIGTERM without handover) restarts at once. Right after a handover a
    # quick failure is most likely a bind that lost the race with the old listener: retried within 10 ms.
    lived=$(($(date +%s) - started))
    # For the agent, which counts unexpected exits: "pid status seconds-it-ran" (one line, replaced each time).
    echo "$current_was $code $lived" >"$state/registry-exit"
    if [ "$code" -ne 0 ] && [ "$lived" -lt 2 ]; then
        if [ -n "$handed_over" ] && [ "$retries" -lt 5 ]; then
            retries=$((retries + 1))
            sleep 0.01
        else
            handed_over=""
            sleep 1
        fi
    else
        handed_over=""
    fi
    if [ -n "$stopping" ]; then
        break
    fi
    # What it said, for the agent (after the pause, tee has written it all); the next one starts on an empty file.
    cp "$output" "$output.1" 2>/dev/null
    : >"$output"
    start_registry
done

# Stopping: wait until every registry has finished draining. The status is the first failure, else 0.
if [ -n "$current" ]; then
    collect "$current"
    log "registry (pid $current) exited with status $code"
    note "$code"
fi
for pid in $draining; do
    collect "$pid"
    log "registry (pid $pid) exited with status $code after draining"
    note "$code"
done
if [ -z "$current" ]; then
    note "$last"  # stopped while pausing after a failed start: that failure is the status
fi
exec 3>&-  # every registry is gone: tee reads to the end of the FIFO and exits
if [ -n "$tee_pid" ]; then
    wait "$tee_pid" 2>/dev/null
fi
exit "$status"
