#!/usr/bin/env bash
# Throwaway MariaDB clusters on one machine, for tests, benchmarks and trying msgproxy's cluster support
# (docs/CLUSTERS.md): a 3-node Galera cluster, or a primary with one GTID replica. Loopback ports, data
# directories of their own, nothing touches a system MariaDB (every program runs with --no-defaults).
#
#   scripts/mariadb-cluster.sh galera start|stop|status [--port P] [--dir DIR]
#   scripts/mariadb-cluster.sh galera kill|stop-node|start-node I [--dir DIR]   one node (I = 1, 2 or 3)
#   scripts/mariadb-cluster.sh replica start|stop|status|promote [--port P] [--dir DIR]
#
# galera: node I listens for clients on 127.0.0.1:P+I-1 (P defaults to 14306), for Galera on P+10+I-1, for
# IST on P+20+I-1 and for rsync SST on P+30+I-1. Every node writes a binlog (log_slave_updates, wsrep_gtid_mode,
# ROW, binlog_row_metadata=FULL) so that msgproxy's binlog watcher can follow any node by GTID. A killed node
# makes the others wait evs.suspect_timeout before writes go on: it is 2 s here (Galera's default is 5 s).
# `kill` is kill -9; `start-node` brings a stopped or killed node back into the running cluster.
#
# replica: the primary on 127.0.0.1:P (P defaults to 14406), the replica on P+1 (read_only, replicating with
# MASTER_USE_GTID=slave_pos). `promote` does what a failover tool does once the primary is gone: stops the
# replication on the replica and turns read_only off.
#
# `start` and `status` print as their last line the --backend value for msgproxy: every node's URL, comma-
# separated. Other messages go to stderr. DIR defaults to .msgproxy/galera or .msgproxy/replica in the
# repository. As root the servers run as the `mysql` user (Galera's SST scripts refuse root), so DIR and its
# parents must be reachable by that user. To start afresh: stop, then delete DIR.
# MSGPROXY_CLUSTER_TEMPLATE=DATADIR: copy that data directory (made by mariadb-install-db) for a new node
# instead of running mariadb-install-db (the integration tests pass theirs).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

START_TIMEOUT=60
STOP_TIMEOUT=60
NODES=3

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2
    exit "${1:-2}"
}

[ $# -ge 2 ] || usage 2
kind=$1
command=$2
shift 2
node=""
case "$kind $command" in
"galera start" | "galera stop" | "galera status" | "replica start" | "replica stop" | "replica status" | "replica promote") ;;
"galera kill" | "galera stop-node" | "galera start-node")
    [ $# -ge 1 ] || msgproxy_die "galera $command needs a node number (1..$NODES)"
    node=$1
    shift
    case $node in 1 | 2 | 3) ;; *) msgproxy_die "node must be 1, 2 or 3, got '$node'" ;; esac
    ;;
*help*) usage 0 ;;
*)
    msgproxy_warn "unknown command: $kind $command"
    usage 2
    ;;
esac

port=""
dir=""
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
    case $port in '' | *[!0-9]*) msgproxy_die "--port must be a number, got '$port'" ;; esac
    { [ "$port" -ge 1 ] && [ "$port" -le 65400 ]; } || msgproxy_die "--port must be in 1..65400, got $port"
fi
[ -n "$dir" ] || dir="$MSGPROXY_REPO/.msgproxy/$kind"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd -P)
portfile="$dir/port"
if [ -z "$port" ]; then
    if [ -f "$portfile" ]; then
        port=$(tr -dc '0-9' <"$portfile")
    elif [ "$kind" = galera ]; then
        port=14306
    else
        port=14406
    fi
fi

# The servers run as this user; as root, the unprivileged `mysql` user.
run_user=$(whoami)
if [ "$(id -u)" -eq 0 ]; then
    id mysql >/dev/null 2>&1 || msgproxy_die "running as root but there is no 'mysql' user to run the servers as (install mariadb-server, or run as an ordinary user)"
    run_user=mysql
fi

# Per-node files: node I of either kind lives in $dir/nI.
node_dir() { printf '%s/n%s\n' "$dir" "$1"; }
node_port() { printf '%s\n' $((port + $1 - 1)); }
node_pid() {
    local f pid comm
    f="$(node_dir "$1")/mariadbd.pid"
    [ -f "$f" ] || return 1
    pid=$(tr -dc '0-9' <"$f" 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null || echo mariadbd)
    case $comm in mariadbd | mysqld) printf '%s\n' "$pid" ;; *) return 1 ;; esac
}

admin() { "$admin_bin" --no-defaults --connect-timeout=2 -h127.0.0.1 -P"$(node_port "$1")" -uroot "${@:2}"; }
sql() { "$client_bin" --no-defaults -N -B -h127.0.0.1 -P"$(node_port "$1")" -uroot -e "$2"; }

find_tools() {
    msgproxy_ensure_mariadb
    mariadbd=$(msgproxy_find_tool mariadbd)
    installdb=$(msgproxy_find_tool mariadb-install-db)
    admin_bin=$(msgproxy_find_tool mariadb-admin)
    client_bin=$(msgproxy_find_tool mariadb)
}

# Initialises node I's data directory once (owned by the user the server runs as). A Galera node that
# joins a running cluster (JOINER=1) gets its data by state transfer: an empty directory is enough.
init_node() {
    local d
    d=$(node_dir "$1")
    mkdir -p "$d"
    if [ ! -f "$d/.initialized" ] && [ "${2:-0}" = 1 ]; then
        mkdir -p "$d/data"
    elif [ ! -f "$d/.initialized" ] && [ -n "${MSGPROXY_CLUSTER_TEMPLATE:-}" ]; then
        # A data directory mariadb-install-db made earlier (the integration tests keep one): a copy
        # costs a fraction of a second, a new one several.
        rm -rf "$d/data"
        cp -a "$MSGPROXY_CLUSTER_TEMPLATE" "$d/data" ||
            msgproxy_die "cannot copy MSGPROXY_CLUSTER_TEMPLATE ($MSGPROXY_CLUSTER_TEMPLATE)"
        touch "$d/.initialized"
    elif [ ! -f "$d/.initialized" ]; then
        rm -rf "$d/data"
        mkdir -p "$d/data"
        [ "$run_user" = "$(whoami)" ] || chown -R "$run_user" "$d"
        if ! "$installdb" --no-defaults --auth-root-authentication-method=normal --skip-test-db \
            --datadir="$d/data" --user="$run_user" >"$d/install-db.log" 2>&1; then
            tail -n 40 "$d/install-db.log" >&2
            msgproxy_die "mariadb-install-db failed for node $1 (log: $d/install-db.log)"
        fi
        touch "$d/.initialized"
    fi
    [ "$run_user" = "$(whoami)" ] || chown -R "$run_user" "$d"
}

# The option list every throwaway server gets (loopback only, row binlog with column names, BLACKHOLE, small
# InnoDB files): the same file the Rust harness (throwaway/, behind the tests, the bench and
# mariadb-throwaway.sh) compiles in, so that there is one list.
COMMON_OPTIONS_FILE="$MSGPROXY_REPO/throwaway/mariadbd-common.opts"
[ -r "$COMMON_OPTIONS_FILE" ] || msgproxy_die "cannot read $COMMON_OPTIONS_FILE"

# The options every node gets; node I's own follow in galera_args / replica_args (later ones win).
common_args() {
    local d
    d=$(node_dir "$1")
    printf '%s\n' --no-defaults --user="$run_user" --datadir="$d/data" --socket="$d/mariadbd.sock" \
        --pid-file="$d/mariadbd.pid" --log-error="$d/mariadbd.err" --port="$(node_port "$1")"
    # One option a line; comment and blank lines skipped.
    grep -Ev '^[[:space:]]*(#|$)' "$COMMON_OPTIONS_FILE" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//'
    # A node's binlog has the changes it applied from the others too: msgproxy may follow any node.
    # No DNS lookup per connection (the nodes talk to each other and to clients on 127.0.0.1).
    printf '%s\n' --log-slave-updates=ON --skip-name-resolve
}

galera_args() {
    local i=$1 members="" j
    for j in $(seq 1 "$NODES"); do
        members+="${members:+,}127.0.0.1:$((port + 10 + j - 1))"
    done
    printf '%s\n' --wsrep-on=ON --wsrep-provider="$galera_lib" --wsrep-cluster-name=msgproxy-test \
        --wsrep-cluster-address="gcomm://$members" --wsrep-node-name="node$i" \
        --wsrep-node-address="127.0.0.1:$((port + 10 + i - 1))" \
        --wsrep-node-incoming-address="127.0.0.1:$(node_port "$i")" \
        --wsrep-sst-receive-address="127.0.0.1:$((port + 30 + i - 1))" --wsrep-sst-method=rsync \
        --wsrep-provider-options="base_port=$((port + 10 + i - 1));ist.recv_addr=127.0.0.1:$((port + 20 + i - 1));evs.suspect_timeout=PT2S;evs.inactive_timeout=PT4S;evs.inactive_check_period=PT0.5S;evs.keepalive_period=PT0.5S;gcache.size=64M" \
        --wsrep-gtid-mode=ON --wsrep-gtid-domain-id=100 --gtid-domain-id="$i" --server-id=1 \
        --innodb-autoinc-lock-mode=2 --default-storage-engine=InnoDB --wsrep-slave-threads=2
}

# Starts node I's mariadbd detached with the given extra options, and waits until it answers.
launch() {
    local i=$1 d bgpid waited=0
    shift
    d=$(node_dir "$i")
    if msgproxy_port_in_use "$(node_port "$i")"; then
        msgproxy_die "port $(node_port "$i") on 127.0.0.1 is already in use; choose other ports with --port P"
    fi
    local args=()
    mapfile -t args < <(common_args "$i")
    local launcher=()
    command -v setsid >/dev/null 2>&1 && launcher=(setsid)
    msgproxy_info "starting node $i on 127.0.0.1:$(node_port "$i") (log $d/mariadbd.err) ..."
    (cd "$d" && exec "${launcher[@]}" "$mariadbd" "${args[@]}" "$@" </dev/null >>"$d/mariadbd.out" 2>&1 9>&-) &
    bgpid=$!
    while ! admin "$i" ping >/dev/null 2>&1; do
        if ! kill -0 "$bgpid" 2>/dev/null && ! node_pid "$i" >/dev/null; then
            tail -n 30 "$d/mariadbd.err" >&2 || true
            msgproxy_die "node $i exited during start-up (log: $d/mariadbd.err)"
        fi
        [ "$waited" -lt $((START_TIMEOUT * 2)) ] || {
            tail -n 30 "$d/mariadbd.err" >&2 || true
            msgproxy_die "node $i did not answer within ${START_TIMEOUT}s (log: $d/mariadbd.err)"
        }
        sleep 0.5
        waited=$((waited + 1))
    done
}

stop_node() {
    local i=$1 pid waited=0
    pid=$(node_pid "$i") || {
        msgproxy_info "node $i is not running"
        return 0
    }
    msgproxy_info "stopping node $i (pid $pid) ..."
    kill -TERM "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$waited" -ge $((STOP_TIMEOUT * 2)) ]; then
            msgproxy_warn "node $i (pid $pid) did not stop within ${STOP_TIMEOUT}s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
}

kill_node() {
    local i=$1 pid
    pid=$(node_pid "$i") || {
        msgproxy_info "node $i is not running"
        return 0
    }
    kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    msgproxy_info "node $i (pid $pid) killed"
}

# Waits until node I says it is synced and ready (wsrep_local_state 4, wsrep_ready ON).
wait_synced() {
    local i=$1 waited=0 state
    while :; do
        state=$(sql "$i" "SELECT GROUP_CONCAT(VARIABLE_VALUE ORDER BY VARIABLE_NAME) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('wsrep_local_state','wsrep_ready')" 2>/dev/null || true)
        [ "$state" = "4,ON" ] && return 0
        [ "$waited" -lt $((START_TIMEOUT * 2)) ] || msgproxy_die "node $i is not synced after ${START_TIMEOUT}s (state '$state'; log: $(node_dir "$i")/mariadbd.err)"
        sleep 0.5
        waited=$((waited + 1))
    done
}

# Waits until every running node counts N members (a killed one evicted).
wait_cluster_size() {
    local n=$1 j waited=0 size ok
    while :; do
        ok=1
        for j in $(seq 1 "$NODES"); do
            node_pid "$j" >/dev/null || continue
            size=$(sql "$j" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='wsrep_cluster_size'" 2>/dev/null || true)
            [ "$size" = "$n" ] || ok=0
        done
        [ "$ok" -eq 0 ] || return 0
        [ "$waited" -lt $((START_TIMEOUT * 2)) ] || msgproxy_die "the running nodes do not agree on a cluster of $n after ${START_TIMEOUT}s"
        sleep 0.5
        waited=$((waited + 1))
    done
}

backend_value() {
    local n=$1 i urls=""
    for i in $(seq 1 "$n"); do
        urls+="${urls:+,}mysql://root@127.0.0.1:$(node_port "$i")/test"
    done
    printf '%s\n' "$urls"
}

# galera_start_node I [fresh]: starts node I, bootstrapping a new cluster when no other node runs. `fresh`: the
# other nodes are starting too (galera start), so there is no killed member to wait out.
galera_start_node() {
    local i=$1 fresh=${2:-} others=0 j
    for j in $(seq 1 "$NODES"); do
        [ "$j" = "$i" ] || ! node_pid "$j" >/dev/null || others=$((others + 1))
    done
    if [ "$others" -eq 0 ]; then init_node "$i"; else init_node "$i" 1; fi
    # A node restarted while the others still count its old self as a member (within evs.inactive_timeout of a
    # kill) goes through rounds of failed view installs first: wait for them to drop it, a few seconds at most.
    [ "$others" -eq 0 ] || [ -n "$fresh" ] || wait_cluster_size "$others"
    if [ "$others" -eq 0 ]; then
        # The first node bootstraps the cluster; it must have the newest state (safe_to_bootstrap).
        sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$(node_dir "$i")/data/grastate.dat" 2>/dev/null || true
        launch "$i" $(galera_args "$i") --wsrep-new-cluster
    else
        launch "$i" $(galera_args "$i")
    fi
    wait_synced "$i"
}

galera_start() {
    local i
    galera_lib=/usr/lib/galera/libgalera_smm.so
    [ -f "$galera_lib" ] || msgproxy_ensure_galera
    [ -f "$galera_lib" ] || msgproxy_die "galera-4 is installed but $galera_lib is missing"
    printf '%s\n' "$port" >"$portfile"
    [ "$run_user" = "$(whoami)" ] || chown "$run_user" "$dir"
    # Node 1 bootstraps; the others join one at a time (each by a state transfer from a synced node: two at
    # once would wait for the one donor anyway).
    for i in $(seq 1 "$NODES"); do
        if node_pid "$i" >/dev/null; then
            msgproxy_info "node $i already running"
        else
            galera_start_node "$i" fresh
        fi
    done
    sql 1 "CREATE DATABASE IF NOT EXISTS test" >&2
    msgproxy_info "Galera cluster of $NODES nodes running, data in $dir; stop it with: $0 galera stop --dir $(printf '%q' "$dir")"
    backend_value "$NODES"
}

replica_start() {
    printf '%s\n' "$port" >"$portfile"
    [ "$run_user" = "$(whoami)" ] || chown "$run_user" "$dir"
    local i
    # Both fresh: the replica starts from a copy of the primary's new data directory (made before either
    # runs), which costs less than a second mariadb-install-db.
    if [ ! -f "$(node_dir 1)/.initialized" ] && [ ! -f "$(node_dir 2)/.initialized" ]; then
        init_node 1
        mkdir -p "$(node_dir 2)"
        rm -rf "$(node_dir 2)/data"
        cp -a "$(node_dir 1)/data" "$(node_dir 2)/data"
        touch "$(node_dir 2)/.initialized"
    fi
    for i in 1 2; do
        init_node "$i"
        if node_pid "$i" >/dev/null; then
            msgproxy_info "server $i already running"
            continue
        fi
        if [ "$i" = 1 ]; then
            launch 1 --server-id=1 --gtid-domain-id=0
        else
            launch 2 --server-id=2 --gtid-domain-id=0 --read-only=ON
        fi
    done
    sql 1 "CREATE DATABASE IF NOT EXISTS test" >&2
    if [ ! -f "$dir/.replicating" ]; then
        # The replica starts from the primary's whole binlog (both are fresh), by GTID.
        sql 2 "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL gtid_slave_pos = ''; CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$(node_port 1), MASTER_USER='root', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE" >&2
        touch "$dir/.replicating"
    fi
    msgproxy_info "primary on 127.0.0.1:$(node_port 1), replica on 127.0.0.1:$(node_port 2), data in $dir"
    backend_value 2
}

replica_promote() {
    # What a failover tool does: the replica stops replicating and becomes writable. The old primary is
    # not touched (it is gone, or the operator fences it).
    sql 2 "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF" >&2
    rm -f "$dir/.replicating"
    msgproxy_info "replica on 127.0.0.1:$(node_port 2) promoted: read_only is off"
    backend_value 2
}

status() {
    local n=$1 i pid up=0 state
    for i in $(seq 1 "$n"); do
        if pid=$(node_pid "$i"); then
            up=$((up + 1))
            state=$(sql "$i" "SELECT CONCAT('read_only=', @@read_only, IF(@@wsrep_on, CONCAT(', wsrep_local_state_comment=', (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='wsrep_local_state_comment')), ''))" 2>/dev/null || echo "not answering")
            msgproxy_info "node $i: pid $pid on 127.0.0.1:$(node_port "$i"), $state"
        else
            msgproxy_info "node $i: not running"
        fi
    done
    [ "$up" -gt 0 ] || exit 3
    backend_value "$n"
}

stop_all() {
    local n=$1 i
    # The last node to stop is the one Galera marks safe to bootstrap from.
    for i in $(seq "$n" -1 1); do stop_node "$i"; done
    msgproxy_info "stopped (data kept in $dir)"
}

find_tools
case "$kind $command" in
"galera start") galera_start ;;
"galera stop") stop_all "$NODES" ;;
"galera status") status "$NODES" ;;
"galera kill") kill_node "$node" ;;
"galera stop-node") stop_node "$node" ;;
"galera start-node")
    galera_lib=/usr/lib/galera/libgalera_smm.so
    galera_start_node "$node"
    ;;
"replica start") replica_start ;;
"replica stop") stop_all 2 ;;
"replica status") status 2 ;;
"replica promote") replica_promote ;;
esac
