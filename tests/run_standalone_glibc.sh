#!/bin/sh
# Builds the api/ and stress/ tests WITHOUT lazymalloc (plain glibc malloc,
# LMT_HAVE_LAZYMALLOC=0) and runs them: this checks the tests themselves
# against the reference behaviour.  Usage: tests/run_standalone_glibc.sh [outdir]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/tmp/lazymalloc-standalone-tests}
mkdir -p "$out"
flags="-std=c++20 -O2 -g -Wall -Wextra -fno-builtin -fno-allocation-dce -DLMT_HAVE_LAZYMALLOC=0 -I$here/common -pthread"
g++ $flags "$here"/api/*.cpp -o "$out/api_tests_glibc" -lgtest -lgtest_main
g++ $flags "$here"/stress/*.cpp -o "$out/stress_tests_glibc" -lgtest -lgtest_main
status=0
"$out/api_tests_glibc" || status=1
"$out/stress_tests_glibc" || status=1
exit $status
