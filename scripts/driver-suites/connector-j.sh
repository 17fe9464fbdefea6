#!/usr/bin/env bash
# Run msgproxy's client checks (clients/CHECKS.md) with MariaDB Connector/J (JDBC) against HOST:PORT
# (a MySQL/MariaDB server, or msgproxy in front of one), as user root with an empty password.
# Connector/J ships no test suite of its own in Debian's package: the program is
# clients/ConnectorJChecks.java, plain JDBC as an application uses it.
#
# Usage: scripts/driver-suites/connector-j.sh HOST PORT
#
# Set up (Maven Central is not used: Connector/J comes from Debian):
#   - apt: libmariadb-java (the distribution's version, logged; the jar is
#     /usr/share/java/mariadb-java-client.jar), default-jdk-headless when javac is missing,
#     mariadb-client (to create the database).
#   - the program is compiled with javac into ${DRIVER_SUITES_DIR:-/work/driver-suites}/connector-j/classes,
#     again whenever the source (or the jar) is newer than the class.
#   - database client_checks is created on HOST:PORT if missing.
# Output:
#   - raw log:   $DIR/log-connector-j-HOST-PORT.txt (what each check observed, stack traces,
#                then the program's own outcome lines with their reasons)
#   - per check: $DIR/results-connector-j-HOST-PORT.txt ("PASS|FAIL|SKIP <name>", sorted)
#   - stdout:    SUMMARY suite=connector-j passed=N failed=N skipped=N
# Env knobs: CONNECTOR_J_TIMEOUT (seconds for the whole program, default 180).
# Exit status: 0 when the summary was produced (whatever the counts; a program that did not end
# well adds "FAIL connector-j/program"), 2 on setup errors or when it reported no check.
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
SUITE=connector-j
DBNAME=client_checks
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/clients/ConnectorJChecks.java
JAR=/usr/share/java/mariadb-java-client.jar
CLASSES=$DIR/$SUITE/classes
mkdir -p "$CLASSES"

# Whatever version the distribution has (2.7.6 on Debian 12): a pinned one would fail to install
# after a point release, or on another release. The log records the one that ran.
need_pkgs=()
dpkg -s libmariadb-java >/dev/null 2>&1 || need_pkgs+=(libmariadb-java)
command -v javac >/dev/null 2>&1 || need_pkgs+=(default-jdk-headless)
command -v mariadb >/dev/null 2>&1 || need_pkgs+=(mariadb-client)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  msgproxy_apt_install "${need_pkgs[@]}" >&2
fi
[ -f "$JAR" ] || { echo "error: $JAR not found after installing libmariadb-java" >&2; exit 2; }
echo "Connector/J: libmariadb-java $(dpkg-query -W -f='${Version}' libmariadb-java)" >&2

CLASS=$CLASSES/ConnectorJChecks.class
if [ ! -f "$CLASS" ] || [ "$SRC" -nt "$CLASS" ] || [ "$JAR" -nt "$CLASS" ]; then
  rm -rf "$CLASSES" && mkdir -p "$CLASSES"
  if ! javac -encoding UTF-8 -cp "$JAR" -d "$CLASSES" "$SRC" >&2; then
    echo "error: cannot compile $SRC" >&2
    exit 2
  fi
fi

if ! mariadb --no-defaults -h "$HOST" -P "$PORT" --protocol=tcp -uroot \
     -e "CREATE DATABASE IF NOT EXISTS \`$DBNAME\`" >&2; then
  echo "error: cannot create database $DBNAME on $HOST:$PORT" >&2
  exit 2
fi

LOG=$DIR/log-$SUITE-$HOST-$PORT.txt
OUT=$DIR/$SUITE/outcomes-$HOST-$PORT.txt
RES=$DIR/results-$SUITE-$HOST-$PORT.txt
rc=0
# UTC: java.sql.Timestamp/Date/Time values are shown in the JVM's time zone, and must not depend
# on the machine's.
timeout "${CONNECTOR_J_TIMEOUT:-180}" java -Duser.timezone=UTC -Dfile.encoding=UTF-8 \
  -cp "$CLASSES:$JAR" ConnectorJChecks "$HOST" "$PORT" >"$OUT" 2>"$LOG" || rc=$?
{
  echo "=== outcomes (exit $rc) ==="
  cat "$OUT"
} >>"$LOG"

client_checks_report "$SUITE" "$OUT" "$RES" "$LOG" "$rc" || exit 2
