#!/usr/bin/env bash
# The drivers' own test suites through msgproxy, compared test by test with the same server directly:
# the pass-through promise ("clients notice no difference") checked by code msgproxy did not write.
#
#   scripts/driver-suites/check.sh [SUITE...]     SUITE: go-driver, mysqlclient, pymysql, mysql2, connector-j,
#                                                  mariadb-test (default: all)
#
# Starts a throwaway MariaDB (scripts/mariadb-throwaway.sh: its own data directory under
# $DRIVER_SUITES_DIR, a free port) and msgproxy in front of it on the server's Unix socket, as
# scripts/run.sh does (the debug build, built here if needed; $MSGPROXY_BIN overrides), runs each suite
# straight against the server and then through msgproxy, and stops both. Fails when any test's outcome
# differs between the two runs (compare.sh lists them), or when a suite cannot run. Tests that fail the
# same way directly (e.g. the Go suite's TestCharset on MariaDB, which names utf8 `utf8mb3`) do not count.
# PyMySQL, mysql2 and Connector/J publish no suites: for them msgproxy carries one program each, running the
# same scenarios (clients/CHECKS.md); their messaging checks skip themselves against the server, and that SKIP
# counts as the PASS msgproxy must give.
# mariadb-test is MariaDB's own regression suite (mysql-test-run --extern, the `main` tests listed in
# mariadb-test.list): it resets the throwaway server around its tests (mariadb-test.sh), and a test that
# hangs through msgproxy is killed after 30 seconds and counts as failed.
# The suites and their tools are installed on first use (Debian packages, PyPI) under
# $DRIVER_SUITES_DIR, default target/driver-suites. About two and a half minutes once installed, plus
# one or two for mariadb-test (1 min 8 s in all on 2026-12-04: about 30 s each way).
# DRIVER_SUITES_PORT (default 23306) is where the search for two free ports (server, proxy) starts.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$MSGPROXY_REPO"

suites=("$@")
[ "${#suites[@]}" -gt 0 ] || suites=(go-driver mysqlclient pymysql mysql2 connector-j mariadb-test)
for suite in "${suites[@]}"; do
    [ -f "scripts/driver-suites/$suite.sh" ] || msgproxy_die "no such suite: $suite (go-driver, mysqlclient, pymysql, mysql2, connector-j, mariadb-test)"
done

export DRIVER_SUITES_DIR=${DRIVER_SUITES_DIR:-$MSGPROXY_REPO/target/driver-suites}
mkdir -p "$DRIVER_SUITES_DIR"
data_dir=$DRIVER_SUITES_DIR/mariadb

# Two free ports: the server's and the proxy's.
free_port() {
    local port=$1
    while msgproxy_port_in_use "$port" || [ "$port" = "${taken:-}" ]; do
        port=$((port + 1))
    done
    echo "$port"
}

proxy_bin=${MSGPROXY_BIN:-}
if [ -z "$proxy_bin" ]; then
    msgproxy_require_cargo
    cargo build --quiet --bin msgproxy
    proxy_bin=$MSGPROXY_REPO/target/debug/msgproxy
fi

proxy_pid=""
cleanup() {
    [ -z "$proxy_pid" ] || kill "$proxy_pid" 2>/dev/null || true
    scripts/mariadb-throwaway.sh stop --dir "$data_dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Starts the server and msgproxy on $server_port and $proxy_port; false when either cannot.
start_both() {
    # Afresh: a server left from an earlier run may hold the suites' old tables and another port.
    scripts/mariadb-throwaway.sh stop --dir "$data_dir" >/dev/null 2>&1 || true
    rm -rf "$data_dir"
    backend=$(scripts/mariadb-throwaway.sh start --port "$server_port" --dir "$data_dir" | tail -n 1) || return 1
    "$proxy_bin" --backend "$backend" --listen "127.0.0.1:$proxy_port" >"$proxy_log" 2>&1 &
    proxy_pid=$!
    for _ in $(seq 1 100); do
        msgproxy_port_in_use "$proxy_port" && return 0
        kill -0 "$proxy_pid" 2>/dev/null || break
        sleep 0.1
    done
    msgproxy_warn "msgproxy did not listen on $proxy_port; its log: $proxy_log"
    kill "$proxy_pid" 2>/dev/null || true
    proxy_pid=""
    return 1
}

# The search starts below Linux's ephemeral ports (32768-60999 by default): a port in that range
# can become the local end of some outgoing connection between the check above and the bind (that
# failed a CI run). A start that fails all the same is tried again on the next ports.
proxy_log=$DRIVER_SUITES_DIR/msgproxy.log
next_port=${DRIVER_SUITES_PORT:-23306}
for attempt in 1 2 3; do
    taken=""
    server_port=$(free_port "$next_port")
    taken=$server_port
    proxy_port=$(free_port $((server_port + 1)))
    start_both && break
    [ "$attempt" -lt 3 ] || msgproxy_die "could not start the server and msgproxy (three tries; see the messages above)"
    msgproxy_warn "starting on ports $server_port/$proxy_port failed; trying the next ones"
    next_port=$((proxy_port + 1))
done

# Tests that skip themselves when a timing assumption fails on a loaded machine: the Go suite's
# context-cancel tests run `INSERT ... SLEEP(1)`, cancel it, wait a second and skip ("[WARN] expected
# val to be 1") when the INSERT has not finished by then. Which run that hits is chance (it hit the
# direct run in CI on 2026-12-01), so for the comparison their SKIP counts as PASS; a FAIL still shows.
timing_skips='TestContextCancelExec|TestContextCancelQuery|TestContextCancelStmtExec|TestContextCancelStmtQuery'
# The client checks' messaging checks need msgproxy: straight to the server they skip themselves, and
# (in the direct run only) that SKIP stands for the PASS they must give through msgproxy.
normalized() {
    local rules=(-e "s/^SKIP (($timing_skips)(\/.*)?)\$/PASS \1/")
    [ "${2:-}" != direct ] || rules+=(-e 's/^SKIP (messaging\/[^: ]*).*$/PASS \1/')
    sed -E "${rules[@]}" "$1" >"$1.cmp"
    echo "$1.cmp"
}

differing=()
for suite in "${suites[@]}"; do
    for port in "$server_port" "$proxy_port"; do
        msgproxy_info "==> $suite against 127.0.0.1:$port ($([ "$port" = "$server_port" ] && echo the server || echo msgproxy))"
        if ! bash "scripts/driver-suites/$suite.sh" 127.0.0.1 "$port"; then
            msgproxy_die "$suite could not run against port $port (see the messages above)"
        fi
    done
    direct=$DRIVER_SUITES_DIR/results-$suite-127.0.0.1-$server_port.txt
    proxied=$DRIVER_SUITES_DIR/results-$suite-127.0.0.1-$proxy_port.txt
    # An empty result file means the suite did not run at all: never a pass.
    [ -s "$direct" ] && [ -s "$proxied" ] || msgproxy_die "$suite wrote no results ($direct, $proxied)"
    if ! bash scripts/driver-suites/compare.sh "$(normalized "$direct" direct)" "$(normalized "$proxied")"; then
        differing+=("$suite")
    fi
done
kill -0 "$proxy_pid" 2>/dev/null || msgproxy_die "msgproxy died during the suites; its log: $proxy_log"

if [ "${#differing[@]}" -gt 0 ]; then
    msgproxy_info "driver suites: outcomes through msgproxy differ from the server's in: ${differing[*]} (logs in $DRIVER_SUITES_DIR; msgproxy's log: $proxy_log)"
    exit 1
fi
msgproxy_info "driver suites: every test's outcome through msgproxy is the server's (${suites[*]})"
