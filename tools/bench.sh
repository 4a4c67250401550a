#!/usr/bin/env bash
# tools/bench.sh: build lazymalloc and compare it with glibc, jemalloc,
# tcmalloc, mimalloc and tbbmalloc on the headline workloads.
#
#   tools/bench.sh [lazybench compare arguments...]
#
# 1. As root on Debian/Ubuntu, installs what is missing of the build
#    dependencies and the peer allocators with apt-get (skipped when not root,
#    or when everything is installed already).
# 2. Configures and builds a Release build in build/ (the library, lazybench
#    and lazymalloc-run; not the tests, to stay within the time budget).
# 3. Runs `build/lazybench compare --out results` with any extra arguments,
#    e.g. `tools/bench.sh --reps 5`, `tools/bench.sh all`,
#    `tools/bench.sh --quick`, `tools/bench.sh ebizzy-2t --allocators lazymalloc,glibc`.
#
# The default run (headline set: ebizzy-1t, ebizzy-2t, phases, malloc-large;
# 6 allocators; 3 repetitions) takes about 5 minutes of benchmarking on a
# 2-core machine, under 10 minutes with the build.  See docs/benchmarks.md.
#
# Environment: BUILD_DIR (default build), RESULTS_DIR (default results),
# CMAKE_ARGS (extra configure arguments), JOBS (default nproc).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build}
RESULTS_DIR=${RESULTS_DIR:-results}
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)

say() { printf '==> %s\n' "$*" >&2; }

build_deps=(cmake make g++ libgtest-dev libbenchmark-dev libcli11-dev gnuplot-nox)
peers=(libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 libtbbmalloc2)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

if command -v dpkg-query >/dev/null 2>&1; then
  missing=()
  for p in "${build_deps[@]}" "${peers[@]}"; do
    installed "$p" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "build dependencies and peer allocators already installed"
  elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y "${missing[@]}"
  else
    say "not root: not installing ${missing[*]}"
    say "(as root: apt-get install -y ${missing[*]}; missing peer allocators are skipped)"
  fi
else
  say "no dpkg: install cmake, a C++20 compiler, CLI11, GoogleTest, gnuplot and the peer allocators yourself"
fi

say "configuring $BUILD_DIR (Release)"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
say "building lazymalloc, lazybench, lazymalloc-run with $JOBS jobs"
cmake --build "$BUILD_DIR" -j"$JOBS" --target lazymalloc lazybench lazymalloc-run
built=$(date +%s)
say "built in $((built - start)) s"

say "$BUILD_DIR/lazybench compare --out $RESULTS_DIR $*"
status=0
"$BUILD_DIR/lazybench" compare --out "$RESULTS_DIR" "$@" || status=$?

end=$(date +%s)
say "benchmarks took $((end - built)) s, $((end - start)) s in all"
say "report: $RESULTS_DIR/results.md (raw runs: $RESULTS_DIR/results.csv)"
plots=()
for f in throughput.svg phases-memory.svg; do
  [ -f "$RESULTS_DIR/$f" ] && plots+=("$RESULTS_DIR/$f")
done
if [ ${#plots[@]} -gt 0 ]; then
  say "plots: ${plots[*]}"
else
  say "no plots (is gnuplot installed?)"
fi
exit "$status"
