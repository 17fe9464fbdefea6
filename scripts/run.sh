#!/usr/bin/env bash
# Build and run msgproxy in the foreground:
#
#   scripts/run.sh [msgproxy flags...]
#
# Without a backend (no --backend flag, no MSGPROXY_BACKEND, no `backend` in the --config file) it first starts
# a throwaway MariaDB with row-based binlog (scripts/mariadb-throwaway.sh: data in .msgproxy/mariadb,
# port 13306, installed with apt-get when missing; on a fresh clone it first builds its small helper,
# msgproxy-throwaway, and says so) and points the proxy at it. The MariaDB keeps running after
# the proxy stops, so the next run starts at once; stop it with `scripts/mariadb-throwaway.sh stop`.
# Connect with e.g. `mariadb -h127.0.0.1 -P3307 -uroot test`.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$MSGPROXY_REPO"

msgproxy_require_cargo

need_backend=1
config=${MSGPROXY_CONFIG:-}
[ -z "${MSGPROXY_BACKEND:-}" ] || need_backend=0
prev=""
for arg in "$@"; do
    [ "$arg" != "--" ] || break
    case $arg in
    --backend | --backend=*) need_backend=0 ;;
    -h | --help | -V | --version) need_backend=0 ;; # nothing to connect to
    --config=*) config=${arg#--config=} ;;
    esac
    [ "$prev" != "--config" ] || config=$arg
    prev=$arg
done
# A backend configured in the config file counts too.
if [ "$need_backend" -eq 1 ] && [ -n "$config" ] && [ -f "$config" ] &&
    grep -Eq '^[[:space:]]*(backend[[:space:]]*=|\[backend\])' "$config"; then
    need_backend=0
fi

if [ "$need_backend" -eq 1 ]; then
    url=$("$MSGPROXY_REPO/scripts/mariadb-throwaway.sh" start | tail -n 1)
    [ -n "$url" ] || msgproxy_die "scripts/mariadb-throwaway.sh start printed no backend URL"
    msgproxy_info "msgproxy: backend is the throwaway MariaDB at $url (stop it with: scripts/mariadb-throwaway.sh stop)"
    set -- --backend "$url" "$@"
fi

# The first release build takes several minutes (about six on two cores): say so instead of going quiet.
if [ ! -x "$MSGPROXY_REPO/target/release/msgproxy" ]; then
    msgproxy_info "msgproxy: building the release binary (the first build takes several minutes) ..."
fi
exec cargo run --release --bin msgproxy -- "$@"
