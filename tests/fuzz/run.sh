#!/usr/bin/env bash
# Builds fuzz_malloc with clang, libFuzzer, ASan and UBSan (the allocator is
# coverage- and sanitizer-instrumented too) in a separate build tree, and
# fuzzes it for a bounded time starting from the committed seed corpus.
#
# Usage: tests/fuzz/run.sh [SECONDS] [extra libFuzzer flags...]   (default 60 s)
#   FUZZ_BUILD_DIR  build tree (default: build-fuzz at the repository root)
#   FUZZ_JOBS       build parallelism (default 2)
#   FUZZ_UBSAN_SUPP UBSan suppressions (default tests/fuzz/ubsan.supp; empty: none)
# New interesting inputs go to $FUZZ_BUILD_DIR/corpus (not into the repo);
# a crash's reproducer is written to tests/fuzz/regressions/crash-<sha1>.
# Reproduce: $FUZZ_BUILD_DIR/fuzz_malloc tests/fuzz/regressions/crash-<sha1>
# Exit status: libFuzzer's (non-zero on a crash, timeout, OOM or sanitizer
# report), or 2 if the build fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
secs=${1:-60}
[[ $# -gt 0 ]] && shift
[[ "$secs" =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS] [libFuzzer flags...]" >&2; exit 2; }
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-2}
command -v clang++ >/dev/null || { echo "run.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }

# Instrument everything built in this tree: coverage for libFuzzer
# (fuzzer-no-link; the fuzz_malloc target itself adds -fsanitize=fuzzer),
# ASan and UBSan.  Debug: no -DNDEBUG, so assertions stay on.
# UBSan checks stay recoverable so tests/fuzz/ubsan.supp can silence known
# findings; halt_on_error=1 below makes every other report fatal.
san="-fsanitize=fuzzer-no-link,address,undefined"
flags="-O1 -g -fno-omit-frame-pointer $san"
mkdir -p "$build"
if ! CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
      -DLAZYMALLOC_BUILD_BENCH=OFF -DLAZYMALLOC_BUILD_TOOLS=OFF \
      -DLAZYMALLOC_BUILD_EXAMPLES=OFF -DLAZYMALLOC_BUILD_TESTS=OFF \
      -DCMAKE_PROJECT_lazymalloc_INCLUDE="$root/tests/fuzz/hook.cmake" >"$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  echo "run.sh: configure failed" >&2
  exit 2
fi
if ! cmake --build "$build" -j"$jobs" --target fuzz_malloc; then
  echo "run.sh: build failed (see above)" >&2
  exit 2
fi
bin="$build/fuzz_malloc"
[[ -x "$bin" ]] || bin=$(find "$build" -name fuzz_malloc -type f -perm -u+x | head -1)

mkdir -p "$build/corpus" tests/fuzz/regressions
log="$build/fuzz.log"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:allocator_may_return_null=0}"
supp=${FUZZ_UBSAN_SUPP-$root/tests/fuzz/ubsan.supp}
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1${supp:+:suppressions=$supp}}"
echo "run.sh: fuzzing for ${secs}s ($bin), log in $log"
set +e
"$bin" -max_total_time="$secs" -print_final_stats=1 -timeout=30 -rss_limit_mb=4096 \
  -max_len=4096 -artifact_prefix=tests/fuzz/regressions/ "$@" \
  "$build/corpus" tests/fuzz/corpus >"$log" 2>&1
rc=$?
set -e
# libFuzzer's last status line: execs, coverage (cov), features (ft), exec/s.
grep -E '^#[0-9]+' "$log" | tail -1 || true
grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)' "$log" || true
if ((rc != 0)); then
  echo "run.sh: FAILED (exit $rc); last lines of $log:" >&2
  tail -40 "$log" >&2
  ls -1 tests/fuzz/regressions/ 2>/dev/null | sed 's/^/run.sh: artifact tests\/fuzz\/regressions\//' >&2
fi
exit $rc
