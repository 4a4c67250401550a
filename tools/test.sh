#!/usr/bin/env bash
# Builds lazymalloc and runs every test: unit (fake platform), API
# conformance, stress, fork and thread churn, LD_PRELOAD runs of real
# programs, the benchmark harness's tests; then the unit and stress tests
# again under ThreadSanitizer and UndefinedBehaviorSanitizer; then a bounded
# libFuzzer run (ASan + UBSan) of tests/fuzz/fuzz_malloc when clang can link
# libFuzzer (a crash, hang or sanitizer report fails the run).
#
# Usage: tools/test.sh [--no-sanitizers] [ctest args...]
# Environment: BUILD_DIR (default build), JOBS (default nproc),
#   FUZZ_SECONDS (default 60; 0 skips the fuzz run).
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=1
if [[ "${1:-}" == "--no-sanitizers" ]]; then sanitizers=0; shift; fi
jobs=${JOBS:-$(nproc)}
build=${BUILD_DIR:-build}

tools/deps.sh

start=$(date +%s)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600 "$@"

if ((sanitizers)); then
  for san in thread undefined; do
    dir="$build-$san"
    echo "=== $san sanitizer: unit and stress tests ==="
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYMALLOC_SANITIZE=$san \
      -DLAZYMALLOC_BUILD_BENCH=OFF -DLAZYMALLOC_BUILD_TOOLS=OFF -DLAZYMALLOC_BUILD_EXAMPLES=OFF >/dev/null
    cmake --build "$dir" -j"$jobs"
    # ThreadSanitizer does not support fork() in a multi-threaded process: the
    # child can deadlock inside the TSan runtime (seen here: children of
    # Stress.ForkChildCanExitNormally stuck until their 30 s alarm).  The fork
    # tests run in the plain and UBSan builds.
    exclude='^$'
    [[ $san == thread ]] && exclude='Fork'
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1" \
      ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 900 -R '^(unit|stress|fuzz)\.' -E "$exclude"
  done
  fuzz_secs=${FUZZ_SECONDS:-60}
  probe=$(mktemp -d)
  if ((fuzz_secs > 0)) && command -v clang++ >/dev/null &&
     echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
       clang++ -x c++ -fsanitize=fuzzer - -o "$probe/probe" 2>/dev/null; then
    echo "=== fuzz: ${fuzz_secs} s of libFuzzer with ASan and UBSan ==="
    fuzz_start=$(date +%s)
    # libFuzzer replays its whole corpus before the time limit applies (about
    # 4 inputs/s): start from the committed seeds so the run stays bounded.
    rm -rf "$build-fuzz/corpus"
    FUZZ_BUILD_DIR="$build-fuzz" FUZZ_JOBS="$jobs" tests/fuzz/run.sh "$fuzz_secs"
    echo "fuzz: build and run took $(( $(date +%s) - fuzz_start )) s"
  elif ((fuzz_secs > 0)); then
    echo "=== fuzz: skipped (no clang++ that links -fsanitize=fuzzer; Debian: clang libclang-rt-14-dev) ==="
  fi
  rm -rf "$probe"
fi
echo "all tests passed in $(( $(date +%s) - start )) s"
