#!/usr/bin/env bash
# make test: go test over every module (MODULES, the library's first), with
# the sd suite's per-node watch mode (ZooKeeper 3.5's fallback) as a pass of
# its own. The library's slow packages run in the foreground and their
# lines come as they come; sd's two passes (the recursive one with the
# library's small packages) and the other modules run beside them (the
# tests mostly wait on ZooKeeper) and their lines follow, in order. go
# test's JSON goes through testsum, which prints go test's usual lines and,
# at the end, every failed test by name, the ten slowest and a closing count.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
read -r -a args <<< "${TESTARGS:--race -count=1}"
read -r -a pkgs <<< "${PKGS:-./...}"
read -r -a modules <<< "${MODULES:-. examples bench}"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gracekit-test.XXXXXX") || exit 1
jobs_pids=()
cleanup() {
  for p in "${jobs_pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The tools build with the tests' -race when they have it: a cold cache
# then compiles the standard library once, not once more for two tools.
tool_flags=()
for a in "${args[@]}"; do [ "$a" != -race ] || tool_flags+=(-race); done
"$GO" build "${tool_flags[@]}" -o "$tmp/testsum" ./internal/tools/testsum || exit 1

# background NAME DIR ENV... -- go test arguments: runs go test in DIR,
# its JSON to $tmp/NAME.json and its exit code to $tmp/NAME.rc.
background() {
  local name=$1 dir=$2; shift 2
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  (cd "$dir" && env "${env[@]}" "$GO" test -json "$@" > "$tmp/$name.json" 2>&1; echo $? > "$tmp/$name.rc") &
  jobs_pids+=($!)
}

# The per-node pass runs only the sd tests that make an Instancer or a
# Catalog in the default watch mode, the one mode the pass sets
# (sd.SetDefaultWatchMode): internal/tools/watchmode finds them in the
# source. The others would run twice the same way, and their JVMs
# (ensembles, TLS servers, Curator) cost the suite minutes of CPU.
"$GO" build "${tool_flags[@]}" -o "$tmp/watchmode" ./internal/tools/watchmode || exit 1
pernode_run=$("$tmp/watchmode" "${modules[0]}/sd") || exit 1

# sd's two passes are the suite's longest (about 100 s each, mostly
# waiting on ZooKeeper): they start first, each in a go test of its own.
# In the library's ./... run, go test started sd after the packages before
# it in import-path order, 2 minutes in, and the suite ended with it.
#
# The library's other packages are split in two: the slow ones in the
# foreground, in the order given (go test -p starts packages so, and none
# of them then starts last and ends the suite), and the rest in sd's go
# test, beside sd. With all of them in the foreground, its last 30 s were
# small packages one after another, each waiting on its link and start,
# on a machine otherwise idle.
#
# packages DIR PKG...: the import paths of PKG... in DIR, in that order.
packages() {
  local dir=$1; shift
  (cd "$dir" && "$GO" list "$@" | awk '!seen[$0]++')
}
labels=()
first_pkgs=("${pkgs[@]}")
if [ "${pkgs[*]}" = "./..." ]; then
  mapfile -t first_pkgs < <(packages "${modules[0]}" ./cmd/gracekit ./zktest ./provider ./grpcresolver \
    ./fxmodule ./consumer ./endpoint ./internal/zkconn ./internal/zkwire)
  mapfile -t sd_pkgs < <(packages "${modules[0]}" ./sd/ ./... | grep -vxF -f <(printf '%s\n' "${first_pkgs[@]}"))
  [ "${#first_pkgs[@]}" -gt 0 ] && [ "${#sd_pkgs[@]}" -gt 1 ] || exit 1
  background sd . -- "${args[@]}" "${sd_pkgs[@]}"
  labels+=("sd:sd and the library's small packages")
fi
background pernode . GRACEKIT_SD_WATCH_MODE=per-node -- "${args[@]}" -run "$pernode_run" ./sd/
labels+=("pernode:sd, per-node watches")
for m in "${modules[@]:1}"; do
  mod_pkgs=("${pkgs[@]}")
  if [ "${pkgs[*]}" = "./..." ] && [ "$m" = examples ]; then
    # chaos (its planted bugs built) and quickstart (the docs' programs
    # built in a fresh module) started last in import-path order.
    mapfile -t mod_pkgs < <(packages "$m" ./chaos ./quickstart ./cachedgw ./grpc ./...)
    [ "${#mod_pkgs[@]}" -gt 0 ] || exit 1
  fi
  background "mod-${m//\//_}" "$m" -- "${args[@]}" "${mod_pkgs[@]}"
  labels+=("mod-${m//\//_}:$m")
done

rc=0
first=${modules[0]}
echo "test: $first"
(cd "$first" && "$GO" test -json "${args[@]}" "${first_pkgs[@]}" 2>&1; echo $? > "$tmp/first.rc") |
  tee "$tmp/all.json" | "$tmp/testsum" -slowest 0 -label "test: $first" || rc=1
[ "$(cat "$tmp/first.rc" 2>/dev/null)" = 0 ] || rc=1

i=0
for entry in "${labels[@]}"; do
  name=${entry%%:*} label=${entry#*:}
  wait "${jobs_pids[$i]}"
  i=$((i + 1))
  echo "test: $label"
  "$tmp/testsum" -slowest 0 -label "test: $label" < "$tmp/$name.json" || rc=1
  [ "$(cat "$tmp/$name.rc" 2>/dev/null)" = 0 ] || rc=1
  if [ "$name" = pernode ]; then
    # Named apart from the recursive pass in the summary.
    sed 's/"Package":"github.com\/gracekit\/gracekit\/sd"/"Package":"sd(per-node)"/' "$tmp/$name.json" >> "$tmp/all.json"
  else
    cat "$tmp/$name.json" >> "$tmp/all.json"
  fi
done
jobs_pids=()

echo "test: all"
"$tmp/testsum" -summary -label "make test" < "$tmp/all.json" || rc=1
# TESTJSON=file keeps every test's go test JSON, to see where the time went.
[ -z "${TESTJSON:-}" ] || cp "$tmp/all.json" "$TESTJSON" || rc=1
exit $rc
