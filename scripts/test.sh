#!/usr/bin/env bash
# Run the whole test suite: unit, grammar and integration tests (the integration tests start their own throwaway
# mariadbd, so MariaDB only has to be installed: this installs mariadb-server/mariadb-client with apt-get when
# mariadbd is missing), the bench's smoke run, a minute under faults, the drivers' own suites through msgproxy,
# then the formatting and lint checks.
#
#   scripts/test.sh [extra arguments for cargo test...]
#
# Every step runs even when an earlier one fails; the exit status is non-zero when any step failed.
set -uo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$MSGPROXY_REPO" || exit 1

set -e
msgproxy_require_cargo
msgproxy_ensure_mariadb # also puts mariadbd's directory (e.g. /usr/sbin) on PATH for the tests
msgproxy_ensure_chromium # the operator's page is tested in headless Chromium
msgproxy_require_cargo_subcommand fmt rustfmt
msgproxy_require_cargo_subcommand clippy clippy
set +e
# The Galera cluster test (integration/cluster/) needs galera-4, rsync and iproute2: installed here when
# missing. Where they cannot be, that one test says so and is skipped; nothing else needs them.
(msgproxy_ensure_galera) || msgproxy_warn "galera-4 could not be installed: the Galera cluster test will be skipped"

failed=()
step() {
    local name=$1
    shift
    msgproxy_info ""
    msgproxy_info "==> $name: $*"
    if "$@"; then
        msgproxy_info "==> $name: ok"
    else
        msgproxy_info "==> $name: FAILED (exit status $?)"
        failed+=("$name")
    fi
}

step tests cargo test --workspace "$@"
# Every benchmark scenario for a moment with tiny sizes (debug build, already built by the tests step): fails only
# when a scenario cannot run, never on the figures. The real run is `cargo run --release --bin msgproxy-bench`.
step bench-smoke cargo run --quiet --bin msgproxy-bench -- --smoke
# A minute of messaging under injected faults (proxy and server kills and restarts, dropped connections),
# then the checks: every committed message delivered, never twice within one ack window, every ack kept.
# About 75 s; a failure prints the violations and keeps the logs. Longer runs:
# docs/CHECKING.md.
step chaos-check cargo run --quiet --bin msgproxy-check -- --duration 60s
# The same on a 3-node Galera cluster (scripts/mariadb-cluster.sh) with three proxies, one per node, and node
# kills and rejoins among the faults: 30 s under faults, about two minutes with the cluster's start and the
# drain. Needs galera-4 (installed above); without it the step is skipped with a warning.
cluster_check() {
    if [ ! -e /usr/lib/galera/libgalera_smm.so ]; then
        msgproxy_warn "galera-4 is not installed: the cluster check is skipped"
        return 0
    fi
    cargo run --quiet --bin msgproxy-check -- --cluster galera --duration 30s
}
step cluster-check cluster_check
# The Go driver's and mysqlclient's own test suites, msgproxy's checks with PyMySQL, node's mysql2 and
# Connector/J (scripts/driver-suites/clients/CHECKS.md), and MariaDB's own regression tests (mysql-test-run
# --extern, scripts/driver-suites/mariadb-test.list), straight to a throwaway MariaDB and through msgproxy: any
# test whose outcome differs fails the step. Installs the clients and their tools on first use (Debian packages,
# PyPI, npm); after that about two and a half minutes, plus four to seven for MariaDB's suite (its tests that
# hang through msgproxy wait 30 s each). Alone: scripts/driver-suites/check.sh.
step driver-suites bash scripts/driver-suites/check.sh
# Import circles among the files of messaging/ and frontend/ (issue 24: each directory readable in some order); the map of
# every module's dependencies: python3 scripts/module-map.py.
module_circles() { python3 scripts/module-map.py --self-test && python3 scripts/module-map.py --quiet --dir messaging --dir frontend; }
step module-circles module_circles
step format cargo fmt --all --check
step clippy cargo clippy --workspace --all-targets -- -D warnings

msgproxy_info ""
if [ "${#failed[@]}" -gt 0 ]; then
    msgproxy_info "scripts/test.sh: FAILED: ${failed[*]}"
    exit 1
fi
msgproxy_info "scripts/test.sh: all passed (tests, bench-smoke, chaos-check, cluster-check, driver-suites, module-circles, format, clippy)"
