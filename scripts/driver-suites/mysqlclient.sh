#!/usr/bin/env bash
# Run mysqlclient's (Python MySQLdb, built on the MariaDB C client libmariadb)
# own test suite against HOST:PORT (a MySQL/MariaDB server, or msgproxy in
# front of one), as user root with an empty password.
#
# Usage: scripts/driver-suites/mysqlclient.sh HOST PORT
#
# Set up outside the repo under ${DRIVER_SUITES_DIR:-/work/driver-suites}:
#   - apt: libmariadb-dev pkg-config gcc python3-dev python3-venv mariadb-client
#   - venv $DIR/venv (Debian's /usr/bin/python3) with pytest, pytest-timeout,
#     SQLAlchemy (tests/test_sqlalchemy.py is skipped without it) from PyPI,
#     and mysqlclient built from its PyPI sdist (which ships tests/), unpacked
#     in $DIR/src/mysqlclient-$MYSQLCLIENT_VERSION.
#   - the tests read their connection from the option file named by $TESTDB,
#     group [MySQLdb-tests]; this script writes $DIR/mysqlclient-HOST-PORT.cnf.
# Output:
#   - raw log:   $DIR/log-mysqlclient-HOST-PORT.txt (+ junit xml alongside)
#   - per test:  $DIR/results-mysqlclient-HOST-PORT.txt ("PASS|FAIL|SKIP <name>", sorted)
#   - stdout:    SUMMARY suite=mysqlclient passed=N failed=N skipped=N
# Env knobs: MYSQLCLIENT_VERSION (default 2.3.2), MYSQLCLIENT_DBNAME (default
#            mysqldb_test; created if missing), MYSQLCLIENT_TEST_TIMEOUT
#            (per-test seconds, default 300).
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
VERSION=${MYSQLCLIENT_VERSION:-2.3.2}
DBNAME=${MYSQLCLIENT_DBNAME:-mysqldb_test}
SUITE=mysqlclient
PY=/usr/bin/python3
VENV=$DIR/venv
mkdir -p "$DIR/src"

need_pkgs=()
dpkg -s libmariadb-dev >/dev/null 2>&1 || need_pkgs+=(libmariadb-dev)
command -v pkg-config >/dev/null 2>&1 || need_pkgs+=(pkg-config)
command -v gcc >/dev/null 2>&1 || need_pkgs+=(gcc)
dpkg -s python3-dev >/dev/null 2>&1 || need_pkgs+=(python3-dev)
dpkg -s python3-venv >/dev/null 2>&1 || need_pkgs+=(python3-venv)
command -v mariadb >/dev/null 2>&1 || need_pkgs+=(mariadb-client)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  msgproxy_apt_install "${need_pkgs[@]}" >&2
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" >&2
fi
if ! "$VENV/bin/python" -c 'import pytest, pytest_timeout, sqlalchemy' 2>/dev/null; then
  "$VENV/bin/pip" install -q 'pytest==9.2.0' 'pytest-timeout' 'SQLAlchemy==2.1.9' >&2
fi
SRC=$DIR/src/mysqlclient-$VERSION
SDIST=$DIR/src/mysqlclient-$VERSION.tar.gz
if [ ! -f "$SRC/tests/configdb.py" ]; then
  if [ ! -f "$SDIST" ]; then
    "$VENV/bin/pip" download -q --no-deps --no-binary :all: "mysqlclient==$VERSION" -d "$DIR/src" >&2
  fi
  tar -xzf "$SDIST" -C "$DIR/src"
  [ -f "$SRC/tests/configdb.py" ] || { echo "error: sdist $SDIST has no tests/" >&2; exit 2; }
fi
if [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mysqlclient"))' 2>/dev/null || true)" != "$VERSION" ]; then
  "$VENV/bin/pip" install -q --no-deps --no-binary :all: "$SDIST" >&2
fi

if ! mariadb --no-defaults -h "$HOST" -P "$PORT" --protocol=tcp -uroot \
     -e "CREATE DATABASE IF NOT EXISTS \`$DBNAME\`" >&2; then
  echo "error: cannot create database $DBNAME on $HOST:$PORT" >&2
  exit 2
fi

CNF=$DIR/$SUITE-$HOST-$PORT.cnf
cat > "$CNF" <<CNF
[MySQLdb-tests]
host=$HOST
port=$PORT
protocol=tcp
user=root
password=
database=$DBNAME
default-character-set=utf8mb4
CNF

LOG=$DIR/log-$SUITE-$HOST-$PORT.txt
XML=$DIR/junit-$SUITE-$HOST-$PORT.xml
RES=$DIR/results-$SUITE-$HOST-$PORT.txt
rm -f "$XML"
rc=0
(
  cd "$SRC"
  # TESTDB is joined onto tests/ by configdb.py; an absolute path wins.
  TESTDB=$CNF "$VENV/bin/python" -m pytest -v -rA -p no:cacheprovider \
    --timeout "${MYSQLCLIENT_TEST_TIMEOUT:-300}" --junitxml "$XML" tests
) > "$LOG" 2>&1 || rc=$?

if [ ! -s "$XML" ]; then
  echo "error: pytest produced no junit xml (exit $rc); see $LOG" >&2
  : > "$RES"
  echo "SUMMARY suite=$SUITE passed=0 failed=0 skipped=0"
  exit 2
fi
"$VENV/bin/python" - "$XML" "$RES" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET

xml_path, res_path = sys.argv[1], sys.argv[2]
lines = []
for tc in ET.parse(xml_path).getroot().iter("testcase"):
    name = f'{tc.get("classname", "")}::{tc.get("name", "")}'
    tags = {child.tag for child in tc}
    if tags & {"failure", "error"}:
        outcome = "FAIL"
    elif "skipped" in tags:
        outcome = "SKIP"
    else:
        outcome = "PASS"
    lines.append((name, outcome))
# A test can appear twice (e.g. call failed and teardown errored): FAIL wins.
rank = {"PASS": 0, "SKIP": 1, "FAIL": 2}
merged = {}
for name, outcome in lines:
    if name not in merged or rank[outcome] > rank[merged[name]]:
        merged[name] = outcome
with open(res_path, "w") as f:
    for name in sorted(merged):
        f.write(f"{merged[name]} {name}\n")
PYEOF

passed=$(grep -c '^PASS ' "$RES" || true)
failed=$(grep -c '^FAIL ' "$RES" || true)
skipped=$(grep -c '^SKIP ' "$RES" || true)
grep -E '^(FAIL|SKIP) ' "$RES" >&2 || true
echo "pytest exit=$rc log=$LOG results=$RES" >&2
echo "SUMMARY suite=$SUITE passed=$passed failed=$failed skipped=$skipped"
