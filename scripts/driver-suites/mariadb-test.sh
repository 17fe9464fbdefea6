#!/usr/bin/env bash
# Run MariaDB's own regression suite (mysql-test-run, "mtr", from Debian's mariadb-test package) in
# --extern mode against HOST:PORT (a MariaDB server, or msgproxy in front of one), as user root with an
# empty password: the `main` tests listed in mariadb-test.list, in that order.
#
# Usage: scripts/driver-suites/mariadb-test.sh HOST PORT [TEST...]
#        (TEST, e.g. main.sp-cursor: run these instead of the list; for trying candidates)
#
# For a THROWAWAY server only: --extern runs the tests' SQL on the server as it is, and this script
# resets it around them. Before the run it drops every database but the system ones and creates an empty
# `test` (what the tests expect), and sets the two global variables mtr's own servers start with that
# the recorded results depend on (default_storage_engine=MyISAM, log_bin_trust_function_creators=1;
# restored at the end). A test that fails can leave tables, databases and users behind and fail every
# test after it for no reason of its own, so mtr stops at a failing test (no --force), the script resets
# the server again (the databases, and the users the run added) and starts mtr on the next test.
# Files the tests read from the server's side by the path ../../std_data (relative to the data
# directory, as in mtr's own layout) are found through a link to mysql-test/std_data made there when
# the server's data directory is on this machine and nothing has that name yet. Like mtr's own servers,
# the server gets an `mtr` database (mtr.add_suppression() and the like; SHOW DATABASES lists it).
# A test that has not ended after MARIADB_TEST_TIMEOUT seconds is killed by mtr and counts as failed:
# a hang through msgproxy is a difference, not a stuck run.
#
# Set up under ${DRIVER_SUITES_DIR:-/work/driver-suites}:
#   - apt: mariadb-test, mariadb-client (when missing)
#   - mtr's working directory $DIR/mtr-var-HOST-PORT (made afresh each run)
# Output:
#   - raw log:   $DIR/log-mariadb-test-HOST-PORT.txt (every mtr run's output: diffs, timeouts)
#   - per test:  $DIR/results-mariadb-test-HOST-PORT.txt ("PASS|FAIL|SKIP main.<test>", sorted; a test
#                the run never reached, e.g. past the deadline, is a FAIL)
#   - stdout:    SUMMARY suite=mariadb-test passed=N failed=N skipped=N
# Env knobs: MARIADB_TEST_TIMEOUT (seconds one test may take before mtr kills it and reports it
#            failed, default 30), MARIADB_TEST_DEADLINE (seconds for the whole run, default 600),
#            MARIADB_TEST_LIST (the list file, default mariadb-test.list next to this script).
# Exit status: 0 when the summary was produced (whatever the counts), 2 on setup errors.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

if [ $# -lt 2 ]; then
  echo "usage: $0 HOST PORT [TEST...]" >&2
  exit 2
fi
HOST=$1
PORT=$2
shift 2
DIR=${DRIVER_SUITES_DIR:-/work/driver-suites}
SUITE=mariadb-test
LIST=${MARIADB_TEST_LIST:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/mariadb-test.list}
TEST_TIMEOUT=${MARIADB_TEST_TIMEOUT:-30}
DEADLINE=${MARIADB_TEST_DEADLINE:-600}
MTR_DIR=/usr/share/mysql/mysql-test
mkdir -p "$DIR"

need_pkgs=()
[ -x "$MTR_DIR/mariadb-test-run" ] || need_pkgs+=(mariadb-test)
command -v mariadb >/dev/null 2>&1 || need_pkgs+=(mariadb-client)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  msgproxy_apt_install "${need_pkgs[@]}" >&2
fi
[ -x "$MTR_DIR/mariadb-test-run" ] || { echo "error: $MTR_DIR/mariadb-test-run missing after installing mariadb-test" >&2; exit 2; }

tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  [ -f "$LIST" ] || { echo "error: no test list $LIST" >&2; exit 2; }
  mapfile -t tests < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$LIST" | grep -v '^$')
  [ ${#tests[@]} -gt 0 ] || { echo "error: $LIST names no test" >&2; exit 2; }
fi

LOG=$DIR/log-$SUITE-$HOST-$PORT.txt
RES=$DIR/results-$SUITE-$HOST-$PORT.txt
VAR=$DIR/mtr-var-$HOST-$PORT
: >"$LOG"
: >"$RES.unsorted"

sql() {
  mariadb --no-defaults -h "$HOST" -P "$PORT" --protocol=tcp -uroot --batch --skip-column-names "$@"
}

# The server's state before the run: its users (a failing test's are dropped again) and the globals
# changed below (put back at the end).
if ! globals=$(sql -e 'SELECT @@global.default_storage_engine, @@global.log_bin_trust_function_creators'); then
  echo "error: cannot query $HOST:$PORT" >&2
  exit 2
fi
read -r old_engine old_trust <<<"$globals"
users_before=$(sql -e "SELECT CONCAT(QUOTE(user), '@', QUOTE(host)) FROM mysql.user ORDER BY 1")
restore_globals() {
  sql -e "SET GLOBAL default_storage_engine=$old_engine, GLOBAL log_bin_trust_function_creators=$old_trust" >&2 ||
    echo "warning: could not restore default_storage_engine/log_bin_trust_function_creators on $HOST:$PORT" >&2
}
trap restore_globals EXIT

# The server's data directory when it is on this machine (else empty).
datadir=$(sql -e 'SELECT @@datadir' || true)
[ -n "$datadir" ] && [ -d "$datadir" ] || datadir=""

# Drops every database but the system ones, and every user the run added, and makes an empty `test` and
# mtr's `mtr`.
# A session left behind by a test that hung may still hold a lock: the wait for it is bounded. A file
# a failed test wrote into a database's directory (SELECT ... INTO OUTFILE 'name') keeps the server
# from dropping it: such files, none of a table's, are removed and the drop is tried again.
reset_server() {
  local db user others=""
  while read -r db; do
    [ -n "$db" ] || continue
    if ! sql -e "SET SESSION lock_wait_timeout=20; DROP DATABASE IF EXISTS \`$db\`" 2>/dev/null; then
      [ -n "$datadir" ] && [ -d "$datadir/$db" ] || return 1
      find "$datadir/$db" -maxdepth 1 -type f ! -regex '.*\.\(frm\|ibd\|MYD\|MYI\|MAD\|MAI\|par\|TRG\|TRN\|CSV\|CSM\|opt\|isl\)' -delete
      sql -e "SET SESSION lock_wait_timeout=20; DROP DATABASE IF EXISTS \`$db\`" >&2 || return 1
    fi
  done < <(sql -e "SELECT schema_name FROM information_schema.schemata
                   WHERE schema_name NOT IN ('mysql','information_schema','performance_schema','sys')")
  while read -r user; do
    [ -n "$user" ] && ! grep -qxF "$user" <<<"$users_before" && others+="DROP USER IF EXISTS $user;"
  done < <(sql -e "SELECT CONCAT(QUOTE(user), '@', QUOTE(host)) FROM mysql.user WHERE is_role = 'N'")
  while read -r user; do
    [ -n "$user" ] && ! grep -qxF "$user@''" <<<"$users_before" && others+="DROP ROLE IF EXISTS $user;"
  done < <(sql -e "SELECT QUOTE(user) FROM mysql.user WHERE is_role = 'Y'")
  sql -e "${others}CREATE DATABASE test" >&2 || return 1
  # The `mtr` database mtr's own servers have (mtr.add_suppression() and the like), made as mtr makes
  # it: without the lines starting with "--" and with the client's delimiter syntax.
  {
    echo "CREATE DATABASE mtr CHARSET=latin1;"
    sed -e '/^[[:space:]]*--/d' -e 's/^delimiter ||;$/delimiter ||/' \
      "$MTR_DIR/include/mtr_warnings.sql" "$MTR_DIR/include/mtr_check.sql"
  } | sql >&2
}

if ! reset_server || ! sql -e 'SET GLOBAL default_storage_engine=MyISAM, GLOBAL log_bin_trust_function_creators=1' >&2; then
  echo "error: cannot prepare $HOST:$PORT for the tests" >&2
  exit 2
fi

# ../../std_data from the data directory, when the server runs here (see the header).
if [ -n "$datadir" ]; then
  link=$(cd "$datadir/../.." && pwd -P)/std_data
  [ -e "$link" ] || [ -L "$link" ] || ln -s "$MTR_DIR/std_data" "$link" || true
fi

# mtr against the server for the tests "$@", stopping at the first that fails; appends its result lines
# ("PASS|FAIL|SKIP name") to $RES.unsorted. MTR_TESTCASE_TIMEOUT is in minutes and, unlike the
# --testcase-timeout option, may be a fraction.
run_mtr() {
  local left=$1 out rc=0
  shift
  rm -rf "$VAR"
  mkdir -p "$VAR/log"
  out=$VAR/mtr-out.txt
  (
    cd "$MTR_DIR"
    MTR_TESTCASE_TIMEOUT=$(awk -v s="$TEST_TIMEOUT" 'BEGIN { print s / 60 }') \
      timeout -k 10 "$left" ./mariadb-test-run --extern host="$HOST" --extern port="$PORT" \
      --extern user=root --extern protocol=tcp --vardir="$VAR" --parallel=1 --no-reorder \
      --retry=1 --retry-failure=0 --max-test-fail=1 --suite-timeout=$(((left + 59) / 60)) "$@"
  ) >"$out" 2>&1 || rc=$?
  cat "$out" >>"$LOG"
  echo "mtr exit=$rc" >>"$LOG"
  # "main.name   [ pass ]   123", "main.name   [ fail ]  timeout after 60 seconds"
  sed -nE 's/^(main\.[^ ]+) +\[ (pass|fail|skipped|disabled) \].*$/\2 \1/p' "$out" |
    sed -e 's/^pass /PASS /' -e 's/^fail /FAIL /' -e 's/^skipped /SKIP /' -e 's/^disabled /SKIP /' \
      >>"$RES.unsorted"
}

start=$SECONDS
todo=("${tests[@]}")
while [ ${#todo[@]} -gt 0 ]; do
  left=$((DEADLINE - (SECONDS - start)))
  if [ "$left" -le 0 ]; then
    echo "deadline of ${DEADLINE}s reached: ${#todo[@]} tests not run" | tee -a "$LOG" >&2
    printf 'FAIL %s\n' "${todo[@]}" >>"$RES.unsorted"
    break
  fi
  run_mtr "$left" "${todo[@]}"
  # Go on after the last test mtr reported; when it reported none of them (it could not start, or the
  # server went away), count the first as failed so that the loop always ends.
  last=-1
  for i in "${!todo[@]}"; do
    grep -qE "^(PASS|FAIL|SKIP) ${todo[$i]}\$" "$RES.unsorted" && last=$i
  done
  if [ "$last" -lt 0 ]; then
    echo "FAIL ${todo[0]}" >>"$RES.unsorted"
    echo "mtr reported nothing for ${todo[0]} (see above); counting it failed" >>"$LOG"
    last=0
  fi
  todo=("${todo[@]:$((last + 1))}")
  if [ ${#todo[@]} -gt 0 ] && ! reset_server; then
    echo "warning: could not reset $HOST:$PORT after a failing test; going on" | tee -a "$LOG" >&2
  fi
done
reset_server || true
LC_ALL=C sort -k2 -u "$RES.unsorted" >"$RES"
rm -f "$RES.unsorted"

passed=$(grep -c '^PASS ' "$RES" || true)
failed=$(grep -c '^FAIL ' "$RES" || true)
skipped=$(grep -c '^SKIP ' "$RES" || true)
grep -E '^(FAIL|SKIP) ' "$RES" >&2 || true
echo "$SUITE took $((SECONDS - start))s log=$LOG results=$RES" >&2
echo "SUMMARY suite=$SUITE passed=$passed failed=$failed skipped=$skipped"
