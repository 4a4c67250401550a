#!/usr/bin/env bash
# tools/bench.sh: build lazymalloc and compare it with glibc, jemalloc,
# tcmalloc, mimalloc and tbbmalloc on the headline workloads.
#
#   tools/bench.sh [lazybench compare arguments...]
#
# 1. Runs `tools/deps.sh --with-peers`: as root on Debian/Ubuntu it installs
#    what is missing of the build dependencies, the peer allocators and
#    gnuplot-nox (apt-get --no-install-recommends); not as root it lists
#    what is missing (missing peer allocators are then skipped).
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

# tools/deps.sh has the one package list (build, tests, peers, gnuplot-nox);
# as root it installs what is missing with --no-install-recommends.
if command -v dpkg-query >/dev/null 2>&1; then
  tools/deps.sh --with-peers
else
  say "no dpkg: install cmake, a C++20 compiler, CLI11, GoogleTest, nlohmann-json, gnuplot and the peer allocators yourself"
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
