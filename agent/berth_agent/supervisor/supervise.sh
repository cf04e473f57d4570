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
# Garbage collection (docs/design.md §4.5 A5): on SIGUSR2 the script reads gc-request in the state dir, one line
# "ID [--dry-run] [--delete-untagged]" (validated word by word, never evaluated), and runs `$registry_bin
# garbage-collect FLAGS $config` in the background, beside the registry it supervises (never touched), its output
# appended to gc-output and "PID ID" in gc.pid; when it ends, "ID STATUS" goes to gc-result. While it runs the
# agent touches gc-heartbeat; 10 s without a touch (a dead agent) and the command is stopped (TERM, KILL 5 s later).
# A wrapper subshell owns the command (starts, watches, reaps it, writes the result), so a GC exit never
# reaches the registry bookkeeping below.
#
# Metrics (docs/design.md §4.2, "The registry's metrics across reloads"): with BERTH_DEBUG_PORTS set (loopback
# ports, e.g. "5301 5302"), each registry gets REGISTRY_HTTP_DEBUG_ADDR=127.0.0.1:PORT and its Prometheus
# metrics on /metrics through Distribution's environment overrides, so config.yml (and its hash) never changes.
# The draining registry keeps its debug port until it exits, and a failed debug bind is fatal to the registry
# (field-notes §8), so a successor gets a port no draining registry holds; one whose debug port was taken
# anyway is started again on another, or without metrics: the debug listener never fails a reload. "PID PORT"
# (or "PID -") of the current registry goes to registry-metrics in the state dir, where the agent's stable
# metrics endpoint finds it.
#
# Environment: BERTH_CONFIG (default /etc/berth/config.yml), BERTH_REGISTRY_BIN (default registry),
# BERTH_HANDOVER (default handover beside the config), BERTH_STATE_DIR (default the config's directory),
# BERTH_DEBUG_PORTS (default none: no metrics), BERTH_DEBUG_HOST (default 127.0.0.1).

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
gc_request="$state/gc-request"
gc_pidfile="$state/gc.pid"
gc_output="$state/gc-output"
gc_result="$state/gc-result"
gc_heartbeat="$state/gc-heartbeat"
gc_seen="$state/.gc-heartbeat-seen"  # the watchdog's marker: touched whenever it saw a newer heartbeat
gc_wrapper=""   # the subshell running a garbage-collect
gc_wanted=""    # set by SIGUSR2: the agent wrote gc-request
debug_ports="${BERTH_DEBUG_PORTS:-}"
debug_host="${BERTH_DEBUG_HOST:-127.0.0.1}"
metrics_file="$state/registry-metrics"
debug_port=""   # the current registry's debug port ("" without one)
debug_held=""   # "PID:PORT" of each registry started with a debug port (draining ones keep theirs until they exit)
debug_refused=""  # ports a registry could not bind since the last handover (another process holds them)

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
    if [ -n "$gc_wrapper" ]; then
        kill -TERM "$gc_wrapper" 2>/dev/null  # it stops the garbage-collect and records its status
    fi
}
trap 'stop TERM' TERM
trap 'stop INT' INT
trap 'handover=1' USR1
trap 'gc_wanted=1' USR2
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
    if [ -n "$redact" ]; then
        $redact "$redact_program" <"$fifo" 3>&- | tee -a "$output" 3>&- &
    else
        tee -a "$output" <"$fifo" 3>&- &
    fi
    tee_pid=$!
}

# Distribution logs each notification endpoint at start with its headers, values included ("configuring endpoint
# NAME (URL), timeout=..., headers=map[Authorization:[Bearer ...]]", 2.8 and 3.1.1): the output passes through awk,
# which cuts such a line at "headers=", on its way to the container log and registry-output. awk flushes each line
# (mawk needs -W interactive to read a line as it comes); without a working awk the output is not filtered.
redact_program='{ i = index($0, "headers=map["); if (i) $0 = substr($0, 1, i - 1) "headers=<redacted>\""; print; fflush() }'
redact=""
if [ "$(echo x | awk -W interactive "$redact_program" 2>&1)" = x ]; then
    redact="awk -W interactive"  # mawk (busybox awk warns that it ignores -W: then the next)
elif [ "$(echo x | awk "$redact_program" 2>&1)" = x ]; then
    redact="awk"
fi

# The first of $debug_ports that no live draining registry holds and none failed to bind since the last handover;
# "" when there is none (the registry then starts without metrics rather than die of a taken debug port).
pick_debug_port() {
    debug_port=""
    for port in $debug_ports; do
        taken=""
        for held in $debug_held; do
            if [ "${held#*:}" = "$port" ] && kill -0 "${held%%:*}" 2>/dev/null; then
                taken=1
            fi
        done
        case " $debug_refused " in
            *" $port "*) taken=1 ;;
        esac
        if [ -z "$taken" ]; then
            debug_port=$port
            return
        fi
    done
}

# Forget registries that have exited: their debug ports are free again.
forget_debug_ports() {
    left=""
    for held in $debug_held; do
        if kill -0 "${held%%:*}" 2>/dev/null; then
            left="$left $held"
        fi
    done
    debug_held=$left
}

# A killed awk or tee (kill -9) leaves the FIFO without a reader but the script's own fd 3: a registry that fills
# its 64 KiB would block on its next log write, and stop serving. Checked before each start and whenever a child's
# exit interrupts the wait (the pipe's processes are children too), so a new pipe reads on at once.
keep_output_pipe() {
    if [ -n "$tee_pid" ] && ! kill -0 "$tee_pid" 2>/dev/null; then
        log "output pipe (pid $tee_pid) is gone: starting another"
        start_tee
    fi
}

start_registry() {
    keep_output_pipe
    forget_debug_ports
    pick_debug_port
    # The markers tell the agent this supervisor takes handovers and runs garbage-collect (an older one would
    # die of SIGUSR1 or SIGUSR2).
    if [ -n "$debug_port" ]; then
        REGISTRY_HTTP_DEBUG_ADDR="$debug_host:$debug_port" REGISTRY_HTTP_DEBUG_PROMETHEUS_ENABLED=true \
            REGISTRY_HTTP_DEBUG_PROMETHEUS_PATH=/metrics \
            BERTH_SUPERVISE_HANDOVER=1 BERTH_SUPERVISE_GC=1 "$registry_bin" serve "$config" >&3 2>&3 &
        current=$!
    else
        BERTH_SUPERVISE_HANDOVER=1 BERTH_SUPERVISE_GC=1 "$registry_bin" serve "$config" >&3 2>&3 &
        current=$!
    fi
    started=$(date +%s)  # after the start: forking date first would add to the time without a listener
    if [ -n "$debug_port" ]; then
        debug_held="$debug_held $current:$debug_port"
        put "$metrics_file" "$current $debug_port"
        log "started registry (pid $current, metrics on $debug_host:$debug_port)"
    else
        if [ -n "$debug_ports" ]; then
            put "$metrics_file" "$current -"
        fi
        log "started registry (pid $current)"
    fi
    if [ -n "$stopping" ]; then
        kill -TERM "$current" 2>/dev/null  # the signal came before $current was known
    fi
}

# Wait until process $1 (a registry; in the GC wrapper, the command) has ended and set $code to its exit status.
# A trapped signal (or a CHLD) interrupts wait with a status >128; once the process is gone a last wait collects
# its own status (127 when an earlier wait already did: then $code already holds it).
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
    debug_refused=""  # a new reload tries every port again
    start_registry
}

# ---- garbage collection ------------------------------------------------------------------------------------

# Write a one-line file atomically (temp file + rename): the agent never reads half of it.
put() {
    printf '%s\n' "$2" >"$1.tmp" && mv -f "$1.tmp" "$1"
}

# Empty (or create) file $1. `true`, not `:`: a failed redirection on a special builtin ends the script.
empty() {
    true 2>/dev/null >"$1"
}

# Whether process $1 has ended: gone, or a zombie not yet reaped (kill -0 succeeds on a zombie).
ended() {
    if ! kill -0 "$1" 2>/dev/null; then
        return 0
    fi
    proc_stat=""
    { read -r proc_stat <"/proc/$1/stat"; } 2>/dev/null
    case $proc_stat in
        *") Z "* | *") X "*) return 0 ;;
    esac
    return 1
}

# A request id: 1 to 64 of A-Z a-z 0-9 . _ - (spelled out: a range could mean more in another locale).
valid_gc_id() {
    case $1 in
        '' | *[!ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-]*) return 1 ;;
    esac
    [ "${#1}" -le 64 ]
}

# Runs in the background while the command runs: no touch of gc-heartbeat for 10 s (the agent died or was
# restarted) and the command is stopped, so it never outlives the Lease (15 s) of the agent that asked for it.
# `test -nt` compares mtimes (busybox: whole seconds), so a heartbeat counts once it is newer than the marker.
gc_watchdog() {
    empty "$gc_seen"
    seen=$(date +%s)
    while sleep 1; do
        now=$(date +%s)
        if [ "$gc_heartbeat" -nt "$gc_seen" ]; then
            empty "$gc_seen"
            seen=$now
        elif [ $((now - seen)) -ge 10 ]; then
            log "no heartbeat from the agent within 10s: stopping garbage-collect (pid $1)"
            kill -TERM "$1" 2>/dev/null
            sleep 5
            kill -KILL "$1" 2>/dev/null
            return
        fi
    done
}

# In the wrapper, on SIGTERM: TERM to the command, KILL 5 s later if it is still there.
stop_gc() {
    if [ -n "$gc" ] && [ -z "$gc_killer" ]; then
        kill -TERM "$gc" 2>/dev/null
        (sleep 5; kill -KILL "$gc" 2>/dev/null) &
        gc_killer=$!
    fi
}

# The wrapper (a subshell): starts the command, writes gc.pid, waits for it, removes gc.pid and writes
# gc-result "ID STATUS" (STATUS as the shell reports it: 128+N when signal N ended it). SIGTERM (the supervisor is
# stopping) stops the command: TERM, then KILL 5 s later.
run_gc() {
    gc_id=$1
    gc=""
    gc_stop=""
    gc_killer=""
    trap 'gc_stop=1; stop_gc' TERM
    "$registry_bin" garbage-collect ${gc_dry:+--dry-run} ${gc_untagged:+--delete-untagged} "$config" \
        >>"$gc_output" 2>&1 </dev/null &
    gc=$!
    if [ -n "$gc_stop" ]; then
        stop_gc  # the TERM came before $gc was known
    fi
    put "$gc_pidfile" "$gc $gc_id"
    log "started garbage-collect ${gc_dry:+--dry-run }${gc_untagged:+--delete-untagged }(pid $gc, request $gc_id)"
    gc_watchdog "$gc" &
    gc_watch=$!
    code=0
    collect "$gc"  # a trapped TERM interrupts wait: collect waits again for the command's own status
    gc_code=$code
    kill -TERM $gc_watch $gc_killer 2>/dev/null
    log "garbage-collect (pid $gc, request $gc_id) exited with status $gc_code"
    rm -f "$gc_pidfile"  # first: whoever sees the result finds no gc.pid left
    put "$gc_result" "$gc_id $gc_code"
}

# SIGUSR2: take gc-request (removed once read, so a repeated signal starts nothing) and start the command,
# unless one still runs. Nothing in the file is evaluated: its one line is split on spaces with globbing off,
# and each word is compared with the few allowed. A bad request is answered "ID 2 refused" ("?" for a bad ID).
take_gc_request() {
    gc_wanted=""
    if [ ! -f "$gc_request" ]; then
        return
    fi
    if [ -n "$gc_wrapper" ] && ! ended "$gc_wrapper"; then
        log "a garbage-collect still runs: request ignored"
        return
    fi
    line=""
    IFS= read -r line 2>/dev/null <"$gc_request"
    size=$(wc -c 2>/dev/null <"$gc_request")
    rm -f "$gc_request"
    set -f
    saved_ifs=$IFS
    IFS=' '
    # shellcheck disable=SC2086 # split on spaces, globbing off: nothing is expanded
    set -- $line
    IFS=$saved_ifs
    set +f
    gc_dry=""
    gc_untagged=""
    refused=""
    id=${1-}
    if [ $# -eq 0 ] || ! valid_gc_id "$id"; then
        id="?"
        refused="a bad request id"
    else
        shift
    fi
    if [ "${size:-0}" -gt $((${#line} + 1)) ]; then
        refused="more than one line"
    fi
    for word in "$@"; do
        case $word in
            --dry-run) if [ -n "$gc_dry" ]; then refused="a repeated flag"; fi; gc_dry=1 ;;
            --delete-untagged) if [ -n "$gc_untagged" ]; then refused="a repeated flag"; fi; gc_untagged=1 ;;
            *) refused="an unknown word" ;;
        esac
    done
    if [ -n "$refused" ]; then
        log "garbage-collect request $id refused: $refused"
        rm -f "$gc_result"
        put "$gc_result" "$id 2 refused"
        return
    fi
    rm -f "$gc_result"
    empty "$gc_output"
    run_gc "$id" 3>&- &
    gc_wrapper=$!
}

# Collect the wrapper once it has ended (it wrote gc-result itself).
reap_gc() {
    if [ -n "$gc_wrapper" ] && ended "$gc_wrapper"; then
        wait "$gc_wrapper" 2>/dev/null
        gc_wrapper=""
    fi
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
    reap_gc
    if [ -n "$gc_wanted" ]; then
        take_gc_request
    fi
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
        reap  # interrupted by a signal (a draining registry ended? the output pipe?); the current one still runs
        keep_output_pipe
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
    # A registry that died because its debug port was taken (by a process this script does not know): the next
    # start picks another port, or none. Its output is read after the pause, when tee has written it.
    if [ "$code" -ne 0 ] && [ "$lived" -lt 2 ] && [ -n "$debug_port" ] \
        && grep -q 'error listening on debug interface' "$output" 2>/dev/null; then
        log "registry (pid $current_was) could not listen on debug port $debug_port: starting without it"
        debug_refused="$debug_refused $debug_port"
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
if [ -n "$gc_wrapper" ]; then
    collect "$gc_wrapper"  # it stopped the garbage-collect and wrote its status; not the script's status
fi
if [ -z "$current" ]; then
    note "$last"  # stopped while pausing after a failed start: that failure is the status
fi
exec 3>&-  # every registry is gone: tee reads to the end of the FIFO and exits
if [ -n "$tee_pid" ]; then
    wait "$tee_pid" 2>/dev/null
fi
exit "$status"
