#!/usr/bin/env bash
# Data-cache misses per operation of one lazybench workload under one
# allocator, load-independently: runs `lazybench run WORKLOAD` under
# cachegrind's cache simulation, preloading LIB, and prints the misses per
# operation (the workload's "ops" count) in all and per function, or per
# source line with --lines (build LIB with -g for file:line names).  The
# simulated D1 and last level are this machine's L1 data cache and L2
# (getconf), so "DLmr" counts reads that miss L2: those stall a load, where
# a write miss waits in the store buffer.  "(all)" includes the workload's
# set-up (its tables), so run it for a few seconds (-S 2 or more).
# Usage: tools/miss-cost.sh [--lines] LIB WORKLOAD [lazybench run options...]
#   tools/miss-cost.sh build/liblazymalloc.so random-size -S 2 --seed 1
#   tools/miss-cost.sh /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 rptest -S 2 --seed 1
# Environment: LAZYBENCH (default build/lazybench), TOP (rows, default 12).
set -euo pipefail
by=fn
if [[ "${1:-}" == "--lines" ]]; then by=line; shift; fi
if (($# < 2)); then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
lib=$1 workload=$2
shift 2
lazybench=${LAZYBENCH:-build/lazybench}
top=${TOP:-12}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cache() {  # getconf prefix -> size,assoc,line for valgrind
  local size assoc line
  size=$(getconf "$1_SIZE") assoc=$(getconf "$1_ASSOC") line=$(getconf "$1_LINESIZE")
  echo "${size:-0},${assoc:-0},${line:-64}"
}
d1=$(cache LEVEL1_DCACHE) l2=$(cache LEVEL2_CACHE)
args=(--tool=cachegrind --cache-sim=yes --cachegrind-out-file="$tmp/cg.out")
# valgrind's defaults where getconf knows nothing.
[[ $d1 == 0,* || $d1 == *,0,* ]] || args+=(--D1="$d1")
[[ $l2 == 0,* || $l2 == *,0,* ]] || args+=(--LL="$l2")
LD_PRELOAD="$lib" valgrind "${args[@]}" "$lazybench" run "$workload" "$@" > "$tmp/result.json" 2> "$tmp/valgrind.log" ||
  { cat "$tmp/valgrind.log" >&2; exit 1; }
ops=$(grep -o '"ops":[0-9.e+]*' "$tmp/result.json" | head -1 | cut -d: -f2)
if [[ -z "$ops" ]]; then
  echo "miss-cost.sh: $workload reported no ops count:" >&2
  cat "$tmp/result.json" >&2
  exit 1
fi
echo "$workload under $lib: $ops operations (D1 $d1, LL = L2 $l2); per operation:"
awk -v ops="$ops" -v by="$by" -v top="$top" '
  /^events:/ { for (i = 2; i <= NF; ++i) col[$i] = i - 1; next }
  /^fl=/ { fl = substr($0, 4); sub(/.*\//, "", fl); next }
  /^fn=/ { fn = substr($0, 4); next }
  /^[0-9]/ {
    key = by == "line" ? fl ":" $1 " " substr(fn, 1, 50) : fn
    split("Ir D1mr DLmr D1mw DLmw", ev, " ")
    for (e = 1; e <= 5; ++e) {
      v = $(col[ev[e]] + 1) + 0
      sum[key, e] += v
      total[e] += v
    }
    keys[key] = 1
  }
  END {
    printf "%9s %7s %7s %7s %7s\n", "Ir", "D1mr", "DLmr", "D1mw", "DLmw"
    printf "%9.1f %7.3f %7.3f %7.3f %7.3f  (all)\n", total[1] / ops, total[2] / ops, total[3] / ops, total[4] / ops, total[5] / ops
    for (k in keys) {
      line = sprintf("%9.1f %7.3f %7.3f %7.3f %7.3f  %s", sum[k, 1] / ops, sum[k, 2] / ops, sum[k, 3] / ops, sum[k, 4] / ops, sum[k, 5] / ops, substr(k, 1, 110))
      print sum[k, 2] + sum[k, 4] "\t" line > "'"$tmp"'/rows"
    }
  }' "$tmp/cg.out"
sort -t$'\t' -k1,1gr "$tmp/rows" | head -n "$top" | cut -f2-
