#!/usr/bin/env bash
# Installs what lazymalloc needs to build, test and benchmark on Debian 12.
# As root it runs apt-get for whatever is missing; otherwise it reports what
# is missing and fails only if --require is given.
# Usage: tools/deps.sh [--with-peers] [--require] [EXTRA-PACKAGE...]
set -euo pipefail
# redis-server and redis-tools (redis-benchmark, redis-cli): the server that
# `lazybench server` benchmarks, in the base list because bench.server.quick
# runs it (so --with-peers has them too).
pkgs=(cmake g++ make libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev python3 time procps
      git sqlite3 gawk clang libclang-rt-14-dev nlohmann-json3-dev redis-server redis-tools pkgconf
      gnuplot-nox)
require=0
while (($#)); do
  case "$1" in
    --with-peers)
      pkgs+=(libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 libtbbmalloc2 linux-perf strace
            valgrind)
      ;;
    --require) require=1 ;;
    *) pkgs+=("$1") ;;
  esac
  shift
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then exit 0; fi
if [[ $(id -u) -ne 0 ]]; then
  echo "deps: missing packages (install as root): ${missing[*]}" >&2
  exit $((require ? 2 : 0))
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
