#!/usr/bin/env bash
# A throwaway MariaDB for development: its own data directory, port, socket and row-based binlog, started
# from the distribution's mariadbd (installed with apt-get when missing). Nothing here touches a system
# MariaDB or its configuration (every program runs with --no-defaults).
#
#   scripts/mariadb-throwaway.sh start  [--port N] [--dir DIR]   start it (or just report it when it runs)
#   scripts/mariadb-throwaway.sh stop   [--dir DIR]              stop it (the data stays in DIR)
#   scripts/mariadb-throwaway.sh status [--dir DIR]              report whether it runs
#
# DIR defaults to .msgproxy/mariadb in the repository (gitignored), the port to 13306. The last line `start`
# and `status` print on stdout is the backend URL, mysql://root@127.0.0.1:PORT/test?socket=SOCKET (msgproxy
# connects through the socket; root has no password and the server listens on 127.0.0.1 and its socket
# only); all other messages go to stderr. To start afresh: stop, then delete DIR.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DEFAULT_PORT=13306
START_TIMEOUT=60
STOP_TIMEOUT=60

usage() {
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit "${1:-2}"
}

[ $# -ge 1 ] || usage 2
command=$1
shift
case $command in
start | stop | status) ;;
-h | --help | help) usage 0 ;;
*)
    msgproxy_warn "unknown command: $command"
    usage 2
    ;;
esac

port=""
dir="$MSGPROXY_REPO/.msgproxy/mariadb"
while [ $# -gt 0 ]; do
    case $1 in
    --port)
        [ $# -ge 2 ] || msgproxy_die "--port needs a value"
        port=$2
        shift 2
        ;;
    --port=*)
        port=${1#--port=}
        shift
        ;;
    --dir)
        [ $# -ge 2 ] || msgproxy_die "--dir needs a value"
        dir=$2
        shift 2
        ;;
    --dir=*)
        dir=${1#--dir=}
        shift
        ;;
    -h | --help) usage 0 ;;
    *) msgproxy_die "unknown option: $1 (see $0 --help)" ;;
    esac
done
if [ -n "$port" ]; then
    case $port in
    '' | *[!0-9]*) msgproxy_die "--port must be a number, got '$port'" ;;
    esac
    { [ "$port" -ge 1 ] && [ "$port" -le 65535 ]; } || msgproxy_die "--port must be in 1..65535, got $port"
    [ "$command" != stop ] || msgproxy_warn "stop ignores --port (it stops the server of --dir)"
fi
[ -n "$dir" ] || msgproxy_die "--dir must not be empty"

# Files, all inside $dir.
set_paths() {
    datadir="$dir/data"
    pidfile="$dir/mariadbd.pid"
    errlog="$dir/mariadbd.err"
    outlog="$dir/mariadbd.out"
    portfile="$dir/port"
    initmark="$dir/.initialized"
    socket="$dir/mariadbd.sock"
    # A Unix socket path is limited to 107 bytes; for a deep DIR put the socket in the temp dir instead.
    if [ "${#socket}" -gt 100 ]; then
        socket="${TMPDIR:-/tmp}/msgproxy-mariadb-$(printf '%s' "$dir" | cksum | cut -d' ' -f1).sock"
    fi
}

# The pid of the mariadbd serving $dir, or nothing (and false) when none runs; cleans up a stale pid file.
running_pid() {
    local pid comm
    [ -f "$pidfile" ] || return 1
    pid=$(tr -dc '0-9' <"$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        if [ -r "/proc/$pid/comm" ]; then
            comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
            case $comm in
            mariadbd | mysqld) ;;
            *)
                rm -f "$pidfile" # the pid was reused by another program
                return 1
                ;;
            esac
        fi
        printf '%s\n' "$pid"
        return 0
    fi
    rm -f "$pidfile"
    return 1
}

recorded_port() {
    local p=""
    [ -f "$portfile" ] && p=$(tr -dc '0-9' <"$portfile" 2>/dev/null || true)
    printf '%s\n' "${p:-$DEFAULT_PORT}"
}

show_log_tail() {
    local f
    for f in "$errlog" "$outlog" "$dir/install-db.log"; do
        if [ -s "$f" ]; then
            msgproxy_info "---- last lines of $f ----"
            tail -n 30 "$f" >&2
        fi
    done
}

ping_server() {
    "$admin" --no-defaults --connect-timeout=2 -h127.0.0.1 -P"$1" -uroot ping >/dev/null 2>&1
}

# Wait until the server on port $1 (pid $2, or the pid file's) answers, for up to START_TIMEOUT seconds.
wait_until_up() {
    local p=$1 bgpid=${2:-} waited=0
    while ! ping_server "$p"; do
        if [ -n "$bgpid" ] && ! kill -0 "$bgpid" 2>/dev/null && ! running_pid >/dev/null; then
            show_log_tail
            msgproxy_die "mariadbd exited during start-up (see the log above, full log: $errlog)"
        fi
        if [ "$waited" -ge "$START_TIMEOUT" ]; then
            show_log_tail
            msgproxy_die "mariadbd did not answer on 127.0.0.1:$p within ${START_TIMEOUT}s (log: $errlog)"
        fi
        sleep 1
        waited=$((waited + 1))
    done
}

# The backend URL for msgproxy: through the server's Unix socket, which costs the kernel less per round
# trip than loopback TCP (docs/guide/configuration.md); the host and port name the same server for the logs.
print_url() {
    printf 'mysql://root@127.0.0.1:%s/test?socket=%s\n' "$1" "$socket"
}

do_status() {
    if [ ! -d "$dir" ]; then
        msgproxy_info "no throwaway MariaDB in $dir"
        exit 3
    fi
    dir=$(cd "$dir" && pwd -P)
    set_paths
    local pid p
    if pid=$(running_pid); then
        p=$(recorded_port)
        msgproxy_info "throwaway MariaDB running (pid $pid) on 127.0.0.1:$p, data in $dir"
        print_url "$p"
    else
        msgproxy_info "throwaway MariaDB in $dir is not running"
        exit 3
    fi
}

do_stop() {
    if [ ! -d "$dir" ]; then
        msgproxy_info "no throwaway MariaDB in $dir: nothing to stop"
        return 0
    fi
    dir=$(cd "$dir" && pwd -P)
    set_paths
    local pid waited=0
    if ! pid=$(running_pid); then
        msgproxy_info "throwaway MariaDB in $dir is not running"
        return 0
    fi
    msgproxy_info "stopping throwaway MariaDB (pid $pid) in $dir ..."
    kill -TERM "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$waited" -ge "$STOP_TIMEOUT" ]; then
            msgproxy_warn "mariadbd (pid $pid) did not stop within ${STOP_TIMEOUT}s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 1
            break
        fi
        sleep 1
        waited=$((waited + 1))
    done
    rm -f "$pidfile"
    msgproxy_info "stopped (data kept in $dir)"
}

do_start() {
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd -P)
    set_paths

    # Serialise concurrent `start`s on the same directory (the lock is released when this script exits).
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$dir/.lock"
        flock -w "$((START_TIMEOUT + 30))" 9 || msgproxy_die "another start on $dir holds $dir/.lock"
    fi

    msgproxy_ensure_mariadb
    mariadbd=$(msgproxy_find_tool mariadbd)
    installdb=$(msgproxy_find_tool mariadb-install-db)
    admin=$(msgproxy_find_tool mariadb-admin)
    client=$(msgproxy_find_tool mariadb)

    local pid p
    if pid=$(running_pid); then
        p=$(recorded_port)
        if [ -n "$port" ] && [ "$port" != "$p" ]; then
            msgproxy_warn "already running on port $p (not $port); stop it first to change the port"
        fi
        wait_until_up "$p" "$pid"
        msgproxy_info "throwaway MariaDB already running (pid $pid) on 127.0.0.1:$p, data in $dir"
        print_url "$p"
        return 0
    fi

    port=${port:-$DEFAULT_PORT}
    if msgproxy_port_in_use "$port"; then
        msgproxy_die "port $port on 127.0.0.1 is already in use by another program; choose a free one with --port N"
    fi

    local user_opt=()
    if [ "$(id -u)" -eq 0 ]; then
        user_opt=(--user=root) # mariadbd refuses to run as root unless told so
    fi
    # A mariadbd outside the usual prefix (e.g. /usr/local/mysql/bin) needs its basedir to find its files.
    local basedir_opt=()
    case $mariadbd in
    /usr/sbin/* | /usr/bin/* | /usr/libexec/*) ;;
    *) basedir_opt=(--basedir="$(dirname "$(dirname "$mariadbd")")") ;;
    esac

    # Initialise the data directory once (redo it when an earlier attempt was interrupted).
    if [ ! -f "$initmark" ]; then
        rm -rf "$datadir"
        mkdir -p "$datadir"
        msgproxy_info "initialising a new MariaDB data directory in $datadir ..."
        if ! "$installdb" --no-defaults "${basedir_opt[@]}" \
            --auth-root-authentication-method=normal --skip-test-db \
            --datadir="$datadir" --user="$(whoami)" >"$dir/install-db.log" 2>&1; then
            msgproxy_info "---- $dir/install-db.log ----"
            tail -n 40 "$dir/install-db.log" >&2
            msgproxy_die "mariadb-install-db failed (full log: $dir/install-db.log)"
        fi
        touch "$initmark"
    fi

    local args=(
        --no-defaults
        "${basedir_opt[@]}"
        "${user_opt[@]}"
        --datadir="$datadir"
        --socket="$socket"
        --pid-file="$pidfile"
        --log-error="$errlog"
        --port="$port"
        --bind-address=127.0.0.1
        --log-bin=mysql-bin
        --binlog-format=ROW
        --binlog-row-image=FULL
        --server-id=1
        --innodb-buffer-pool-size=128M
        --innodb-log-file-size=48M
        --max-allowed-packet=64M
    )
    # binlog_row_metadata (MariaDB 10.5+) puts column names into the binlog's table-map events.
    if "$mariadbd" --no-defaults "${user_opt[@]}" --help --verbose 2>/dev/null | grep -q -- '--binlog-row-metadata'; then
        args+=(--binlog-row-metadata=FULL)
    else
        msgproxy_warn "this mariadbd does not support --binlog-row-metadata; starting without it"
    fi

    msgproxy_info "starting throwaway MariaDB on 127.0.0.1:$port (data in $dir, log $errlog) ..."
    printf '%s\n' "$port" >"$portfile"
    rm -f "$pidfile"
    # Detached (own session) so that Ctrl-C in the terminal that started it does not stop it; fd 9 (the
    # lock) is closed so that the server does not hold the lock forever.
    local launcher=()
    command -v setsid >/dev/null 2>&1 && launcher=(setsid)
    (cd "$dir" && exec "${launcher[@]}" "$mariadbd" "${args[@]}" </dev/null >>"$outlog" 2>&1 9>&-) &
    local bgpid=$!

    wait_until_up "$port" "$bgpid"
    if ! running_pid >/dev/null && ! kill -0 "$bgpid" 2>/dev/null; then
        show_log_tail
        msgproxy_die "mariadbd exited during start-up, and something else answers on port $port (log: $errlog)"
    fi
    if ! "$client" --no-defaults -h127.0.0.1 -P"$port" -uroot -e 'CREATE DATABASE IF NOT EXISTS test' >&2; then
        show_log_tail
        msgproxy_die "could not create database test on 127.0.0.1:$port"
    fi
    pid=$(running_pid || echo "$bgpid")
    local stop_cmd="$0 stop"
    [ "$dir" = "$MSGPROXY_REPO/.msgproxy/mariadb" ] || stop_cmd+=" --dir $(printf '%q' "$dir")"
    msgproxy_info "throwaway MariaDB running (pid $pid) on 127.0.0.1:$port; stop it with: $stop_cmd"
    print_url "$port"
}

case $command in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
esac
