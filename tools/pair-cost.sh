#!/usr/bin/env bash
# Instructions per small malloc/free pair under callgrind, for one or more
# liblazymalloc.so builds: runs N and 2N pairs (sizes cycling 16..512 B)
# and prints (I(2N) - I(N)) / N, so start-up and exit cancel out.
# With --time: instead times N pairs natively, REPS runs per library,
# interleaved (a, b, a, b, ...), and prints the median ns per pair and the
# min..max.
# Usage: tools/pair-cost.sh [--time] build/liblazymalloc.so [build-nochecks/liblazymalloc.so ...]
# Environment: PAIRS (default 200000; 20000000 with --time), REPS (default
# 7); LAZYMALLOC_* variables pass through.
set -euo pipefail
timing=0
if [[ "${1:-}" == "--time" ]]; then timing=1; shift; fi
n=${PAIRS:-$((timing ? 20000000 : 200000))}
reps=${REPS:-7}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/pairs.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char** argv) {
  long n = atol(argv[1]);
  /* One live object per size class, so no span ever empties (the pairs
     stay on the fast paths). */
  for (int k = 0; k < 32; ++k) (void)!malloc(16 + (size_t)k * 16);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; ++i) {
    size_t size = 16 + (size_t)(i * 7 % 32) * 16;
    char* volatile p = malloc(size);
    p[0] = 1;
    free(p);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (argc > 2) printf("%.3f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n);
  return 0;
}
C
cc -O2 -fno-builtin "$tmp/pairs.c" -o "$tmp/pairs"
count() {  # lib pairs -> total instructions
  LD_PRELOAD="$1" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$tmp/pairs" "$2" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$tmp/cg.out"
}
if ((timing)); then
  for ((r = 0; r < reps; ++r)); do
    k=0
    for lib in "$@"; do
      LD_PRELOAD="$lib" "$tmp/pairs" "$n" time >> "$tmp/t$k"
      k=$((k + 1))
    done
  done
  k=0
  for lib in "$@"; do
    sort -g "$tmp/t$k" | awk -v lib="$lib" '{v[NR] = $1} END {
      printf "%s: median %.2f ns per malloc/free pair (min %.2f, max %.2f, %d runs)\n", lib, v[int((NR + 1) / 2)], v[1], v[NR], NR }'
    k=$((k + 1))
  done
  exit 0
fi
for lib in "$@"; do
  a=$(count "$lib" "$n")
  b=$(count "$lib" $((2 * n)))
  echo "$lib: $(( (b - a) / n )) instructions per malloc/free pair"
done
