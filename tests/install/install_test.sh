#!/usr/bin/env bash
# install.prefix: installs the build into a temporary prefix, moves the
# prefix elsewhere (an install must not depend on where it was put), and
# builds a C and a C++ program against it both ways: with pkg-config
# (shared library) and with CMake's find_package (shared and static).  Each
# program checks that its malloc/operator new is lazymalloc's and that the
# header's version is the library's.
# Usage: install_test.sh BUILD_DIR WORK_DIR C_COMPILER CXX_COMPILER
set -euo pipefail
build=$1 work=$2 cc=$3 cxx=$4
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "install.prefix: FAIL: $*" >&2; exit 1; }
command -v pkg-config >/dev/null || fail "pkg-config not found (Debian: pkgconf; tools/deps.sh installs it)"

rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/first" >"$work/install.log" || fail "cmake --install (see $work/install.log)"
mv "$work/first" "$work/prefix"
prefix="$work/prefix"
pc=$(find "$prefix" -name lazymalloc.pc)
[[ -n $pc ]] || fail "no lazymalloc.pc under $prefix"
grep -q "$work/first" "$pc" && fail "$pc names the install prefix it was installed to: $(cat "$pc")"

# pkg-config, from the moved prefix.
export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --cflags --libs lazymalloc) || fail "pkg-config --cflags --libs lazymalloc"
libdir=$(pkg-config --variable=libdir lazymalloc)
[[ -f $libdir/liblazymalloc.so ]] || fail "pkg-config libdir $libdir has no liblazymalloc.so"
[[ -f $(pkg-config --variable=includedir lazymalloc)/lazymalloc/lazymalloc.h ]] || fail "pkg-config includedir has no lazymalloc/lazymalloc.h"
# shellcheck disable=SC2086
"$cc" "$here/consumer/app.c" -o "$work/pc_c" $flags -Wl,-rpath,"$libdir" || fail "cc with pkg-config flags: $flags"
# shellcheck disable=SC2086
"$cxx" "$here/consumer/app.cpp" -o "$work/pc_cxx" $flags -Wl,-rpath,"$libdir" || fail "c++ with pkg-config flags: $flags"
"$work/pc_c" || fail "C program built with pkg-config"
"$work/pc_cxx" || fail "C++ program built with pkg-config"
ldd "$work/pc_c" | grep "$libdir/liblazymalloc.so" >/dev/null || fail "pc_c does not load $libdir/liblazymalloc.so: $(ldd "$work/pc_c")"

# find_package, from the moved prefix.
cmake -S "$here/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
      -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release >"$work/consumer.log" 2>&1 ||
  fail "configuring a find_package(lazymalloc) project (see $work/consumer.log)"
cmake --build "$work/consumer" >>"$work/consumer.log" 2>&1 || fail "building it (see $work/consumer.log)"
grep -q "lazymalloc_DIR:PATH=$prefix/" "$work/consumer/CMakeCache.txt" || fail "find_package found another lazymalloc: $(grep lazymalloc_DIR "$work/consumer/CMakeCache.txt")"
for app in app_c app_cxx app_c_static app_cxx_static; do
  "$work/consumer/$app" || fail "$app (find_package)"
done
ldd "$work/consumer/app_c" | grep "$prefix/.*liblazymalloc.so" >/dev/null || fail "app_c does not load the prefix's liblazymalloc.so"

# The installed lazymalloc-run finds the library next to it.
if [[ -x $prefix/bin/lazymalloc-run ]]; then
  env -u LAZYMALLOC_LIB "$prefix/bin/lazymalloc-run" --print-env | grep "^LD_PRELOAD=$prefix/" >/dev/null ||
    fail "installed lazymalloc-run does not preload the prefix's library: $(env -u LAZYMALLOC_LIB "$prefix/bin/lazymalloc-run" --print-env)"
fi
echo "install.prefix: ok ($prefix)"
