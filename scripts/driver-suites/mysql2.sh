#!/usr/bin/env bash
# Run msgproxy's client checks for node's mysql2 (clients/mysql2_checks.js, the scenarios of
# clients/CHECKS.md; mysql2 publishes no test suite in its package) against HOST:PORT (a
# MySQL/MariaDB server, or msgproxy in front of one), as user root with an empty password.
#
# Usage: scripts/driver-suites/mysql2.sh HOST PORT
#
# Set up outside the repo under ${DRIVER_SUITES_DIR:-/work/driver-suites}:
#   - node and npm: the machine's, or Debian's nodejs and npm (apt) when either is missing.
#   - mysql2 $MYSQL2_VERSION from npm, installed into the npm prefix $DIR/mysql2
#     (`npm install --prefix`, no package files written anywhere else); the program finds it
#     through NODE_PATH.
#   - the database client_checks on HOST:PORT (created here with mysql2 when missing).
# Output:
#   - raw log:   $DIR/log-mysql2-HOST-PORT.txt (the program's stderr: what each check observed)
#   - per check: $DIR/results-mysql2-HOST-PORT.txt ("PASS|FAIL|SKIP <name>", sorted; the reason
#                after a FAIL or SKIP is in the raw output $DIR/out-mysql2-HOST-PORT.txt)
#   - stdout:    SUMMARY suite=mysql2 passed=N failed=N skipped=N
# Env knobs: MYSQL2_VERSION (default 3.24.6), MYSQL2_TIMEOUT (seconds for the whole program,
#            default 180).
# Exit status: 0 when the summary was produced (whatever the counts), 2 on setup errors or when
# the program reported nothing.
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
VERSION=${MYSQL2_VERSION:-3.24.6}
SUITE=mysql2
PREFIX=$DIR/mysql2
PROGRAM=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/clients/mysql2_checks.js
mkdir -p "$PREFIX"

# Debian's nodejs and npm only when there is no node at all: Debian's npm beside a node from
# elsewhere (NodeSource ships its own npm) would pull in Debian's nodejs and conflict with it.
if ! command -v node >/dev/null 2>&1; then
  msgproxy_apt_install nodejs npm >&2
elif ! command -v npm >/dev/null 2>&1; then
  echo "error: node is installed but npm is not; install the npm that goes with this node" >&2
  exit 2
fi

export NODE_PATH=$PREFIX/node_modules
installed=$(node -p "require('mysql2/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$VERSION" ]; then
  # --no-save: the prefix is only a place for node_modules, it gets no package.json.
  npm install --prefix "$PREFIX" --no-save --no-audit --no-fund --loglevel=error "mysql2@$VERSION" >&2
  installed=$(node -p "require('mysql2/package.json').version" 2>/dev/null || true)
  [ "$installed" = "$VERSION" ] || { echo "error: mysql2 $VERSION did not install into $PREFIX" >&2; exit 2; }
fi

# The program connects to client_checks; create it with the driver itself (no database selected).
if ! node - "$HOST" "$PORT" >&2 <<'JS'; then
const mysql = require('mysql2/promise');
(async () => {
  const [host, port] = process.argv.slice(2);
  const conn = await mysql.createConnection({ host, port: Number(port), user: 'root', password: '' });
  await conn.query('CREATE DATABASE IF NOT EXISTS client_checks');
  await conn.end();
})().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
JS
  echo "error: cannot create database client_checks on $HOST:$PORT" >&2
  exit 2
fi

LOG=$DIR/log-$SUITE-$HOST-$PORT.txt
OUT=$DIR/out-$SUITE-$HOST-$PORT.txt
RES=$DIR/results-$SUITE-$HOST-$PORT.txt
rc=0
timeout "${MYSQL2_TIMEOUT:-180}" node "$PROGRAM" "$HOST" "$PORT" >"$OUT" 2>"$LOG" || rc=$?

client_checks_report "$SUITE" "$OUT" "$RES" "$LOG" "$rc" || exit 2
