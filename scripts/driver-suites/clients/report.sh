# shellcheck shell=bash
# Shared by the client-check suite scripts (pymysql.sh, mysql2.sh, connector-j.sh), sourced.
#
#   client_checks_report SUITE OUT RES LOG RC
#
# Turns a check program's stdout (OUT) into the results file compare.sh reads (RES) and prints the
# SUMMARY line. RES holds "OUTCOME name" lines, sorted: a FAIL's or SKIP's reason (after ": ") stays
# in OUT, because a reason may hold a value that varies from run to run and compare.sh matches checks
# by name. A program that did not exit 0 (a crash, the timeout) adds "FAIL SUITE/program": that must
# show in the comparison, never pass silently. Returns 2 when the program reported no check at all.
client_checks_report() {
    local suite=$1 out=$2 res=$3 log=$4 rc=$5
    grep -E '^(PASS|FAIL|SKIP) ' "$out" | sed -E 's/^((PASS|FAIL|SKIP) [^ :]+)(: .*)?$/\1/' |
        LC_ALL=C sort >"$res" || true
    if [ "$rc" -ne 0 ]; then
        echo "FAIL $suite/program: exited with status $rc (see $log)" >>"$res"
    fi
    local passed failed skipped
    passed=$(grep -c '^PASS ' "$res" || true)
    failed=$(grep -c '^FAIL ' "$res" || true)
    skipped=$(grep -c '^SKIP ' "$res" || true)
    grep -E '^FAIL ' "$out" >&2 || true
    echo "$suite checks exit=$rc log=$log results=$res" >&2
    echo "SUMMARY suite=$suite passed=$passed failed=$failed skipped=$skipped"
    if ! grep -qE '^(PASS|FAIL|SKIP) ' "$out"; then
        echo "error: the $suite checks reported nothing (exit $rc); see $log" >&2
        return 2
    fi
}
