#!/bin/sh
# What every process that loads the library pays before it allocates
# (issue #14): .data is copied into private, dirty pages, and each
# R_X86_64_RELATIVE relocation writes a pointer at load time.  The page map
# and the process-wide allocator are zero in .bss; one non-zero member
# initialiser in them once moved 260 KB of it into .data.
set -eu
lib=$1
hex=$(readelf -SW "$lib" | awk '$2 == ".data" { print $6 }')
[ -n "$hex" ] || { echo "no .data section in $lib" >&2; exit 1; }
data=$((0x$hex))
relocs=$(readelf -rW "$lib" | grep -c R_X86_64_RELATIVE || true)
echo ".data: $data bytes, RELATIVE relocations: $relocs"
[ "$data" -le 16384 ] || { echo "FAIL: .data is $data bytes (at most 16384)" >&2; exit 1; }
[ "$relocs" -le 1000 ] || { echo "FAIL: $relocs relative relocations (at most 1000)" >&2; exit 1; }
