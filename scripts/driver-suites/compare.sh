#!/usr/bin/env bash
# Compare two per-test result files written by the suite scripts (go-driver.sh, mysqlclient.sh, ...)
# (lines "PASS|FAIL|SKIP <test name>"), e.g. a direct run and a through-proxy run.
#
# Usage: scripts/driver-suites/compare.sh A.txt B.txt
#
# Prints one line per test whose outcome differs, as
#   <A-outcome> -> <B-outcome>  <test name>
# where MISSING means the test has no line in that file (e.g. the run
# crashed or timed out before it), then a closing "COMPARE ..." line.
# Exit status: 0 when the outcomes are identical, 1 when any differ, 2 on usage errors.
set -euo pipefail
if [ $# -ne 2 ] || [ ! -f "$1" ] || [ ! -f "$2" ]; then
  echo "usage: $0 A.txt B.txt" >&2
  exit 2
fi
awk '
  FNR == 1 { f++ }
  NF >= 2 {
    outcome = $1
    name = $0; sub(/^[^ ]+ /, "", name)
    if (f == 1) a[name] = outcome; else b[name] = outcome
    seen[name] = 1
  }
  END {
    n = 0
    for (name in seen) {
      oa = (name in a) ? a[name] : "MISSING"
      ob = (name in b) ? b[name] : "MISSING"
      if (oa != ob) { printf "%s -> %s  %s\n", oa, ob, name | "sort -k4"; n++ }
    }
    close("sort -k4")
    printf "COMPARE differing=%d total=%d\n", n, length(seen)
    exit (n > 0)
  }
' "$1" "$2"
