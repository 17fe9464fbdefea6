#!/usr/bin/env bash
# Run the Go MySQL driver's (github.com/go-sql-driver/mysql) own test suite
# against HOST:PORT (a MySQL/MariaDB server, or msgproxy in front of one),
# as user root with an empty password.
#
# Usage: scripts/driver-suites/go-driver.sh HOST PORT
#
# The suite is set up outside the repo under ${DRIVER_SUITES_DIR:-/work/driver-suites}:
#   - Go and the driver source come from Debian packages (golang-go,
#     golang-github-go-sql-driver-mysql-dev, which ships the *_test.go files);
#     the source is copied to $DIR/go/src and run offline in GOPATH mode.
#   - TestConnectorReturnsTimeout is patched to t.Skip in that copy: it dials
#     1.1.1.1:1234, an address outside this machine.
# Output:
#   - raw log:      $DIR/log-go-driver-HOST-PORT.txt
#   - per test:     $DIR/results-go-driver-HOST-PORT.txt  ("PASS|FAIL|SKIP <name>", sorted)
#   - stdout:       SUMMARY suite=go-driver passed=N failed=N skipped=N
# Env knobs: GO_DRIVER_DBNAME (default gotest; created if missing),
#            GO_TEST_TIMEOUT (default 10m), MYSQL_TEST_CONCURRENT (default 1).
# Exit status: 0 when the summary was produced (whatever the counts), 2 on setup errors.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

if [ $# -ne 2 ]; then
  echo "usage: $0 HOST PORT" >&2
  exit 2
fi
HOST=$1
PORT=$2
DIR=${DRIVER_SUITES_DIR:-/work/driver-suites}
DBNAME=${GO_DRIVER_DBNAME:-gotest}
SUITE=go-driver
PKG=github.com/go-sql-driver/mysql
SRC_DEB=/usr/share/gocode/src/$PKG
mkdir -p "$DIR"

need_pkgs=()
command -v go >/dev/null 2>&1 || need_pkgs+=(golang-go)
[ -f "$SRC_DEB/driver_test.go" ] || need_pkgs+=(golang-github-go-sql-driver-mysql-dev)
command -v mariadb >/dev/null 2>&1 || need_pkgs+=(mariadb-client)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  msgproxy_apt_install "${need_pkgs[@]}" >&2
fi
if [ ! -f "$SRC_DEB/driver_test.go" ]; then
  echo "error: $SRC_DEB/driver_test.go missing after install" >&2
  exit 2
fi

# Private copy of the driver source (GOPATH layout), refreshed when the Debian
# package changes.
GOPATH_DIR=$DIR/go
WORK=$GOPATH_DIR/src/$PKG
STAMP=$GOPATH_DIR/.source-version
debver=$(dpkg-query -W -f='${Version}' golang-github-go-sql-driver-mysql-dev 2>/dev/null || echo unknown)
if [ ! -f "$WORK/driver_test.go" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$debver" ]; then
  rm -rf "$WORK"
  mkdir -p "$(dirname "$WORK")"
  cp -r "$SRC_DEB" "$WORK"
  echo "$debver" > "$STAMP"
fi
# Keep the suite on this machine: skip the one test that dials a public address.
if ! grep -q 'msgproxy-harness' "$WORK/connector_test.go"; then
  sed -i 's|^func TestConnectorReturnsTimeout(t \*testing.T) {$|&\n\tt.Skip("msgproxy-harness: dials 1.1.1.1:1234, outside this machine")|' \
    "$WORK/connector_test.go"
  grep -q 'msgproxy-harness' "$WORK/connector_test.go" || { echo "error: could not patch connector_test.go" >&2; exit 2; }
fi

# The suite needs its database to exist.
if ! mariadb --no-defaults -h "$HOST" -P "$PORT" --protocol=tcp -uroot \
     -e "CREATE DATABASE IF NOT EXISTS \`$DBNAME\`" >&2; then
  echo "error: cannot create database $DBNAME on $HOST:$PORT" >&2
  exit 2
fi

LOG=$DIR/log-$SUITE-$HOST-$PORT.txt
RES=$DIR/results-$SUITE-$HOST-$PORT.txt
rc=0
(
  cd "$WORK"
  export GOPATH=$GOPATH_DIR GO111MODULE=off GOFLAGS= GOPROXY=off GOTOOLCHAIN=local \
         GOCACHE=$DIR/go-cache \
         MYSQL_TEST_USER=root MYSQL_TEST_PASS= MYSQL_TEST_PROT=tcp \
         MYSQL_TEST_ADDR="$HOST:$PORT" MYSQL_TEST_DBNAME="$DBNAME" \
         MYSQL_TEST_CONCURRENT=${MYSQL_TEST_CONCURRENT:-1}
  go test -v -count=1 -timeout "${GO_TEST_TIMEOUT:-10m}" ./...
) > "$LOG" 2>&1 || rc=$?

# "--- PASS: TestName (0.01s)", subtests indented as "    --- PASS: TestName/sub (0.00s)".
sed -nE 's/^[[:space:]]*--- (PASS|FAIL|SKIP): ([^ ]+) \(.*$/\1 \2/p' "$LOG" | sort -k2 > "$RES"

passed=$(grep -c '^PASS ' "$RES" || true)
failed=$(grep -c '^FAIL ' "$RES" || true)
skipped=$(grep -c '^SKIP ' "$RES" || true)
grep -E '^(FAIL|SKIP) ' "$RES" >&2 || true
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "warning: go test exited $rc without a failing test line (build error, panic or timeout?); see $LOG" >&2
fi
echo "go test exit=$rc log=$LOG results=$RES" >&2
echo "SUMMARY suite=$SUITE passed=$passed failed=$failed skipped=$skipped"
