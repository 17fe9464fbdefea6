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
#
# The work is done by msgproxy-throwaway (throwaway/ in the repository), the harness the integration tests
# and msgproxy-bench use too; this script builds it (debug profile, a few seconds; the first build on a fresh
# clone compiles its two dependencies too) and runs it. The server options are in
# throwaway/mariadbd-common.opts.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case ${1:-} in
'' | -h | --help | help)
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    [ -n "${1:-}" ] && exit 0
    exit 2
    ;;
esac

msgproxy_require_cargo
bin="${CARGO_TARGET_DIR:-$MSGPROXY_REPO/target}/debug/msgproxy-throwaway"
if [ ! -x "$bin" ]; then
    msgproxy_info "building msgproxy-throwaway, the throwaway-MariaDB helper (cargo build -p msgproxy-throwaway; the first build takes under a minute) ..."
fi
# Always through cargo, so that the helper is never older than the source (a no-op build takes a moment).
# Its output goes to stderr: stdout is the backend URL.
cargo build --quiet --manifest-path "$MSGPROXY_REPO/Cargo.toml" -p msgproxy-throwaway --bin msgproxy-throwaway >&2 ||
    msgproxy_die "could not build msgproxy-throwaway (cargo build -p msgproxy-throwaway)"
MSGPROXY_THROWAWAY_NAME=$0 exec "$bin" "$@"
