#!/usr/bin/env bash
# Instructions per small malloc/free pair under callgrind, for one or more
# liblazymalloc.so builds: runs N and 2N pairs (sizes cycling 16..512 B)
# and prints (I(2N) - I(N)) / N, so start-up and exit cancel out.
# Usage: tools/pair-cost.sh build/liblazymalloc.so [build-nochecks/liblazymalloc.so ...]
# Environment: PAIRS (default 200000); LAZYMALLOC_* variables pass through.
set -euo pipefail
n=${PAIRS:-200000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/pairs.c" <<'C'
#include <stdlib.h>
int main(int argc, char** argv) {
  long n = atol(argv[1]);
  /* One live object per size class, so no span ever empties (the pairs
     stay on the fast paths). */
  for (int k = 0; k < 32; ++k) (void)!malloc(16 + (size_t)k * 16);
  for (long i = 0; i < n; ++i) {
    size_t size = 16 + (size_t)(i * 7 % 32) * 16;
    char* volatile p = malloc(size);
    p[0] = 1;
    free(p);
  }
  return 0;
}
C
cc -O2 -fno-builtin "$tmp/pairs.c" -o "$tmp/pairs"
count() {  # lib pairs -> total instructions
  LD_PRELOAD="$1" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$tmp/pairs" "$2" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$tmp/cg.out"
}
for lib in "$@"; do
  a=$(count "$lib" "$n")
  b=$(count "$lib" $((2 * n)))
  echo "$lib: $(( (b - a) / n )) instructions per malloc/free pair"
done
