#!/usr/bin/env bash
# Run msgproxy's client checks for PyMySQL (the pure-Python MySQL driver; it publishes no test suite
# in its package, so clients/pymysql_checks.py runs the scenarios of clients/CHECKS.md with its API)
# against HOST:PORT (a MySQL/MariaDB server, or msgproxy in front of one), as user root with an
# empty password, in database client_checks.
#
# Usage: scripts/driver-suites/pymysql.sh HOST PORT
#
# Set up outside the repo under ${DRIVER_SUITES_DIR:-/work/driver-suites}:
#   - apt: python3-venv mariadb-client (when missing)
#   - venv $DIR/venv (Debian's /usr/bin/python3, shared with mysqlclient.sh) with PyMySQL from PyPI.
#   - database client_checks, created on HOST:PORT if missing.
# Output:
#   - raw log:   $DIR/log-pymysql-HOST-PORT.txt (the program's stderr: what each check observed)
#   - per check: $DIR/results-pymysql-HOST-PORT.txt ("PASS|FAIL|SKIP <name>", sorted; the
#                reasons are in $DIR/out-pymysql-HOST-PORT.txt)
#   - stdout:    SUMMARY suite=pymysql passed=N failed=N skipped=N
# Env knobs: PYMYSQL_VERSION (default 1.2.4).
# Exit status: 0 when the summary was produced (whatever the counts; a program that did not end
# well adds "FAIL pymysql/program"), 2 on setup errors or when it reported no check.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=scripts/driver-suites/clients/report.sh
. "$(dirname "${BASH_SOURCE[0]}")/clients/report.sh"

if [ $# -ne 2 ]; then
  echo "usage: $0 HOST PORT" >&2
  exit 2
fi
HOST=$1
PORT=$2
DIR=${DRIVER_SUITES_DIR:-/work/driver-suites}
VERSION=${PYMYSQL_VERSION:-1.2.4}
DBNAME=client_checks
SUITE=pymysql
PY=/usr/bin/python3
VENV=$DIR/venv
PROGRAM=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/clients/pymysql_checks.py
mkdir -p "$DIR"

need_pkgs=()
dpkg -s python3-venv >/dev/null 2>&1 || need_pkgs+=(python3-venv)
command -v mariadb >/dev/null 2>&1 || need_pkgs+=(mariadb-client)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  msgproxy_apt_install "${need_pkgs[@]}" >&2
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" >&2
fi
if [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("PyMySQL"))' 2>/dev/null || true)" != "$VERSION" ]; then
  "$VENV/bin/pip" install -q "PyMySQL==$VERSION" >&2
fi

if ! mariadb --no-defaults -h "$HOST" -P "$PORT" --protocol=tcp -uroot \
     -e "CREATE DATABASE IF NOT EXISTS \`$DBNAME\`" >&2; then
  echo "error: cannot create database $DBNAME on $HOST:$PORT" >&2
  exit 2
fi

LOG=$DIR/log-$SUITE-$HOST-$PORT.txt
OUT=$DIR/out-$SUITE-$HOST-$PORT.txt
RES=$DIR/results-$SUITE-$HOST-$PORT.txt
rc=0
# The program waits at most 15 s for anything, and the whole run takes about 10 s; the timeout is
# only a backstop against a hang (then the checks it did not reach show as MISSING in compare.sh).
timeout -k 10 300 "$VENV/bin/python" "$PROGRAM" "$HOST" "$PORT" >"$OUT" 2>"$LOG" || rc=$?

client_checks_report "$SUITE" "$OUT" "$RES" "$LOG" "$rc" || exit 2
