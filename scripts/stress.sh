#!/usr/bin/env bash
# The flake hunt (make stress): runs the suite STRESS_RUNS times in a row
# beside a CPU hog that keeps one core busy, as a shared CI machine would,
# and lists every failure by run and test name. With STRESS_PKGS it runs go
# test of those packages (of the library's module) instead of make test.
# Each run's whole output is kept in $STRESS_DIR (a temporary folder by
# default) for the failures' details.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${STRESS_RUNS:-5}
pkgs=${STRESS_PKGS:-}
GO=${GO:-go}
dir=${STRESS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gracekit-stress.XXXXXX")}
mkdir -p "$dir"

# The hog: a busy shell loop, pinned to the last core when taskset is there.
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
hog() { while :; do :; done; }
if command -v taskset >/dev/null 2>&1; then
  hog & hogpid=$!
  taskset -pc "$((cores - 1))" "$hogpid" >/dev/null 2>&1 || true
else
  hog & hogpid=$!
fi
trap 'kill "$hogpid" 2>/dev/null; wait "$hogpid" 2>/dev/null' EXIT
trap 'exit 130' INT TERM

testsum="$dir/testsum"
"$GO" build -o "$testsum" ./internal/tools/testsum || exit 1

echo "stress: $runs runs of ${pkgs:-make test} beside a CPU hog on core $((cores - 1)); logs in $dir"
failed_runs=0
: > "$dir/failures"
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if [ -n "$pkgs" ]; then
    # shellcheck disable=SC2086 # TESTARGS and pkgs are lists
    "$GO" test -json ${TESTARGS:--race -count=1} $pkgs 2>&1 | "$testsum" -slowest 0 -label "stress run $i" > "$dir/run$i.log"
  else
    make --no-print-directory test > "$dir/run$i.log" 2>&1
  fi
  rc=$?
  took=$(( $(date +%s) - start ))
  fails=$(grep '^FAILED: ' "$dir/run$i.log" | sed 's/^FAILED: //' | sort -u)
  if [ "$rc" -ne 0 ]; then
    failed_runs=$((failed_runs + 1))
    [ -n "$fails" ] || fails="(no test named: see $dir/run$i.log)"
    while IFS= read -r f; do echo "run $i: $f" >> "$dir/failures"; done <<< "$fails"
    echo "stress: run $i of $runs FAILED in ${took}s:"
    sed 's/^/  /' <<< "$fails"
  else
    echo "stress: run $i of $runs ok in ${took}s"
  fi
done
echo "stress: runs=$runs failed_runs=$failed_runs"
if [ "$failed_runs" -gt 0 ]; then
  echo "stress: every failure, by run:"
  sed 's/^/  /' "$dir/failures"
  exit 1
fi
